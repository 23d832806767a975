"""A torch-shaped wheel of a chosen size, built here (real gcc-built libraries), for benchmarks with no download.

``build_synthetic_set(directory, size)`` writes two wheels into ``directory/synthetic-<size>m/``, reused when
they are already there:

* ``synthtorch``: ``synthtorch/lib/libsynth_cuda.so`` (about half of ``size``) and ``libsynth_cpu.so``
  (about a quarter), each part random bytes (incompressible, like a GPU kernel image) and part text of a
  small alphabet (compresses about 1.6x, like code and symbol tables); a dozen 2 MB libraries; ``_C.so``
  without a SONAME (an extension module); thousands of small ``.py`` files, as torch holds 10,600 members.
  ``libsynth_cuda.so`` needs ``libsynth_cpu.so`` and the deps wheel's ``libsynthdep.so.1`` (through
  ``$ORIGIN/../../synth_deps/lib``, like torch's nvidia RUNPATH entries), so a split that moves it
  has a preload to write for the sibling.
* ``synth-deps``: ``synth_deps/lib/libsynthdep.so.1``: what a hub's split reads the graph of with the main
  wheel (``--graph-wheels``).

Never committed: built in a benchmark's work or cache directory (about a minute on 2 cores for 500 MB).
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, NamedTuple

from tests.support.fakecuda import compile_shared  # the test fixtures' gcc helper

VERSION = "2.1.0"
TAG = "cp311-cp311-linux_x86_64"
MODULES = 6000
"""Small ``.py`` members (torch 2.1.0: 10,600 members, most of them Python)."""
_ALPHABET = bytes(range(0x40, 0x60))
"""32 symbols, 5 bits of entropy a byte: text deflate shrinks to about 0.63 of its size."""


class SyntheticSet(NamedTuple):
    main: Path
    """The torch-shaped wheel."""
    deps: Path
    """The wheel one of its libraries needs (the graph's other wheel)."""


def _text(size: int, seed: str) -> bytes:
    """``size`` compressible bytes (``_ALPHABET`` only), deterministic for ``seed``."""
    table = bytes(_ALPHABET[byte % len(_ALPHABET)] for byte in range(256))
    return random.Random(seed).randbytes(size).translate(table)


_RANDOM_STEP = (1 << 28) - 1
"""The most bytes one ``randbytes`` call gives (it draws ``8 * n`` bits, under 2**31): a torch-sized library has more."""


def _random(size: int, seed: str) -> bytes:
    """``size`` incompressible bytes, deterministic for ``seed`` (one draw up to :data:`_RANDOM_STEP`, as before)."""
    generator = random.Random(seed)
    return b"".join(generator.randbytes(min(_RANDOM_STEP, size - start)) for start in range(0, size, _RANDOM_STEP))


def _library(build: Path, name: str, random_bytes: int, text_bytes: int, *flags: str) -> Path:
    """A gcc-built shared library carrying ``random_bytes`` incompressible and ``text_bytes`` compressible bytes."""
    blobs = []
    for kind, size in (("random", random_bytes), ("text", text_bytes)):
        if size:
            blob = build / f"{name}.{kind}.bin"
            blob.write_bytes(_random(size, f"{name}.{kind}") if kind == "random" else _text(size, name))
            blobs.append(f'.globl {kind}_blob\\n{kind}_blob:\\n.incbin \\"{blob}\\"\\n')
    source = f'__asm__(".section .rodata\\n{"".join(blobs)}.text");\nint {name.split(".")[0]}_answer(void) {{ return 42; }}\n'
    library = compile_shared(build, name, source, *flags)
    for blob in build.glob(f"{name}.*.bin"):
        blob.unlink()
    return library


def _write_wheel(path: Path, name: str, members: Iterator[tuple[str, Path | bytes]]) -> None:
    """A wheel at ``path`` (written beside it, then renamed) with RECORD computed as members stream by."""
    import base64
    import hashlib

    dist_info = f"{name}-{VERSION}.dist-info"
    partial = path.with_suffix(".partial")
    rows = []
    with zipfile.ZipFile(partial, "w", zipfile.ZIP_DEFLATED) as archive:
        for arcname, content in members:
            info = zipfile.ZipInfo(arcname, date_time=(2020, 2, 2, 12, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o100644 << 16
            digest, size = hashlib.sha256(), 0
            with archive.open(info, "w", force_zip64=True) as out:
                chunks = [content] if isinstance(content, bytes) else _file_chunks(content)
                for chunk in chunks:
                    digest.update(chunk)
                    size += len(chunk)
                    out.write(chunk)
            rows.append(f"{arcname},sha256={base64.urlsafe_b64encode(digest.digest()).rstrip(b'=').decode()},{size}\n")
        rows.append(f"{dist_info}/RECORD,,\n")
        archive.writestr(
            zipfile.ZipInfo(f"{dist_info}/RECORD", date_time=(2020, 2, 2, 12, 0, 0)),
            "".join(rows),
            zipfile.ZIP_DEFLATED,
        )
    os.replace(partial, path)


def _file_chunks(path: Path) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        yield from iter(lambda: handle.read(1 << 20), b"")


def _dist_info(name: str, project: str, requires: str = "") -> list[tuple[str, bytes]]:
    dist_info = f"{name}-{VERSION}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {project}\nVersion: {VERSION}\n{requires}\nA synthetic benchmark wheel.\n"
    wheel = f"Wheel-Version: 1.0\nGenerator: synthetic_wheel\nRoot-Is-Purelib: false\nTag: {TAG}\n"
    return [(f"{dist_info}/METADATA", metadata.encode()), (f"{dist_info}/WHEEL", wheel.encode())]


def build_synthetic_set(directory: Path, size: int) -> SyntheticSet:
    """The two wheels for a main wheel of about ``size`` bytes (compressed), built unless already there."""
    directory = directory / f"synthetic-{size >> 20}m"
    directory.mkdir(parents=True, exist_ok=True)
    main = directory / f"synthtorch-{VERSION}-{TAG}.whl"
    deps = directory / f"synth_deps-{VERSION}-{TAG}.whl"
    if main.exists() and deps.exists():
        return SyntheticSet(main, deps)
    # Stored sizes: random bytes deflate to themselves, the text to about 0.63 of it.
    cuda_random, cuda_text = size * 2 // 5, size // 6
    cpu_random, cpu_text = size // 10, size // 4
    with tempfile.TemporaryDirectory(dir=directory) as scratch:
        build = Path(scratch)
        dep = _library(build, "libsynthdep.so.1", 1 << 20, 1 << 20, "-Wl,-soname,libsynthdep.so.1")
        _write_wheel(
            deps,
            "synth_deps",
            iter(
                [
                    ("synth_deps/__init__.py", b""),
                    ("synth_deps/lib/libsynthdep.so.1", dep),
                    *_dist_info("synth_deps", "synth-deps"),
                ]
            ),
        )
        cpu = _library(build, "libsynth_cpu.so", cpu_random, cpu_text, "-Wl,-soname,libsynth_cpu.so")
        cuda = _library(
            build,
            "libsynth_cuda.so",
            cuda_random,
            cuda_text,
            "-Wl,-soname,libsynth_cuda.so",
            "-l:libsynth_cpu.so",
            "-l:libsynthdep.so.1",
            "-Wl,-rpath,$ORIGIN:$ORIGIN/../../synth_deps/lib",
        )
        smalls = [
            _library(build, f"libsynth_small{i}.so", 1 << 20, 1 << 20, f"-Wl,-soname,libsynth_small{i}.so")
            for i in range(12)
        ]
        core = compile_shared(
            build,
            "_C.so",
            "int libsynth_cpu_answer(void);\nint core(void) { return libsynth_cpu_answer(); }\n",
            "-l:libsynth_cpu.so",
            "-Wl,-rpath,$ORIGIN/lib",
        )
        modules = [
            (f"synthtorch/sub{i % 40}/module{i}.py", _text(2000 + (i * 7919) % 18000, f"m{i}")) for i in range(MODULES)
        ]
        members: list[tuple[str, Path | bytes]] = [
            ("synthtorch/__init__.py", b'"""A synthetic torch."""\nfrom synthtorch import _C\n'),
            *modules,
            ("synthtorch/_C.so", core),
            ("synthtorch/lib/libsynth_cpu.so", cpu),
            ("synthtorch/lib/libsynth_cuda.so", cuda),
            *((f"synthtorch/lib/{small.name}", small) for small in smalls),
            *_dist_info("synthtorch", "synthtorch", "Requires-Dist: synth-deps\nRequires-Dist: triton"),
        ]
        _write_wheel(main, "synthtorch", iter(members))
    return SyntheticSet(main, deps)


if __name__ == "__main__":
    built = build_synthetic_set(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 500 << 20)
    for wheel in built:
        print(f"{wheel}: {wheel.stat().st_size >> 20} MiB")
