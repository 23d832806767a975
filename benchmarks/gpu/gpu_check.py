"""`doctor --run` on a real CUDA stack, before and after patching: a manual check for a GPU machine.

Not part of the test suite (CI has no GPU).  Run it with the Python whose single
site-packages holds the stack (torch or jax, and the nvidia-* CUDA wheels):

    python -m benchmarks.gpu.gpu_check jax     # JAX + its CUDA plugin: patch the plugin with --preload-wheels 'nvidia-*'
    python -m benchmarks.gpu.gpu_check torch   # torch: patch torch with the generated preload (preload = "auto")

For every distribution the stack requires (Requires-Dist, transitively, markers and
extras honoured, from importlib.metadata) it rebuilds a wheel from the installed
files its RECORD lists (stored, not deflated: these are gigabytes).  Then it runs
`patched-wheels doctor W... --package PKG --run=CODE`, which installs each wheel
into its own directory and runs CODE with `python -S` there (the layout Bazel
gives), patches PKG with `patch --preload-for PKG --preload-from ...`, and runs
doctor again with the patched wheel.  It prints both reports and a summary, and
exits 0 when CODE fails before and passes after.  `--requirements`, `--package`,
`--preload-wheels` and `--code` override the preset; `--work DIR` keeps the wheels.

Needs only `packaging` beside this repository's `python/`
directory (on the PYTHONPATH of the helper it runs); patchelf is not used.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

REPO_PYTHON = Path(__file__).resolve().parents[2] / "python"
_CHUNK = 1 << 20
# Written by installers, not part of the wheel; RECORD is written anew.
_INSTALL_ONLY = {"RECORD", "INSTALLER", "REQUESTED", "direct_url.json"}

_JAX_CODE = (
    "import jax, jax.numpy as jnp\n"
    "print(jax.devices())\n"
    "x = jnp.ones((512, 512))\n"
    "print(float((x @ x).block_until_ready()[0, 0]))\n"
    "assert jax.devices()[0].platform == 'gpu', 'JAX runs on ' + jax.devices()[0].platform\n"
)
_TORCH_CODE = (
    "import torch\n"
    "print(torch.__version__, torch.cuda.is_available())\n"
    "x = torch.ones(512, 512, device='cuda')\n"
    "print((x @ x)[0, 0].item())\n"
)


def _jax_plugin() -> str:
    for name in ("jax-cuda13-plugin", "jax-cuda12-plugin"):
        try:
            importlib.metadata.distribution(name)
            return name
        except importlib.metadata.PackageNotFoundError:
            continue
    sys.exit("gpu_check: no jax-cuda13-plugin or jax-cuda12-plugin installed")


def preset(stack: str) -> dict[str, object]:
    if stack == "jax":
        plugin = _jax_plugin()
        return dict(
            requirements=["jax", f"{plugin}[with-cuda]"],
            package=plugin.replace("-", "_"),
            preload_wheels=["nvidia-*"],
            code=_JAX_CODE,
        )
    return dict(requirements=["torch"], package="torch", preload_wheels=[], code=_TORCH_CODE)


def requirement_closure(roots: list[str]) -> tuple[list[importlib.metadata.Distribution], list[str]]:
    """The installed distributions ``roots`` need (markers evaluated with their extras), and the names not installed."""
    found: dict[str, importlib.metadata.Distribution] = {}
    extras_done: dict[str, set[str]] = {}
    missing: set[str] = set()
    queue = [Requirement(root) for root in roots]
    while queue:
        requirement = queue.pop()
        name = canonicalize_name(requirement.name)
        wanted = set(requirement.extras) | {""}
        if name in found and wanted <= extras_done[name]:
            continue
        try:
            distribution = found.get(name) or importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.add(name)
            continue
        found[name] = distribution
        new = wanted - extras_done.setdefault(name, set())
        extras_done[name] |= new
        for line in distribution.requires or []:
            dependency = Requirement(line)
            if dependency.marker is None or any(dependency.marker.evaluate({"extra": extra}) for extra in new):
                queue.append(dependency)
    return list(found.values()), sorted(missing)


def _wheel_name(distribution: importlib.metadata.Distribution, dist_info: str) -> str:
    wheel_file = (distribution.read_text("WHEEL") or "").splitlines()
    tags = [line.split(":", 1)[1].strip() for line in wheel_file if line.startswith("Tag:")]
    if not tags:
        sys.exit(f"gpu_check: {dist_info}/WHEEL names no Tag")
    parts = [sorted({tag.split("-")[index] for tag in tags}) for index in range(3)]
    tag = "-".join(".".join(values) for values in parts)
    project = re.sub(r"[-_.]+", "_", distribution.metadata["Name"])
    return f"{project}-{distribution.version}-{tag}.whl"


def rebuild_wheel(distribution: importlib.metadata.Distribution, dest: Path) -> Path:
    """A wheel of the installed files ``distribution``'s RECORD lists under site-packages, with a fresh RECORD."""
    files = [path for path in distribution.files or [] if ".." not in path.parts and "__pycache__" not in path.parts]
    dist_info = next((path.parts[0] for path in files if path.parts[0].endswith(".dist-info")), None)
    if dist_info is None:
        sys.exit(
            f"gpu_check: {distribution.metadata['Name']} has no RECORD listing its .dist-info (not installed from a wheel?)"
        )
    wheel = dest / _wheel_name(distribution, dist_info)
    rows = []
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_STORED, allowZip64=True) as archive:
        for path in sorted(files, key=str):
            if path.parts[0] == dist_info and path.name in _INSTALL_ONLY:
                continue
            source = Path(distribution.locate_file(path))
            if not source.is_file():
                continue  # listed in RECORD, since removed
            info = zipfile.ZipInfo.from_file(source, path.as_posix())
            digest, size = hashlib.sha256(), 0
            with open(source, "rb") as data, archive.open(info, "w", force_zip64=True) as out:
                for chunk in iter(lambda: data.read(_CHUNK), b""):
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            rows.append(
                (path.as_posix(), "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode(), size)
            )
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows([*rows, (f"{dist_info}/RECORD", "", "")])
        archive.writestr(f"{dist_info}/RECORD", record.getvalue())
    return wheel


def _provides(wheel: Path, package: str) -> bool:
    with zipfile.ZipFile(wheel) as archive:
        return f"{package}/__init__.py" in archive.namelist()


def patched_wheels(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m patched_wheels ARGS`` from this checkout: stdout returned, stderr passed through."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_PYTHON), os.environ.get("PYTHONPATH")]))
    print("$ patched-wheels " + " ".join(args[:3]) + (" ..." if len(args) > 3 else ""), flush=True)
    command = [sys.executable, "-m", "patched_wheels", *args]
    return subprocess.run(command, env=environment, stdout=subprocess.PIPE, text=True, check=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("stack", choices=["jax", "torch"])
    parser.add_argument("--requirements", nargs="+", help="root requirements of the stack (default: the preset's)")
    parser.add_argument("--package", help="the import package to patch and import")
    parser.add_argument("--preload-wheels", nargs="*", help="globs for patch/doctor --preload-wheels")
    parser.add_argument("--code", help="what to run with one directory per wheel")
    parser.add_argument(
        "--work",
        type=Path,
        default=Path("/tmp/rpw-gpu-check"),
        help="scratch directory (its wheels/ and patched/ are replaced)",
    )
    args = parser.parse_args()
    settings = preset(args.stack)
    for key in ("requirements", "package", "preload_wheels", "code"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    package, code = str(settings["package"]), str(settings["code"])
    glob_options = ["--preload-wheels", *settings["preload_wheels"]] if settings["preload_wheels"] else []  # type: ignore[misc]

    distributions, missing = requirement_closure(list(settings["requirements"]))  # type: ignore[call-overload]
    print(
        f"{len(distributions)} installed distributions: {', '.join(sorted(d.metadata['Name'] for d in distributions))}"
    )
    if missing:
        print(f"required but not installed (left out): {', '.join(missing)}")
    wheel_dir, patched_dir = args.work / "wheels", args.work / "patched"
    for directory in (wheel_dir, patched_dir):
        shutil.rmtree(directory, ignore_errors=True)
    wheel_dir.mkdir(parents=True)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        wheels = list(pool.map(lambda distribution: rebuild_wheel(distribution, wheel_dir), distributions))
    print(f"rebuilt {len(wheels)} wheels, {sum(w.stat().st_size for w in wheels) / 1e9:.2f} GB, in {wheel_dir}")
    original = next((wheel for wheel in wheels if _provides(wheel, package)), None)
    if original is None:
        sys.exit(f"gpu_check: no rebuilt wheel ships {package}/__init__.py")

    before = patched_wheels("doctor", *map(str, wheels), "--package", package, *glob_options, f"--run={code}")
    print(before.stdout)
    others = [str(wheel) for wheel in wheels if wheel != original]
    patch = ["patch", "--wheel", str(original), "--dest-dir", str(patched_dir), "--suffix", "gpucheck.1"]
    patched = patched_wheels(*patch, "--preload-for", package, "--preload-from", *others, *glob_options)
    print(patched.stdout)
    if patched.returncode != 0:
        return 1
    after_set = [Path(patched.stdout.splitlines()[0]) if wheel == original else wheel for wheel in wheels]
    after = patched_wheels("doctor", *map(str, after_set), "--package", package, *glob_options, f"--run={code}")
    print(after.stdout)
    print(
        f"summary: {package} with one directory per wheel: "
        f"doctor --run exit status {before.returncode} before patching, {after.returncode} after"
    )
    return 0 if before.returncode != 0 and after.returncode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
