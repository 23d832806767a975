"""Mutated values of TOML locks (uv.lock, pylock.toml) through ``lock`` and ``resolve``: only the promises.

Where ``test_fuzz`` mutates a lock's bytes and lines, this mutates what the readers validate: one name,
extra, version or marker of a lock for x86_64 and aarch64 (whose patched package becomes a uv fork when
written) is replaced by a hostile value (a name smuggling a URL, a marker packaging cannot evaluate, a
version with an option behind it, another spelling of a name already there) or has a hostile character
put into it. The promises: exit 1 with exactly one ``patched-wheels: error:`` line and no output, or
exit 0 with outputs that read back as locks and name no URL the mutation smuggled in. Never a traceback.

Seeded like ``test_fuzz`` (``RPW_FUZZ_SEED``, bounded by ``RPW_FUZZ_SECONDS``); ``RPW_FUZZ_TOML_CASES``
sets how many cases run (default 200, a few seconds here).
"""

from __future__ import annotations

import json
import os
import random
import re
from pathlib import Path
from typing import Callable

from patched_wheels.index.simple import build_index
from patched_wheels.lock.apply import INDEX_OPTIONS
from support.fuzzing import check_lock_command, run_cases
from support.wheelbuilder import build_wheel

TOML_CASES = int(os.environ.get("RPW_FUZZ_TOML_CASES") or 200)
EVIL = "evil.invalid"
HOSTILE_VALUES = [
    f"other@https://{EVIL}/x.whl#",
    f"x]@https://{EVIL}/x.whl#",
    f"foo ; python_version > '0' @ https://{EVIL}/",
    f"1.0 --index-url=https://{EVIL}/simple",
    "1.0\n--index-url=x",
    "python_version ~= '3'",
    "python_version ~= 'x'",
    "sys_platform == 'linux' and",
    "(" * 200,
    "",
    " ",
    "FOO",
    "Foo",
    "foo_",
    "-foo",
    "bar",
    "proj",
    "1.0+s.1",
    "1!0",
    "extra == 'extra'",
    "platform_machine == 'aarch64'",
    "implementation_name == 'pypy' or platform_machine == 'x86_64'",
    "python_full_version >= '3.11.*'",
    "platform_release ~= '5'",
    "\u2028",
    "foo\x00",
    "1.0" * 300,
]
HOSTILE_CHARACTERS = "\"'\\ @#[];,=<>~!*()\n\t\x00\u2028"
# Every string value of a name, version, marker or extra (uv.lock's edges and resolution-markers included).
_SITE = re.compile(r'(?:\b(?:name|version|marker) = |extra = \[|^    )("(?:[^"\\\n]|\\.)*")', re.MULTILINE)
_X86, _ARM = "foo-1.0-py3-none-manylinux_2_17_x86_64.whl", "foo-1.0-py3-none-manylinux_2_17_aarch64.whl"

UV_LOCK = f"""version = 1
revision = 3
requires-python = ">=3.9"
resolution-markers = [
    "platform_machine == 'x86_64' and sys_platform == 'linux'",
    "platform_machine == 'aarch64' and sys_platform == 'linux'",
]

[[package]]
name = "bar"
version = "2.0"
source = {{ registry = "https://pypi.example/simple" }}
wheels = [
    {{ url = "https://files.example/bar-2.0-py3-none-any.whl", hash = "sha256:{"a" * 64}" }},
]

[[package]]
name = "foo"
version = "1.0"
source = {{ registry = "https://pypi.example/simple" }}
dependencies = [
    {{ name = "bar" }},
]
sdist = {{ url = "https://files.example/foo-1.0.tar.gz", hash = "sha256:{"b" * 64}" }}
wheels = [
    {{ url = "https://files.example/{_ARM}", hash = "sha256:{"c" * 64}" }},
    {{ url = "https://files.example/{_X86}", hash = "sha256:{"d" * 64}" }},
]

[package.optional-dependencies]
extra = [
    {{ name = "bar", marker = "sys_platform == 'linux'" }},
]

[[package]]
name = "proj"
version = "0.1"
source = {{ virtual = "." }}
dependencies = [
    {{ name = "foo", extra = ["extra"], marker = "python_version >= '3.9'" }},
]
"""

PYLOCK = f"""lock-version = "1.0"
created-by = "uv"
requires-python = ">=3.9"

[[packages]]
name = "bar"
version = "2.0"
index = "https://pypi.example/simple"
wheels = [{{ url = "https://files.example/bar-2.0-py3-none-any.whl", hashes = {{ sha256 = "{"a" * 64}" }} }}]

[[packages]]
name = "foo"
version = "1.0"
marker = "sys_platform == 'linux'"
index = "https://pypi.example/simple"
sdist = {{ url = "https://files.example/foo-1.0.tar.gz", hashes = {{ sha256 = "{"b" * 64}" }} }}
wheels = [
    {{ url = "https://files.example/{_ARM}", hashes = {{ sha256 = "{"c" * 64}" }} }},
    {{ url = "https://files.example/{_X86}", hashes = {{ sha256 = "{"d" * 64}" }} }},
]
"""

SAMPLES = {"uv-lock": UV_LOCK, "pylock": PYLOCK}


def _mutate(rng: random.Random, text: str) -> tuple[str, str]:
    """One name, version, marker or extra of ``text`` replaced by a hostile value or with a hostile character in it."""
    site = rng.choice(list(_SITE.finditer(text)))
    value = json.loads(site.group(1))
    if rng.random() < 0.6:
        new = rng.choice(HOSTILE_VALUES)
    else:
        at = rng.randrange(len(value) + 1)
        new = value[:at] + rng.choice(HOSTILE_CHARACTERS) + value[at:]
    start, end = site.span(1)
    return f"{value!r} -> {new!r} at {start}", text[:start] + json.dumps(new) + text[end:]


def test_mutated_lock_values_keep_the_promises(tmp_path: Path) -> None:
    index = tmp_path / "index"
    index.mkdir()
    build_wheel(
        index, "foo", "1.0+s.1", {"foo/__init__.py": b""}, tag="py3-none-manylinux_2_17_x86_64", requires=["bar>=2"]
    )
    build_index(index)
    for lock_format, text in SAMPLES.items():  # the unmutated samples lock cleanly; the uv.lock's foo becomes a fork
        (tmp_path / lock_format).write_text(text)
        check_lock_command(tmp_path, tmp_path / lock_format, lock_format, index, "direct", forbidden=EVIL)
        assert f"sha256:{'c' * 64}" in (tmp_path / "out.txt").read_text()  # the aarch64 wheel stays
        (tmp_path / "out.txt").unlink()
    assert (tmp_path / "out.uv.lock").read_text().count('name = "foo"\n') == 2

    def prepare(case: int, rng: random.Random, case_dir: Path) -> tuple[str, Callable[[], None]]:
        lock_format = rng.choice(sorted(SAMPLES))
        option = rng.choice(INDEX_OPTIONS)
        mutation, text = _mutate(rng, SAMPLES[lock_format])
        lock_file = case_dir / ("uv.lock" if lock_format == "uv-lock" else "pylock.toml")
        lock_file.write_text(text, encoding="utf-8")
        return f"{lock_format} {option} ({mutation})", lambda: check_lock_command(
            case_dir, lock_file, lock_format, index, option, forbidden=EVIL
        )

    run_cases(tmp_path, TOML_CASES, "toml-", prepare)
