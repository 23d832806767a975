#!/usr/bin/env python3
"""Writes docs/reference.md, the attribute reference of the Starlark API, from the .bzl files themselves.

The attributes and their docs are written once, in `python/private/specs.bzl` (`patched_wheel`) and
`python/private/hub.bzl` (`index`); a hand-copied table drifts from them. So this script *evaluates*
the public .bzl files rather than matching their text: Starlark's syntax is a subset of Python's, so
each file runs under Python with stand-ins for the few Bazel built-ins used at load time (`attr.*`,
`struct`, `tag_class`, `module_extension`, `repository_rule`, `load`). What comes out is what Bazel
sees: the tag classes of the `patched` extension as `module_extension(...)` receives them, the
WORKSPACE macros with their real parameters and defaults, and the BUILD macro `layout_test` with the
parameters of its signature, documented by its docstring's `Args:`.

    tools/gen_reference.py            rewrite docs/reference.md
    tools/gen_reference.py --check    exit 1 (naming the command to run) when docs/reference.md is stale

Pure Python, no Bazel; tests/python/test_reference.py runs `render()` and compares.
"""

from __future__ import annotations

import argparse
import inspect
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
OUTPUT = ROOT / "docs" / "reference.md"


@dataclass
class Attribute:
    """One `attr.<kind>(...)` as Bazel would receive it."""

    kind: str
    kwargs: dict[str, Any] = field(default_factory=dict)

    @property
    def doc(self) -> str:
        return self.kwargs.get("doc", "")


class _AttrModule:
    """Stand-in for Starlark's `attr` module: every `attr.KIND(**kwargs)` records its kind and arguments."""

    def __getattr__(self, kind: str) -> Callable[..., Attribute]:
        if kind.startswith("__"):
            raise AttributeError(kind)
        return lambda **kwargs: Attribute(kind, kwargs)


@dataclass
class Rule:
    """What `tag_class`, `module_extension` or `repository_rule` was given."""

    kind: str
    kwargs: dict[str, Any]


def _external(label: str, name: str) -> Callable[..., Rule]:
    """Stand-in for a symbol loaded from another repository."""
    return lambda *args, **kwargs: Rule(f"{label}%{name}", kwargs)


class _Native:
    """Stand-in for `native`: load-time calls such as `native.bazel_version` or a macro's `native.X(...)`."""

    bazel_version = ""

    def __getattr__(self, name: str) -> Callable[..., Rule]:
        if name.startswith("__"):
            raise AttributeError(name)
        return lambda *args, **kwargs: Rule(f"native.{name}", kwargs)


class StarlarkError(Exception):
    """A .bzl file called `fail()` at load time."""


def _fail(*args: object) -> None:
    raise StarlarkError(" ".join(str(arg) for arg in args))


class Loader:
    """Evaluates .bzl files of this repository, each once, resolving `load()` between them."""

    def __init__(self, root: Path = ROOT) -> None:
        self.root = root
        self.modules: dict[Path, dict[str, Any]] = {}

    def path(self, label: str, relative_to: Path) -> Path | None:
        """The file a label names in this repository; None for another repository's (not evaluated)."""
        for own in ("@rules_patched_wheels//", "@//", "//"):
            if label.startswith(own):
                package, _, name = label[len(own) :].partition(":")
                return self.root / package / name
        if label.startswith(":"):
            return relative_to.parent / label[1:]
        return None

    def globals(self, path: Path) -> dict[str, Any]:
        path = path.resolve()
        if path not in self.modules:
            self.modules[path] = self._evaluate(path)
        return self.modules[path]

    def _evaluate(self, path: Path) -> dict[str, Any]:
        namespace: dict[str, Any] = {}

        def load(label: str, *names: str, **aliases: str) -> None:
            target = self.path(label, path)
            for local, exported in [(name, name) for name in names] + list(aliases.items()):
                # Another repository's symbol (rules_python's, ...) is only called at load time, never
                # documented here: a stand-in that records the call is enough.
                namespace[local] = _external(label, exported) if target is None else self.globals(target)[exported]

        namespace.update(
            __builtins__=__builtins__,
            load=load,
            attr=_AttrModule(),
            struct=types.SimpleNamespace,
            fail=_fail,
            json=types.SimpleNamespace(encode=repr, decode=None, encode_indent=repr),
            Label=str,
            tag_class=lambda **kwargs: Rule("tag_class", kwargs),
            module_extension=lambda **kwargs: Rule("module_extension", kwargs),
            repository_rule=lambda **kwargs: Rule("repository_rule", kwargs),
            rule=lambda **kwargs: Rule("rule", kwargs),
            provider=lambda *args, **kwargs: Rule("provider", kwargs),
            native=_Native(),
            select=lambda conditions, **kwargs: conditions,
        )
        source = path.read_text(encoding="utf-8")
        exec(compile(source, str(path), "exec"), namespace)
        return namespace


def _code(value: object) -> str:
    """A default as it is written in Starlark."""
    if value is None:
        return "`None`"
    if isinstance(value, bool):
        return "`True`" if value else "`False`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, list):
        return "`[" + ", ".join(f'"{item}"' if isinstance(item, str) else str(item) for item in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value!r}`"
    return f"`{value}`"


_EMPTY_DEFAULTS = {
    "string": "",
    "int": 0,
    "bool": False,
    "string_list": [],
    "label_list": [],
    "string_dict": {},
    "label": None,
}


def _cell(text: str) -> str:
    """Markdown table cell: one line, `|` escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _attribute_rows(attrs: dict[str, Attribute]) -> list[str]:
    rows = ["| attribute | type | default | doc |", "| --- | --- | --- | --- |"]
    # Mandatory attributes first (what every use writes), then in declaration order.
    ordered = sorted(attrs.items(), key=lambda item: not item[1].kwargs.get("mandatory"))
    for name, attribute in ordered:
        kwargs = attribute.kwargs
        kind = attribute.kind
        if kwargs.get("allow_single_file"):
            kind = (
                "label (one file"
                + (
                    ", " + " ".join(kwargs["allow_single_file"])
                    if isinstance(kwargs["allow_single_file"], list)
                    else ""
                )
                + ")"
            )
        elif kwargs.get("allow_files") and isinstance(kwargs["allow_files"], list):
            kind += " (" + " ".join(kwargs["allow_files"]) + ")"
        default = "mandatory" if kwargs.get("mandatory") else _code(attribute_default(attribute))
        doc = attribute.doc
        if kwargs.get("values"):
            doc += " One of " + ", ".join(f"`{value}`" for value in kwargs["values"]) + "."
        rows.append(f"| `{name}` | {kind} | {default} | {_cell(doc)} |")
    return rows


def reference(loader: Loader) -> dict[str, Any]:
    """The public API as Bazel sees it: the extension's tag classes and the WORKSPACE macros."""
    extension = loader.globals(loader.root / "python" / "extensions.bzl")["patched"]
    repositories = loader.globals(loader.root / "python" / "repositories.bzl")
    defs = loader.globals(loader.root / "python" / "defs.bzl")
    tag_classes = extension.kwargs["tag_classes"]
    return {
        "tags": {name: tag.kwargs["attrs"] for name, tag in tag_classes.items()},
        "patched_index": repositories["patched_index"],
        "patched_wheel": repositories["patched_wheel"],
        "patched_wheels_dependencies": repositories["patched_wheels_dependencies"],
        "layout_test": defs["layout_test"],
    }


def macro_arguments(macro: Any) -> dict[str, str]:
    """The ``Args:`` section of a Starlark macro's docstring (Google style, as Bazel's stardoc reads it):
    each parameter's doc, continuation lines joined."""
    docs: dict[str, str] = {}
    in_args, current = False, None
    for line in (inspect.getdoc(macro) or "").splitlines():
        if line.strip() == "Args:":
            in_args = True
        elif in_args and line and not line.startswith(" "):
            break
        elif in_args and (match := re.match(r"^  (\*{0,2}\w+): ?(.*)$", line)):
            current = match[1]
            docs[current] = match[2].strip()
        elif in_args and current and line.strip():
            docs[current] += " " + line.strip()
    return docs


def macro_summary(macro: Any) -> str:
    """A macro's docstring up to its ``Args:`` section, as one paragraph."""
    return (inspect.getdoc(macro) or "").split("\nArgs:", 1)[0].strip()


def attribute_default(attribute: Attribute) -> object:
    """What Bazel gives an attribute the user leaves out."""
    return attribute.kwargs.get("default", _EMPTY_DEFAULTS.get(attribute.kind))


def workspace_parameters(api: dict[str, Any]) -> dict[str, object]:
    """Each parameter of the WORKSPACE `patched_index` -> its default (``inspect.Parameter.empty``: mandatory): its
    named parameters, then, for its ``**attributes``, the `index` tag's attributes but `name`, with their defaults
    (the macro passes them on to the rule the tag's hub is, refusing any other)."""
    parameters: dict[str, object] = {}
    for name, parameter in inspect.signature(api["patched_index"]).parameters.items():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            for attribute, declared in api["tags"]["index"].items():
                if attribute != "name":
                    parameters[attribute] = attribute_default(declared)
        else:
            parameters[name] = parameter.default
    return parameters


def workspace_parameter_docs(api: dict[str, Any]) -> dict[str, str]:
    """The doc of each parameter of the WORKSPACE `patched_index`: the `index` tag's attribute of the same
    name (the macro passes them to the same rule), and `wheels`, which the tag class has not."""
    docs = {name: attribute.doc for name, attribute in api["tags"]["index"].items()}
    docs["wheels"] = (
        "`patched_wheel(...)` values: the wheels of this hub to patch (the `patched_wheel` attributes below, without `hub`)."
    )
    return docs


def render(root: Path = ROOT) -> str:
    """The text of docs/reference.md for the .bzl files under ``root``."""
    api = reference(Loader(root))
    index_attrs: dict[str, Attribute] = api["tags"]["index"]
    wheel_attrs: dict[str, Attribute] = api["tags"]["patched_wheel"]
    lines = [
        "# Reference: `patched.index`, `patched.patched_wheel`, `patched_index`, `patched_wheel`, `layout_test`",
        "",
        "<!-- Generated by tools/gen_reference.py from python/private/specs.bzl, hub.bzl, extension.bzl and",
        "     python/repositories.bzl and python/defs.bzl. Do not edit: change the `doc =` strings there and run",
        "     `python3 tools/gen_reference.py` (tests/python/test_reference.py fails while this file is stale). -->",
        "",
        "What the hub checks beyond the types below, before any download (exactly one lock, `split_max_size` *or*",
        "`split_move`, `urls` with `sha256`, ...): [how it works](how-it-works.md#1-plan-check-what-you-declared-before-any-download).",
        "How the attributes combine in a workspace: [getting started](getting-started.md).",
        "",
        "## bzlmod: the `patched` extension",
        "",
        "```starlark",
        'patched = use_extension("@rules_patched_wheels//python:extensions.bzl", "patched")',
        "```",
        "",
        "### `patched.index`",
        "",
        "One hub repository: reads one lock, serves its wheels (those named by `patched_wheel` tags patched)",
        "from a local index, and writes `requirements_lock.txt` (and `uv.lock` for a `uv_lock`) for `pip.parse`.",
        "",
        *_attribute_rows(index_attrs),
        "",
        "### `patched.patched_wheel`",
        "",
        "One wheel of a hub's lock to patch, split or give a preload.",
        "",
        *_attribute_rows(wheel_attrs),
        "",
        "## WORKSPACE: `@rules_patched_wheels//python:repositories.bzl`",
        "",
    ]
    index_macro = api["patched_index"]
    docs = workspace_parameter_docs(api)
    lines += [
        "### `patched_index`",
        "",
        _cell(inspect.getdoc(index_macro) or ""),
        "",
        "| parameter | default | doc |",
        "| --- | --- | --- |",
    ]
    for name, value in workspace_parameters(api).items():
        default = "mandatory" if value is inspect.Parameter.empty else _code(value)
        lines.append(f"| `{name}` | {default} | {_cell(docs.get(name, ''))} |")
    workspace_wheel = [name for name in wheel_attrs if name != "hub"]
    lines += [
        "",
        "### `patched_wheel`",
        "",
        _cell(inspect.getdoc(api["patched_wheel"]) or ""),
        "Its parameters: " + ", ".join(f"`{name}`" for name in workspace_wheel) + ".",
        "",
        "### `patched_wheels_dependencies`",
        "",
        _cell(inspect.getdoc(api["patched_wheels_dependencies"]) or ""),
        "",
        "## BUILD: `@rules_patched_wheels//python:defs.bzl`",
        "",
        "### `layout_test`",
        "",
        _cell(macro_summary(api["layout_test"])) + " See [layout_test](layout-test.md).",
        "",
        "| parameter | default | doc |",
        "| --- | --- | --- |",
    ]
    arguments = macro_arguments(api["layout_test"])
    for name, parameter in inspect.signature(api["layout_test"]).parameters.items():
        shown = f"**{name}" if parameter.kind is inspect.Parameter.VAR_KEYWORD else name
        default = "mandatory" if parameter.default is inspect.Parameter.empty else _code(parameter.default)
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            default = ""
        lines.append(f"| `{shown}` | {default} | {_cell(arguments.get(shown, ''))} |")
    lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/reference.md is stale; write nothing")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = OUTPUT.read_text(encoding="utf-8") if OUTPUT.exists() else ""
        if current != text:
            print(
                f"gen_reference: error: {OUTPUT.relative_to(ROOT)} is stale: run python3 tools/gen_reference.py",
                file=sys.stderr,
            )
            return 1
        return 0
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
