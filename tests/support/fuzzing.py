"""What the fuzz tests share: the command line run in-process, the promise every bad input keeps, and the
seeded, time-bounded loop over cases (``RPW_FUZZ_SEED``, ``RPW_FUZZ_SECONDS``: see ``tests/python/test_fuzz.py``)."""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
import time
import traceback
from pathlib import Path
from typing import Callable

from patched_wheels.cli import main

_SEED_SETTING = os.environ.get("RPW_FUZZ_SEED", "20261122")
SEED = time.time_ns() % 1_000_000_007 if _SEED_SETTING == "random" else int(_SEED_SETTING)
SECONDS = float(os.environ.get("RPW_FUZZ_SECONDS") or 40)


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """``patched-wheels ARGV`` in this process: its exit status, stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


def one_error_line(status: int, out: str, err: str) -> None:
    """The promise for bad input: exit 1, no output, exactly one ``patched-wheels: error:`` line."""
    assert status == 1, f"exit {status}"
    assert out == "", f"stdout {out!r}"
    assert err.count("\n") == 1 and err.startswith("patched-wheels: error: "), f"stderr {err!r}"


def check_lock_command(
    case_dir: Path, lock_file: Path, lock_format: str, index: Path, option: str, *, forbidden: str | None = None
) -> None:
    """``lock`` and ``resolve --list-projects`` on a (mutated) lock keep the promise: what ``lock`` writes reads back
    as a lock (and holds no ``forbidden`` text), or it writes nothing and says one error line."""
    from patched_wheels.lock.formats.registry import read_lock

    out, uv_out = case_dir / "out.txt", case_dir / "out.uv.lock"
    extra = ["--out-uv-lock", str(uv_out)] if lock_format == "uv-lock" else []
    status, stdout, err = run_cli(
        [
            "lock",
            f"--{lock_format}",
            str(lock_file),
            "--index",
            str(index),
            "--out",
            str(out),
            "--index-option",
            option,
            *extra,
        ]
    )
    if status == 0:
        assert forbidden is None or forbidden not in out.read_text(encoding="utf-8"), (
            f"{forbidden} reached the requirements lock"
        )
        read_lock(out)  # what we wrote reads back as a lock
        if extra:
            read_lock(uv_out, "uv-lock")
    else:
        one_error_line(status, stdout, err)
        assert not out.exists() and not uv_out.exists(), "partial output"
    status, stdout, err = run_cli(["resolve", f"--{lock_format}", str(lock_file), "--list-projects"])
    if status != 0:
        one_error_line(status, stdout, err)


def run_cases(
    tmp_path: Path,
    count: int,
    seed_prefix: str,
    prepare: Callable[[int, random.Random, Path], tuple[str, Callable[[], None]]],
) -> None:
    """Run ``count`` seeded cases (``prepare`` makes one in its directory and says what it is) until the deadline;
    collect every broken promise, then fail naming the seed and the first few."""
    deadline = time.monotonic() + SECONDS
    failures: list[str] = []
    ran = 0
    for case in range(count):
        if time.monotonic() > deadline:
            break
        case_dir = tmp_path / f"case{seed_prefix}{case}"
        case_dir.mkdir()
        description, check = prepare(case, random.Random(f"{SEED}-{seed_prefix}{case}"), case_dir)
        try:
            check()
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a traceback of the CLI (or SystemExit) is exactly what is looked for
            detail = traceback.format_exc(limit=-6)
            failures.append(f"case {case}: {description}: {error!r}\n{detail}")
        shutil.rmtree(case_dir, ignore_errors=True)
        ran += 1
    assert ran >= min(count, 40), f"only {ran} cases ran in {SECONDS} s"
    assert not failures, f"RPW_FUZZ_SEED={SEED}: {len(failures)} of {ran} cases broke a promise:\n" + "\n".join(
        failures[:5]
    )
