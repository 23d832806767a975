"""The inflate floor: what decompressing a wheel set's shared libraries once costs on this machine.

Every reader of the libraries' dynamic sections pays it, since ``.dynamic`` lies near the end of each file
and deflate has no random access; and since issue 41 the ELF rows of a wheel at hand are read from it (the
facts and the helper's cache are checked, not believed), so ``graph``, ``split`` and the hub's split pay it
on every run.  Benchmarks time :func:`floor_step` beside those commands in the same alternating rounds:
the floor as a control, measured by the same interpreter on the same bytes in the same hour (what a core of
a shared VM inflates moves by a fifth between hours).
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path
from typing import Mapping

from benchmarks.harness import Step
from patched_wheels.elf.read import is_shared_library_name
from patched_wheels.wheelfile.schemes import install_path

# The floor's child: every member named in the JSON file argv[1] (wheel path, data offset, deflated size),
# inflated on one thread in 1 MiB reads, output discarded, with the inflater the helper picks (python-isal
# when the interpreter has it, else zlib); nothing parsed, no CRC.
FLOOR_CODE = """
import json, os, sys
try:
    from isal import isal_zlib as inflate
except ImportError:
    import zlib as inflate
for wheel, offset, size in json.load(open(sys.argv[1])):
    fd = os.open(wheel, os.O_RDONLY)
    inflater, end = inflate.decompressobj(-15), offset + size
    while offset < end:
        chunk = os.pread(fd, min(1 << 20, end - offset), offset)
        offset += len(chunk)
        while chunk:
            inflater.decompress(chunk, 1 << 20)
            chunk = inflater.unconsumed_tail
    os.close(fd)
"""


def library_members(wheels: list[Path]) -> list[tuple[Path, zipfile.ZipInfo]]:
    """Every shared library member of ``wheels`` (by the helper's own rule for a library's name)."""
    members = []
    for wheel in wheels:
        with zipfile.ZipFile(wheel) as archive:
            for info in archive.infolist():
                path = install_path(info.filename)
                if path is not None and is_shared_library_name(path):
                    members.append((wheel, info))
    return members


def data_extents(members: list[tuple[Path, zipfile.ZipInfo]]) -> list[tuple[str, int, int]]:
    """(wheel, offset of the deflated bytes, their size) of each member, past its local header."""
    extents = []
    for wheel, info in members:
        with open(wheel, "rb") as handle:
            handle.seek(info.header_offset + 26)
            name_length, extra_length = struct.unpack("<HH", handle.read(4))
        extents.append((str(wheel), info.header_offset + 30 + name_length + extra_length, info.compress_size))
    return extents


def floor_step(label: str, python: str, wheels: list[Path], work: Path, env: Mapping[str, str]) -> Step:
    """A step inflating every library of ``wheels`` once with ``python``; its extents are written to ``work``."""
    extents = work / f"{label.replace(' ', '-')}.json"
    extents.parent.mkdir(parents=True, exist_ok=True)
    extents.write_text(json.dumps(data_extents(library_members(wheels))), encoding="utf-8")
    return Step(label, [python, "-c", FLOOR_CODE, str(extents)], env, work / label.replace(" ", "-"))


def cpu_features() -> dict[str, object]:
    """The CPU's model and the instruction sets inflaters speed up with (ISA-L's and libdeflate's fast paths
    use AVX2 and BMI2): an inflate floor is only comparable between machines that share them."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        return {}
    fields = dict(line.split(":", 1) for line in text.splitlines() if ":" in line)
    flags = {name.strip(): value.strip() for name, value in fields.items()}
    present = set(flags.get("flags", "").split())
    return {"model": flags.get("model name"), **{flag: flag in present for flag in ("avx2", "bmi2", "avx512f")}}
