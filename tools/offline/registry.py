"""Make the offline Bazel's local module registry, the way the Bazel Central Registry serves rules_python.

tools/bazel runs this on the host (offline path only, every launch) and points the chrooted Bazel at the result
with `--registry=file:///opt/rpw-modules/GENERATION/registry`, so a workspace picks its rules_python release with
a plain `bazel_dep(name = "rules_python", version = "…")`, exactly as it would online:

* rules_python 0.22.1: Debian's `bazel-rules-python` package (a `local_path` source);
* every `rules_python-X.Y.Z.tar.gz` of the archive directory ($RPW_BAZEL_MODULES, in CI
  ../shared/bazel-modules/): an `archive` source at a file:// URL with its sha256 integrity, and the
  module's MODULE.bazel with the release's version set (as the BCR's own patch does: upstream's says 0.0.0);
* the modules those releases need and Debian does not package (toml.bzl, package_metadata from their
  archives; stardoc, bazel_lib as the empty stubs in tools/offline/modules): one source each, entered
  at every version the dependency graph asks for (read from the MODULE.bazel files, as Bazel's version
  resolution reads them), since an `--override_module` of a module outside the graph is an error.

The root is shared by every checkout on the machine, and their Bazel servers read the registry while they run.
So a registry is one *generation* per content: `GENERATION` is the sha256 of what it is made from (the
archives' names and bytes, every file of tools/offline, Debian's rules_python MODULE.bazel), never of a path
or a modification time, so the same content from any checkout finds its generation made and writes nothing.
A generation (`registry/`, the module tree; `archives/`, the archives it serves) is written beside its place
and renamed into it whole, then never changed nor removed: a server that read an older one keeps reading it.
Only `modules.bazelrc` (the flag naming the generation) is replaced, atomically, when it names another.

    python3 tools/offline/registry.py ROOT [ARCHIVE_DIR]     (writes under ROOT/opt/rpw-modules)
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
from pathlib import Path

# Where the output lives inside the offline root.
CHROOT_PATH = "/opt/rpw-modules"
# Debian's bazel-rules-python, at its path inside the offline root.
DEBIAN_RULES_PYTHON = ("0.22.1", "/usr/share/bazel/rules/python")
# Stubs of tools/offline/modules served by the registry (tools/bazel copies them to STUBS_PATH inside the
# root), not overridden: only some rules_python releases depend on them.
REGISTRY_STUBS = ("stardoc", "bazel_lib")
STUBS_PATH = "/opt/rpw/modules"
_ARCHIVE = re.compile(r"^(?P<name>[A-Za-z0-9_.]+?)-(?P<version>[0-9A-Za-z][0-9A-Za-z.+-]*)\.tar\.gz$")
_BAZEL_DEP = re.compile(r"\bbazel_dep\((?P<args>[^)]*)\)")
_STRING_ARG = re.compile(r'\b(?P<key>name|version)\s*=\s*"(?P<value>[^"]*)"')
_MODULE_CALL = re.compile(r"\bmodule\((?P<args>[^)]*)\)")


class RegistryError(Exception):
    """One line for tools/bazel to print."""


def integrity(path: Path) -> str:
    """The Subresource Integrity string (sha256) a registry's source.json gives an archive."""
    return "sha256-" + base64.b64encode(hashlib.sha256(path.read_bytes()).digest()).decode()


def _top_folder(archive: Path) -> str:
    """The one folder an upstream `git archive` unpacks to (its strip_prefix)."""
    with tarfile.open(archive, "r:gz") as tar:
        tops = {member.name.split("/", 1)[0] for member in tar.getmembers() if member.name not in (".", "")}
    if len(tops) != 1:
        raise RegistryError(f"{archive}: expected one top-level folder, found {sorted(tops)}")
    return tops.pop()


def _archive_module_file(archive: Path, top: str) -> str:
    with tarfile.open(archive, "r:gz") as tar:
        member = tar.extractfile(f"{top}/MODULE.bazel")
        if member is None:
            raise RegistryError(f"{archive}: no {top}/MODULE.bazel")
        return member.read().decode("utf-8")


def module_attribute(module_file: str, key: str) -> str:
    """The ``name`` or ``version`` string given to ``module(...)`` in a MODULE.bazel."""
    call = _MODULE_CALL.search(module_file)
    value = next((m["value"] for m in _STRING_ARG.finditer(call["args"]) if m["key"] == key), None) if call else None
    if not value:
        raise RegistryError(f"a MODULE.bazel without module({key} = ...)")
    return value


def module_name(module_file: str) -> str:
    return module_attribute(module_file, "name")


def with_version(module_file: str, version: str) -> str:
    """``module_file`` declaring ``version`` (upstream archives say 0.0.0 or nothing; the BCR patches it)."""
    call = _MODULE_CALL.search(module_file)
    if call is None:
        raise RegistryError("a MODULE.bazel without module(...)")
    args = call["args"]
    if re.search(r"\bversion\s*=", args):
        args = re.sub(r'\bversion\s*=\s*"[^"]*"', f'version = "{version}"', args, count=1)
    else:
        args = re.sub(r'(\bname\s*=\s*"[^"]*")\s*,?', rf'\1, version = "{version}",', args, count=1)
    return module_file[: call.start("args")] + args + module_file[call.end("args") :]


def dependencies(module_file: str) -> list[tuple[str, str]]:
    """The (name, version) of every non-dev ``bazel_dep`` of a MODULE.bazel."""
    deps = []
    for call in _BAZEL_DEP.finditer(module_file):
        if re.search(r"\bdev_dependency\s*=\s*True", call["args"]):
            continue
        values = {m["key"]: m["value"] for m in _STRING_ARG.finditer(call["args"])}
        if "name" in values and "version" in values:
            deps.append((values["name"], values["version"]))
    return deps


def _add_module(registry: Path, name: str, version: str, module_file: str, source: dict) -> None:
    folder = registry / "modules" / name / version
    folder.mkdir(parents=True)
    (folder / "MODULE.bazel").write_text(with_version(module_file, version), encoding="utf-8")
    (folder / "source.json").write_text(json.dumps(source, indent=2) + "\n", encoding="utf-8")
    metadata = registry / "modules" / name / "metadata.json"
    versions = sorted(path.name for path in metadata.parent.iterdir() if path.is_dir())
    metadata.write_text(json.dumps({"versions": versions}) + "\n", encoding="utf-8")


def _archives(archive_dir: Path | None) -> list[Path]:
    """The module archives served, in name order (the registry's inputs and its generation's)."""
    return sorted(archive_dir.glob("*.tar.gz")) if archive_dir else []


def generation(root: Path, archive_dir: Path | None) -> str:
    """The name of the registry made from these inputs: a digest of their content alone (each archive's name and
    bytes, each file of tools/offline by its path there, Debian's rules_python MODULE.bazel in ``root``)."""
    digest = hashlib.sha256()

    def add(label: str, data: bytes) -> None:
        digest.update(f"{label}\0{len(data)}\0".encode())
        digest.update(data)

    offline = Path(__file__).resolve().parent
    for path in sorted(offline.rglob("*")):
        if path.is_file() and "__pycache__" not in path.relative_to(offline).parts:
            add(f"offline/{path.relative_to(offline).as_posix()}", path.read_bytes())
    add("debian", (root / DEBIAN_RULES_PYTHON[1].lstrip("/") / "MODULE.bazel").read_bytes())
    for archive in _archives(archive_dir):
        add(f"archive/{archive.name}", hashlib.sha256(archive.read_bytes()).digest())
    return digest.hexdigest()[:32]


def build(root: Path, archive_dir: Path | None) -> Path:
    """Make the registry generation of ``root`` and ``archive_dir`` under ``root/opt/rpw-modules`` unless it is
    there, and point ``modules.bazelrc`` at it; return its directory."""
    out = root / CHROOT_PATH.lstrip("/")
    out.mkdir(parents=True, exist_ok=True)
    name = generation(root, archive_dir)
    made = out / name
    if not made.is_dir():
        _write_generation(root, archive_dir, made)
    _replace_if_changed(
        out / "modules.bazelrc",
        "# Generated by tools/offline/registry.py: the offline root's module registry.\n"
        f"common --registry=file://{CHROOT_PATH}/{name}/registry\n",
    )
    return made


def _replace_if_changed(path: Path, text: str) -> None:
    """``path`` holding ``text``: left alone when it does; else replaced by a rename (a reader sees one or the other)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _write_generation(root: Path, archive_dir: Path | None, made: Path) -> None:
    """Write the registry into a directory beside ``made``, renamed to ``made`` once whole."""
    served = f"{CHROOT_PATH}/{made.name}"
    staging = Path(tempfile.mkdtemp(prefix=f".{made.name}.", dir=made.parent))
    try:
        registry = staging / "registry"
        (registry / "modules").mkdir(parents=True)
        (registry / "bazel_registry.json").write_text('{"mirrors": []}\n', encoding="utf-8")
        (staging / "archives").mkdir()
        # Every rules_python release at its own version; the helper modules at whatever version is asked.
        releases: list[tuple[str, str, dict]] = []
        helpers: dict[str, tuple[str, dict]] = {}
        version, path = DEBIAN_RULES_PYTHON
        releases.append(
            (
                version,
                (root / path.lstrip("/") / "MODULE.bazel").read_text(encoding="utf-8"),
                {"type": "local_path", "path": path},
            )
        )
        for stub in REGISTRY_STUBS:
            stub_file = (Path(__file__).resolve().parent / "modules" / stub / "MODULE.bazel").read_text(
                encoding="utf-8"
            )
            helpers[stub] = (stub_file, {"type": "local_path", "path": f"{STUBS_PATH}/{stub}"})
        for archive in _archives(archive_dir):
            match = _ARCHIVE.match(archive.name)
            if not match:
                raise RegistryError(f"{archive}: not named NAME-VERSION.tar.gz")
            try:
                top = _top_folder(archive)
                module_file = _archive_module_file(archive, top)
            except (tarfile.TarError, EOFError, OSError, UnicodeDecodeError) as error:
                raise RegistryError(f"{archive}: not a readable .tar.gz with a MODULE.bazel ({error})") from None
            shutil.copyfile(archive, staging / "archives" / archive.name)
            source = {
                "url": f"file://{served}/archives/{archive.name}",
                "integrity": integrity(archive),
                "strip_prefix": top,
            }
            name = module_name(module_file)
            if name == "rules_python":
                releases.append((match["version"], module_file, source))
            else:
                helpers[name] = (module_file, source)
        pending = []
        for version, module_file, source in releases:
            _add_module(registry, "rules_python", version, module_file, source)
            pending.extend(dependencies(module_file))
        while pending:
            name, version = pending.pop()
            if name not in helpers or (registry / "modules" / name / version).exists():
                continue  # packaged by Debian (or a stub override): not the registry's
            module_file, source = helpers[name]
            _add_module(registry, name, version, module_file, source)
            pending.extend(dependencies(module_file))
        staging.chmod(0o755)
        try:
            staging.rename(made)
        except OSError:
            if not made.is_dir():
                raise
            shutil.rmtree(staging)  # another writer made the same generation first: theirs is as good
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3):
        print(__doc__.strip().splitlines()[-1].strip(), file=sys.stderr)
        return 2
    root = Path(argv[1])
    archive_dir = Path(argv[2]) if len(argv) == 3 and argv[2] else None
    try:
        if archive_dir is not None and not archive_dir.is_dir():
            raise RegistryError(f"RPW_BAZEL_MODULES={archive_dir}: no such directory of module archives")
        build(root, archive_dir)
    except (RegistryError, OSError, tarfile.TarError, UnicodeDecodeError) as error:
        print(f"tools/bazel: error: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
