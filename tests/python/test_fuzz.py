"""Mutated wheels through ``patch``, ``graph``, ``doctor`` and ``index``, and mutated locks (a requirements
file, a uv.lock) through ``lock`` and ``resolve``: only the promises are asserted.

Each case flips, overwrites or cuts bytes of a small valid wheel (anywhere, in zip headers, in
header fields, in member data), or changes one member's content and re-zips the wheel with a
RECORD to match (so the change reaches METADATA, WHEEL, RECORD and ELF parsers), and runs one
command on it, in this process. The promises: exit 1
with exactly one ``patched-wheels: error:`` line and nothing left behind (no output wheel, the
index as it was), or exit 0 when the mutation hit a byte that does not matter, and then the
output is a valid wheel (patch) or an index that serves the file's hash (index). Never a
traceback.

Seeded: a failure names the seed, the case and its mutation. The default seed is fixed, so the suite
(and CI) gives the same verdict on every run; explore with ``RPW_FUZZ_SEED=random`` or any number, and
replay a failure with ``RPW_FUZZ_SEED=<seed>``. ``RPW_FUZZ_CASES`` sets how many cases run (default 240, a few seconds
here), and the run stops early after ``RPW_FUZZ_SECONDS`` (default 40) so CI stays bounded.
"""

from __future__ import annotations

import base64
import hashlib
import io
import os
import random
import shutil
import struct
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest
from installer.sources import WheelFile as InstallerWheel

from patched_wheels.index.simple import build_index
from patched_wheels.lock.apply import INDEX_OPTIONS
from patched_wheels.wheelfile import WheelReader
from support.fakecuda import compile_shared
from support.fuzzing import check_lock_command, one_error_line, run_cases, run_cli
from support.wheelbuilder import build_wheel

CASES = int(os.environ.get("RPW_FUZZ_CASES") or 240)
COMMANDS = ("patch", "graph", "doctor", "index")

INIT = b"".join(b"line = %d\n" % number for number in range(1, 11))
INIT_PATCH = b"--- a/demo/__init__.py\n+++ b/demo/__init__.py\n@@ -2,2 +2,3 @@\n line = 2\n+patched = True\n line = 3\n"


@dataclass(frozen=True)
class _Sample:
    """A valid wheel to mutate, and the byte ranges of its zip headers."""

    wheel: Path
    headers: tuple[tuple[int, int], ...]
    data: tuple[tuple[int, int], ...]


def _sample(wheel: Path) -> _Sample:
    """Locate local headers, member data, central directory and end record (zipfile does the parsing)."""
    raw = wheel.read_bytes()
    headers, data = [], []
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            name_length, extra_length = struct.unpack_from("<HH", raw, info.header_offset + 26)
            start = info.header_offset + 30 + name_length + extra_length
            headers.append((info.header_offset, start))
            data.append((start, start + info.compress_size))
        headers.append((archive.start_dir, len(raw)))  # central directory and end record
    return _Sample(wheel, tuple(headers), tuple(data))


def _mutate(rng: random.Random, sample: _Sample) -> tuple[str, bytes]:
    """One mutation of the sample's bytes and a description of it."""
    raw = bytearray(sample.wheel.read_bytes())
    kind = rng.choice(["flip", "header", "field", "truncate", "data", "member", "member"])
    if kind == "member":
        return _mutate_member(rng, sample.wheel)
    if kind == "truncate":
        cut = rng.choice([rng.randrange(len(raw)), len(raw) - rng.randrange(1, 200)])
        return f"truncate at {cut}", bytes(raw[:cut])
    if kind == "field":
        start, end = rng.choice(sample.headers)
        width = rng.choice([2, 4])
        offset = rng.randrange(start, max(start + 1, end - width))
        value = rng.choice([0, 1, 0x7F, 0xFF, 0xFFFF, 0xFFFFFFFF, rng.getrandbits(8 * width)]) % (1 << 8 * width)
        raw[offset : offset + width] = value.to_bytes(width, "little")
        return f"field at {offset} = {value:#x} ({width} bytes)", bytes(raw)
    regions = {"flip": [(0, len(raw))], "header": sample.headers, "data": [r for r in sample.data if r[1] > r[0]]}[kind]
    changes = []
    for _ in range(rng.randint(1, 4)):
        start, end = rng.choice(regions)
        offset = rng.randrange(start, end)
        raw[offset] ^= 1 << rng.randrange(8) if rng.random() < 0.5 else rng.randrange(1, 256)
        changes.append(offset)
    return f"{kind} bytes at {sorted(changes)}", bytes(raw)


def _mutate_member(rng: random.Random, wheel: Path) -> tuple[str, bytes]:
    """Change one member's content (bytes, lines, cut) and re-zip, RECORD updated unless it is the member."""
    with zipfile.ZipFile(wheel) as archive:
        members = [(info, archive.read(info)) for info in archive.infolist()]
    index = rng.randrange(len(members))
    info, content = members[index]
    changed = bytearray(content)
    how = rng.choice(["bytes", "line", "cut"])
    if how == "bytes" and changed:
        for _ in range(rng.randint(1, 4)):
            changed[rng.randrange(len(changed))] = rng.choice(
                [0, 0x0A, 0x2C, 0x2F, 0x3A, 0x7F, 0xFF, rng.randrange(256)]
            )
    elif how == "line":
        lines = bytes(changed).splitlines(keepends=True) or [b""]
        line = rng.randrange(len(lines))
        lines.insert(
            line, rng.choice([lines[line], b"\n", b"Version: 9.9\n", b"Name: other\n", b"Wheel-Version: 2.0\n"])
        )
        changed = bytearray(b"".join(lines))
    else:
        del changed[rng.randrange(len(changed) + 1) :]
    members[index] = (info, bytes(changed))
    record_name = next(i.filename for i, _ in members if i.filename.endswith(".dist-info/RECORD"))
    if info.filename != record_name:
        rows = []
        for other, data in members:
            if other.filename == record_name:
                continue
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{other.filename},sha256={digest},{len(data)}\n")
        record = ("".join(rows) + f"{record_name},,\n").encode()
        members = [(i, record if i.filename == record_name else data) for i, data in members]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for member_info, data in members:
            archive.writestr(member_info, data)
    return f"member {info.filename} ({how})", buffer.getvalue()


@pytest.fixture(scope="module")
def samples(tmp_path_factory: pytest.TempPathFactory) -> dict[str, _Sample]:
    root = tmp_path_factory.mktemp("fuzz-samples")
    demo = build_wheel(
        root,
        "demo",
        "1.0",
        {
            "demo/__init__.py": INIT,
            "demo/data.bin": random.Random(0).randbytes(3000),
            ".data/scripts/demo-run": b"#!python\n",
        },
        requires=["triton (==2.1.0)", "filelock"],
        modes={"demo-1.0.data/scripts/demo-run": 0o755},
    )
    library = compile_shared(
        root, "libfz.so", "int fz(void) { return 1; }\n", "-Wl,-soname,libfz.so.1", "-Wl,-rpath,$ORIGIN"
    )
    elf = build_wheel(
        root,
        "elfy",
        "1.0",
        {"elfy/__init__.py": b"", "elfy/libfz.so.1": library.read_bytes()},
        tag="py3-none-linux_x86_64",
    )
    return {"demo": _sample(demo), "elfy": _sample(elf)}


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()
    }


def _check_patch(case_dir: Path, wheel: Path, sample: str) -> None:
    out_dir = case_dir / "out"
    extra = ["--patch", str(case_dir.parent / "init.patch"), "--remove-requires", "triton"] if sample == "demo" else []
    status, out, err = run_cli(
        ["patch", "--wheel", str(wheel), "--dest-dir", str(out_dir), "--suffix", "fz.1", "--verify", *extra]
    )
    if status == 0:
        (written,) = out_dir.iterdir()
        assert out.splitlines()[0] == str(written)
        with WheelReader(written, verify=True):
            pass
        with InstallerWheel.open(written) as source:
            source.validate_record(validate_contents=True)
    else:
        one_error_line(status, out, err)
        assert not out_dir.exists() or not any(out_dir.iterdir()), sorted(out_dir.iterdir())


def _check_graph(case_dir: Path, wheel: Path, sample: str) -> None:
    status, out, err = run_cli(["graph", str(wheel)])
    if status != 0:
        one_error_line(status, out, err)
    assert sorted(path.name for path in case_dir.iterdir()) == [wheel.name]


def _check_doctor(case_dir: Path, wheel: Path, sample: str) -> None:
    status, out, err = run_cli(["doctor", "--no-cache", str(wheel)])
    if err or status not in (0, 1) or not out:  # exit 1 with a report (and no error) is a prediction, not an error
        one_error_line(status, out, err)
    assert sorted(path.name for path in case_dir.iterdir()) == [wheel.name]


def _check_index(case_dir: Path, wheel: Path, sample: str) -> None:
    directory = case_dir / "index"
    directory.mkdir()
    shutil.copy(case_dir.parent / "other-1.0-py3-none-any.whl", directory)
    build_index(directory)
    before = _snapshot(directory)
    wheel.rename(directory / wheel.name)
    status, out, err = run_cli(["index", str(directory)])
    if status == 0:
        page = (directory / "simple" / sample / "index.html").read_text()
        assert f"#sha256={hashlib.sha256((directory / wheel.name).read_bytes()).hexdigest()}" in page
    else:
        one_error_line(status, out, err)
        after = _snapshot(directory)
        after.pop(wheel.name)
        assert after == before, "the index changed"
        assert not [path for path in directory.iterdir() if path.name.startswith(".")]


CHECKS: dict[str, Callable[[Path, Path, str], None]] = {
    "patch": _check_patch,
    "graph": _check_graph,
    "doctor": _check_doctor,
    "index": _check_index,
}


def test_mutated_wheels_keep_the_promises(samples: dict[str, _Sample], tmp_path: Path) -> None:
    (tmp_path / "init.patch").write_bytes(INIT_PATCH)
    build_wheel(tmp_path, "other", "1.0", {"other/__init__.py": b""})

    def prepare(case: int, rng: random.Random, case_dir: Path) -> tuple[str, Callable[[], None]]:
        sample_name = rng.choice(sorted(samples))
        command = COMMANDS[case % len(COMMANDS)]
        mutation, data = _mutate(rng, samples[sample_name])
        wheel = case_dir / samples[sample_name].wheel.name
        wheel.write_bytes(data)
        return f"{command} {sample_name} ({mutation})", lambda: CHECKS[command](case_dir, wheel, sample_name)

    run_cases(tmp_path, CASES, "", prepare)


# --- Mutated locks through `lock` and `resolve`: a result (which reads back as a lock) or one error line ---

LOCK_CASES = int(os.environ.get("RPW_FUZZ_LOCK_CASES") or 300)
_HOSTILE_BYTES = b"\x00\n\r\t #\\[]\"=;@:,'\xff\xfe\x0b\x85"
_HOSTILE_LINES = [
    b"-r other.txt\n",
    b"--no-index\n",
    b"--find-links ./orig\n",
    b"-i https://x.example/simple\n",
    b"foo @ \n",
    b"foo==1.0 ; python_version >>> '3'\n",
    b"[[package]]\n",
    b'name = "foo"\n',
    b'version = "1.0+x"\n',
    b"foo[bar]==1.0 --hash=sha256:zz\n",
    b"dependencies = [\n",
    b"    # via -r in\n",
    b"\\\n",
    b'source = { git = "x" }\n',
]


def _requirements_sample(index: Path, orig: Path) -> bytes:
    digest = hashlib.sha256((orig / "bar-2.0-py3-none-any.whl").read_bytes()).hexdigest()
    return (
        "# generated by pip-compile\n--index-url https://pypi.example/simple\n"
        f'Foo[bar]==1.0 ; python_version >= "3" \\\n    --hash=sha256:{"a" * 64} \\\n    --hash=sha256:{"b" * 64}\n    # via -r in\n'
        f"bar==2.0 --hash=sha256:{digest}  # pinned\n"
        f"baz @ {(orig / 'baz-1.0-py3-none-any.whl').as_uri()} --hash=sha256:{'c' * 64}\n"
    ).encode()


def _uv_lock_sample(orig: Path) -> bytes:
    def wheel(name: str) -> str:
        path = orig / f"{name}-py3-none-any.whl"
        return f'wheels = [\n    {{ url = "{path.as_uri()}", hash = "sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}" }},\n]\n'

    return (
        'version = 1\nrevision = 3\nrequires-python = ">=3.11"\n\n'
        '[[package]]\nname = "bar"\nversion = "2.0"\nsource = { registry = "https://pypi.example/simple" }\n'
        + wheel("bar-2.0")
        + "\n"
        '[[package]]\nname = "foo"\nversion = "1.0"\nsource = { registry = "https://pypi.example/simple" }\n'
        'dependencies = [\n    { name = "bar" },\n]\n' + wheel("foo-1.0") + "\n"
        '[package.optional-dependencies]\nextra = [\n    { name = "bar", marker = "sys_platform == \'linux\'" },\n]\n\n'
        '[[package]]\nname = "proj"\nversion = "0.1"\nsource = { virtual = "." }\n'
        'dependencies = [\n    { name = "foo", extra = ["extra"] },\n]\n'
    ).encode()


def _mutate_text(rng: random.Random, data: bytes) -> tuple[str, bytes]:
    """Bytes changed, lines duplicated, dropped, swapped or inserted, or the text cut."""
    raw = bytearray(data)
    kind = rng.choice(["bytes", "bytes", "line", "line", "insert", "truncate"])
    if kind == "bytes":
        offsets = sorted(rng.randrange(len(raw)) for _ in range(rng.randint(1, 4)))
        for offset in offsets:
            raw[offset] = rng.choice([*_HOSTILE_BYTES, rng.randrange(256)])
        return f"bytes at {offsets}", bytes(raw)
    if kind == "truncate":
        cut = rng.randrange(len(raw))
        return f"truncate at {cut}", bytes(raw[:cut])
    lines = bytes(raw).splitlines(keepends=True)
    at = rng.randrange(len(lines))
    if kind == "insert":
        lines.insert(at, rng.choice(_HOSTILE_LINES))
        return f"insert at line {at}", b"".join(lines)
    how = rng.choice(["duplicate", "drop", "swap"])
    if how == "duplicate":
        lines.insert(at, lines[at])
    elif how == "drop":
        del lines[at]
    else:
        other = rng.randrange(len(lines))
        lines[at], lines[other] = lines[other], lines[at]
    return f"{how} line {at}", b"".join(lines)


def test_mutated_locks_keep_the_promises(tmp_path: Path) -> None:
    orig, index = tmp_path / "orig", tmp_path / "index"
    orig.mkdir()
    index.mkdir()
    for name, version in (("foo", "1.0"), ("bar", "2.0"), ("baz", "1.0")):
        build_wheel(orig, name, version, {f"{name}/__init__.py": b""})
    for name in ("foo", "baz"):
        build_wheel(index, name, "1.0+s.1", {f"{name}/__init__.py": b""})
    build_index(index)
    samples = {"requirements": _requirements_sample(index, orig), "uv-lock": _uv_lock_sample(orig)}
    for lock_format, data in samples.items():  # the unmutated samples lock cleanly
        (tmp_path / lock_format).write_bytes(data)
        check_lock_command(tmp_path, tmp_path / lock_format, lock_format, index, "direct")
        assert (tmp_path / "out.txt").exists()
        (tmp_path / "out.txt").unlink()
        (tmp_path / "out.uv.lock").unlink(missing_ok=True)

    def prepare(case: int, rng: random.Random, case_dir: Path) -> tuple[str, Callable[[], None]]:
        lock_format = rng.choice(sorted(samples))
        option = rng.choice(INDEX_OPTIONS)
        mutation, data = _mutate_text(rng, samples[lock_format])
        lock_file = case_dir / ("uv.lock" if lock_format == "uv-lock" else "requirements.txt")
        lock_file.write_bytes(data)
        return f"{lock_format} {option} ({mutation})", lambda: check_lock_command(
            case_dir, lock_file, lock_format, index, option
        )

    run_cases(tmp_path, LOCK_CASES, "lock-", prepare)
