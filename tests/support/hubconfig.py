"""A hub's ``_hub.json`` made as the Bazel rule makes it, for the tests that build a hub without Bazel."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from packaging.utils import canonicalize_name

from patched_wheels.cli import main
from patched_wheels.hub.documents import HubConfig
from patched_wheels.hub.spec import NOT_ATTRIBUTES, PatchedWheelSpec

from .indexfixtures import sha256_of as sha256
from .starlark import index_attribute_defaults

#: Every attribute of ``INDEX_ATTRS`` (hub.bzl) -> its default, as hub.bzl writes it into a request.
INDEX_ATTRIBUTES = index_attribute_defaults()


def index_attributes(**given: object) -> dict[str, object]:
    """The ``attributes`` of a hub request: ``given`` ones as given, the others at their defaults in hub.bzl, so
    an attribute added there is in each request the tests write."""
    unknown = set(given) - set(INDEX_ATTRIBUTES)
    assert not unknown, f"no attribute {sorted(unknown)} in INDEX_ATTRS"
    return {**INDEX_ATTRIBUTES, **given}


@pytest.fixture(autouse=True)
def no_user_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    """The plan reads the cache location from the environment, as under Bazel: never the user's here."""
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", "off")


def spec_request_json(spec: PatchedWheelSpec) -> dict[str, object]:
    """``spec`` as the rule writes it into a request: its attributes, not the fields the plan sets."""
    return {key: value for key, value in spec.to_json().items() if key not in NOT_ATTRIBUTES}


def set_config(tmp_path: Path, others: list[Path], original: Path, name: str, **spec: object) -> Path:
    """hub.json for patching one project, the ``others`` served as they are (see :func:`write_config`)."""
    return write_config(tmp_path, others, [(original, {"name": name, **spec})])


def write_config(
    tmp_path: Path,
    others: list[Path],
    patched: list[tuple[Path, dict[str, object]]],
    *,
    index_option: str = "index-url",
    rules_python_version: str = "1.6.0",
    wheel_facts: Path | None = None,
    lock: tuple[str, Path] | None = None,
    attributes: dict[str, object] | None = None,
    labels: dict[str, str] | None = None,
) -> Path:
    """The hub's ``_hub.json`` for patching each ``(original, spec)`` of ``patched``, made as the rule makes
    it: the request and the resolved wheels (:func:`hub_inputs`) go through ``patched-wheels hub plan`` (the one
    writer of the config), and every file the plan lists is copied where it says, as the rule downloads it.
    ``rules_python_version``: the release the hub is for (before 2, every pin is served from the hub's index);
    ``wheel_facts``: the hub's ``wheel_facts`` file; ``lock``: the lock attribute and its file, if not the
    requirements lock written here (its pins must be the wheels given); ``attributes``: other attributes set;
    ``labels``: the request's (how the user wrote its label attributes; none by default)."""
    request, resolved, sources = hub_inputs(
        tmp_path,
        [*others, *(original for original, _ in patched)],
        [spec for _, spec in patched],
        index_option=index_option,
        rules_python_version=rules_python_version,
        wheel_facts=str(wheel_facts) if wheel_facts else None,
        lock=lock,
        labels=labels,
        **(attributes or {}),
    )
    code, out, err = run_plan(tmp_path, request, resolved)
    sys.stderr.write(err)  # the plan's warnings, for a test that reads them
    assert code == 0, err
    fetch_into(tmp_path, json.loads(out)["fetch"], sources)
    return tmp_path / "_hub.json"


def run_plan(tmp_path: Path, request: dict[str, Any], resolved: Any) -> tuple[int, str, str]:
    """``patched-wheels hub plan`` of ``request`` and ``resolved`` (written into ``tmp_path``), its configuration
    written as ``tmp_path/_hub.json``: its status, stdout and stderr."""
    (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
    (tmp_path / "resolved.json").write_text(json.dumps(resolved), encoding="utf-8")
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            [
                "hub",
                "plan",
                "--request",
                str(tmp_path / "request.json"),
                "--resolved",
                str(tmp_path / "resolved.json"),
                "--config-out",
                str(tmp_path / "_hub.json"),
            ]
        )
    return code, out.getvalue(), err.getvalue()


def hub_inputs(
    tmp_path: Path,
    wheels: list[Path],
    specs: list[dict[str, object]],
    *,
    rules_python_version: str = "1.6.0",
    lock: tuple[str, Path] | None = None,
    labels: dict[str, str] | None = None,
    **attributes: object,
) -> tuple[dict[str, object], list[dict[str, object]], dict[str, Path]]:
    """What the rule hands ``hub plan`` for a lock of ``wheels`` (``lock``: its attribute and file; by default a
    requirements lock written beside, as ``user_lock.txt``): the request holding ``specs`` (each completed with
    the defaults, ``suffix = "test.1"``) and ``attributes`` (the others at hub.bzl's defaults), the resolved
    wheels, and each wheel's file by name (for :func:`fetch_into`)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    if lock is None:
        lock = ("requirements_lock", tmp_path / "user_lock.txt")
        lock[1].write_text(
            "# the user's lock\n"
            + "".join(
                f"{w.name.split('-')[0].replace('_', '-')}=={w.name.split('-')[1]} \\\n    --hash=sha256:{sha256(w)}\n"
                for w in wheels
            ),
            encoding="utf-8",
        )
    request = {
        "hub": "test",
        "bzlmod": True,
        "attributes": index_attributes(**{lock[0]: str(lock[1]), "index_url": "", **attributes}),
        "rules_python_version": rules_python_version,
        "labels": labels or {},
        "repository": str(tmp_path),
        "patched": [
            {**spec_request_json(PatchedWheelSpec(name=str(spec["name"]), suffix="test.1")), **spec} for spec in specs
        ],
    }
    sources = {wheel.name: wheel for wheel in wheels}
    resolved: list[dict[str, object]] = [
        {
            "project": canonicalize_name(name.split("-")[0]),
            "filename": name,
            "urls": [wheel.as_uri()],
            "sha256": sha256(wheel),
        }
        for name, wheel in sources.items()
    ]
    return request, resolved, sources


def fetch_into(tmp_path: Path, fetch: list[dict[str, object]], sources: dict[str, Path]) -> None:
    """Copy each file a plan's ``fetch`` lists where it says, as the rule downloads it."""
    for entry in fetch:
        output = str(entry["output"])
        (tmp_path / output).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(sources[output.rsplit("/", 1)[1]], tmp_path / output)


def load_config(path: Path) -> HubConfig:
    return HubConfig.from_json(json.loads(path.read_text(encoding="utf-8")))
