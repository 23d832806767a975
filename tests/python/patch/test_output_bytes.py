"""The exact bytes `patch` and `split` write, pinned: a change to how the writer copies (kernel copies, threads,
buffers) must not change one byte of its outputs, which Bazel's repository cache and every lock's
sha256 of a patched wheel depend on.

The inputs are built here, deterministically: members stored and deflated, small (their local headers
copied) and large (kernel-copied after a padded header), a member with a data descriptor, a rename of
``.dist-info`` and ``.data``; the split's libraries are gcc-built (``fakecuda.blob_library``).  The digests
were taken from the writer before its kernel copies moved to a thread of their own and the split's sibling
was written beside the main wheel.  They depend on zlib's deflate (the writer deflates RECORD and what it
rewrote) and, for the split, on the compiler: where the input's own digest differs from the one pinned
beside the outputs' (another gcc), or zlib is zlib-ng, the test is skipped, saying why, rather than failing
for a reason that is not the writer's.
"""

from __future__ import annotations

import random
import zipfile
import zlib
from pathlib import Path

import pytest

from patched_wheels.patch.request import SplitRequest
from patched_wheels.patch.surgery import PatchOptions, patch_wheel
from support import fakecuda
from support.indexfixtures import sha256_of
from support.wheelbuilder import build_wheel

pytestmark = pytest.mark.skipif("ng" in zlib.ZLIB_RUNTIME_VERSION, reason="zlib-ng deflates other bytes than zlib")


@pytest.fixture(autouse=True)
def _default_timestamp(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every member's timestamp is the writer's default (SOURCE_DATE_EPOCH would change it)."""
    monkeypatch.delenv("SOURCE_DATE_EPOCH", raising=False)


def _files(big: bytes) -> dict[str, bytes]:
    noise = random.Random("output-bytes")
    files = {f"demo/module{i}.py": f"value = {i}\n".encode() * (1 + i * 37 % 300) for i in range(120)}
    files["demo/__init__.py"] = b"from demo import module0\n"
    files["demo/big.bin"] = big  # over CHUNK_SIZE compressed: a kernel copy
    files["demo/noise.bin"] = noise.randbytes(300_000)  # under it: through the buffer
    files[".data/scripts/demo-run"] = b"#!python\nimport demo\n"
    return files


def _with_data_descriptor(wheel: Path, member: str) -> None:
    """Rewrite ``wheel`` with ``member`` streamed (a data descriptor after its data, sizes 0 in its local header)."""
    with zipfile.ZipFile(wheel) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(wheel, "w") as out:
        for info, data in entries:
            if info.filename == member:
                with out.open(zipfile.ZipInfo(member, date_time=info.date_time), "w") as stream:
                    stream.write(data)
            else:
                out.writestr(info, data)


def test_patch_writes_the_same_bytes(tmp_path: Path) -> None:
    for folder in ("in", "stored"):
        (tmp_path / folder).mkdir()
    big = random.Random("big").randbytes(3 << 20)
    wheel = build_wheel(tmp_path / "in", "demo", "1.0", _files(big), tag="py3-none-any")
    _with_data_descriptor(wheel, "demo/module7.py")
    if sha256_of(wheel) != PATCH_INPUT:
        pytest.skip(f"the input wheel is built differently here ({sha256_of(wheel)})")
    stored = build_wheel(
        tmp_path / "stored", "demo", "1.0", _files(big), tag="py3-none-any", compression=zipfile.ZIP_STORED
    )
    outputs = {
        "suffix": patch_wheel(wheel, tmp_path / "a", PatchOptions(suffix="s.1", add_requires=["six"])).path,
        "unchanged": patch_wheel(wheel, tmp_path / "b", PatchOptions()).path,
        "delete": patch_wheel(wheel, tmp_path / "c", PatchOptions(delete=["demo/module1*"], suffix="d.2")).path,
        "stored": patch_wheel(stored, tmp_path / "d", PatchOptions(suffix="s.1")).path,
    }
    assert {key: sha256_of(path) for key, path in outputs.items()} == PATCH_OUTPUTS


def test_split_writes_the_same_bytes(tmp_path: Path) -> None:
    build = tmp_path / "build"
    for folder in (build, tmp_path / "in"):
        folder.mkdir()
    big = fakecuda.blob_library(build, "libbig.so", 3 << 20)
    small = fakecuda.blob_library(build, "libsmall.so", 200_000)
    files = _files(b"x" * 100)
    files["demo/lib/libbig.so"] = big.read_bytes()
    files["demo/lib/libsmall.so"] = small.read_bytes()
    wheel = build_wheel(tmp_path / "in", "demo", "1.0", files, tag="py3-none-linux_x86_64")
    if sha256_of(wheel) != SPLIT_INPUT:
        pytest.skip(f"the input wheel is built differently here (another compiler?): {sha256_of(wheel)}")
    result = patch_wheel(
        wheel, tmp_path / "out", PatchOptions(split=SplitRequest("demo-libs", move=("demo/lib/*",)), suffix="s.1")
    )
    assert result.sibling is not None
    assert {"main": sha256_of(result.path), "sibling": sha256_of(result.sibling)} == SPLIT_OUTPUTS


PATCH_INPUT = "80450ca4ebcdf5e17bd30ebb7534e4c4143e0276dbb69272def5ec669c78f478"
PATCH_OUTPUTS = {
    "delete": "7e49883fd911f8b5a88dcb80a688217b8d5fd4d406ad253d10423597b92f7101",
    "stored": "58f48641848731a918fb5a77f4c99a44aef30bf83dd91bad94459af2b0e326f4",
    "suffix": "4d09ed9ae13b946f433d8eb160a3d332fe169a7eb60ccc4db31457fb516fcbc4",
    "unchanged": "12deac8a0e4dbf39282729f9982ffee98cde618e8a2c43e82ad8901fbb1de880",
}
SPLIT_INPUT = "e9338e5365093f8d01f479923ec29970e9df2c0e4413d7af4e312d9966db2c1d"
SPLIT_OUTPUTS = {
    # The run-time-checked preload module (issue 41), whose *.dist-info must be a directory (issue 52), and the
    # preload's data beside it (issue 51: the module's bytes unchanged, one member and its RECORD line added).
    "main": "1545b500209473ef0362d26e604383f3007ecb54c328defb8f528861160817b9",
    "sibling": "888a6ce496781d94f80d838b92e6b43bcc8c78187bf6ad12dd8961d455ee4943",
}
