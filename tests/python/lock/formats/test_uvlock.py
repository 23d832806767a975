"""uv.lock and pylock.toml in, uv.lock out: locks made by the real uv on fixture wheels served from a
local index (loopback only), read as pins, rewritten, and read back by the real uv and pip."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from patched_wheels.cli import main
from patched_wheels.index.simple import build_index
from patched_wheels.lock import model as pins_module
from patched_wheels.lock.formats.registry import read_lock
from patched_wheels.lock.resolve import IndexPages, resolve
from support.indexfixtures import pip_env, run_cli, run_pip, sha256_of
from support.uvfixture import serve_over_http
from support.wheelbuilder import build_wheel

uv_module = pytest.importorskip("uv", reason="the real uv makes and reads the locks")
UV = uv_module.find_uv_bin()
LINUX = {
    "sys_platform": "linux",
    "platform_machine": "x86_64",
    "python_version": "3.11",
    "python_full_version": "3.11.7",
    "os_name": "posix",
    "platform_system": "Linux",
    "implementation_name": "cpython",
}
WINDOWS = {**LINUX, "sys_platform": "win32", "platform_system": "Windows", "os_name": "nt"}
PYPROJECT = """[project]
name = "proj"
version = "0.1"
requires-python = ">=3.9"
dependencies = ["Foo[bar]==1.0", "winonly ; sys_platform == 'win32'"]
"""


def _foo(directory: Path, version: str, *requires: str) -> Path:
    return build_wheel(
        directory,
        "foo",
        version,
        {"foo/__init__.py": f"VERSION = {version!r}\n".encode()},
        requires=['extradep==1.0 ; extra == "bar"', "bar>=2", *requires],
        metadata_extra="Provides-Extra: bar\n",
    )


def _uv(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **pip_env(),
        "UV_NO_CONFIG": "1",
        "UV_CACHE_DIR": str(cwd.parent / "uv-cache"),
        "UV_PYTHON_DOWNLOADS": "never",
    }
    env.pop("VIRTUAL_ENV", None)
    result = subprocess.run([UV, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    return result


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path | str]]:
    """Upstream wheels served over HTTP, a project locked by uv against them, the patched foo (which
    now requires its split sibling foo-libs) in an index."""
    root = tmp_path_factory.mktemp("uvworld")
    orig, index, project = root / "orig", root / "index", root / "project"
    for directory in (orig, index, project):
        directory.mkdir()
    _foo(orig, "1.0")
    for name, version in (("extradep", "1.0"), ("bar", "2.0"), ("winonly", "1.0")):
        build_wheel(orig, name, version, {f"{name}/__init__.py": b""})
    build_index(orig)
    _foo(index, "1.0+s.1", "foo-libs==1.0+s.1")
    build_wheel(index, "foo-libs", "1.0+s.1", {"foo_libs/__init__.py": b""})
    (project / "pyproject.toml").write_text(PYPROJECT)
    with serve_over_http(orig) as base:
        url = f"{base}/simple"
        _uv("lock", "--default-index", url, "--python", sys.executable, cwd=project)
        yield {"root": root, "orig": orig, "index": index, "project": project, "url": url}


def test_uv_lock_pins_for_an_environment(world: dict) -> None:
    """The packages this environment installs, with the extras asked of them and their files; the
    Windows-only one only on Windows; the workspace member itself is no pin."""
    lock = read_lock(world["project"] / "uv.lock", "uv-lock", LINUX)
    assert [(pin.head, str(pin.version), len(pin.files), len(pin.hashes)) for pin in lock.pins] == [
        ("bar", "2.0", 1, 1),
        ("extradep", "1.0", 1, 1),
        ("foo[bar]", "1.0", 1, 1),
    ]
    assert all(
        f.url.startswith(world["url"].removesuffix("/simple")) and f.sha256 for pin in lock.pins for f in pin.files
    )
    assert "winonly" in [pin.name for pin in read_lock(world["project"] / "uv.lock", "uv-lock", WINDOWS).pins]


def test_resolve_takes_the_files_a_uv_lock_names(world: dict, tmp_path: Path) -> None:
    wheels = resolve(world["project"] / "uv.lock", IndexPages(tmp_path, "unused"), lock_format="uv-lock")
    assert sorted(w.filename for w in wheels) == [
        "bar-2.0-py3-none-any.whl",
        "extradep-1.0-py3-none-any.whl",
        "foo-1.0-py3-none-any.whl",
    ]
    assert {w.filename: w.sha256 for w in wheels}["foo-1.0-py3-none-any.whl"] == sha256_of(
        world["orig"] / "foo-1.0-py3-none-any.whl"
    )


def test_lock_writes_a_uv_lock_uv_installs_the_patched_wheels_from(world: dict, tmp_path: Path, capsys) -> None:
    source = world["project"] / "uv.lock"
    requirements, written = tmp_path / "requirements.txt", tmp_path / "uv.lock"
    status = main(
        [
            "lock",
            "--uv-lock",
            str(source),
            "--index",
            str(world["index"]),
            "--out",
            str(requirements),
            "--out-uv-lock",
            str(written),
        ]
    )
    assert status == 0, capsys.readouterr().err

    # Every byte but foo's table and the sibling added after the last one is the user's.
    before, after = source.read_text(), written.read_text()
    head = before[: before.index('[[package]]\nname = "foo"')]
    tail = before[before.index('[[package]]\nname = "proj"') :]
    assert after.startswith(head) and tail in after
    assert after.count("[[package]]") == before.count("[[package]]") + 1

    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "uv.lock").write_text(after)
    exported = _uv("export", "--frozen", "--no-hashes", cwd=project).stdout
    assert "foo==1.0+s.1" in exported and "foo-libs==1.0+s.1" in exported
    _uv("sync", "--frozen", "--python", sys.executable, cwd=project)  # the unpatched wheels: from the fixture's server
    site = next((project / ".venv" / "lib").glob("python*/site-packages"))
    assert (site / "foo" / "__init__.py").read_text() == "VERSION = '1.0+s.1'\n"
    assert (site / "foo_libs").is_dir() and (site / "extradep").is_dir() and not (site / "winonly").exists()

    # The requirements lock from the same uv.lock: real pip installs the same set.
    report = tmp_path / "report.json"
    result = run_pip(
        "install",
        "--dry-run",
        "--quiet",
        "--report",
        str(report),
        "-r",
        str(requirements),
        "--no-index",
        "--find-links",
        str(world["orig"]),
    )
    assert result.returncode == 0, result.stderr
    installed = {
        i["metadata"]["name"].lower(): i["metadata"]["version"] for i in json.loads(report.read_text())["install"]
    }
    assert installed == {"foo": "1.0+s.1", "foo-libs": "1.0+s.1", "bar": "2.0", "extradep": "1.0"}


def test_pylock_from_uv_gives_the_same_pins_and_lock(world: dict, tmp_path: Path) -> None:
    pylock = tmp_path / "pylock.toml"
    pylock.write_text(_uv("export", "--frozen", "--format", "pylock.toml", cwd=world["project"]).stdout)
    from_uv = read_lock(world["project"] / "uv.lock", "uv-lock", LINUX)
    from_pylock = read_lock(pylock, "pylock", LINUX)
    assert [(p.project, p.version, p.sha256s) for p in from_pylock.pins] == [
        (p.project, p.version, p.sha256s) for p in from_uv.pins
    ]
    out = tmp_path / "requirements.txt"
    result = run_cli("lock", "--pylock", str(pylock), "--index", str(world["index"]), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "foo @ file://" in out.read_text() and "foo-libs @ file://" in out.read_text()


HOSTILE = {
    "truncated": lambda text: text[: len(text) // 2].rsplit("\n", 3)[0] + '\nname = "x',
    "wrong-type": lambda text: text.replace('version = "2.0"', "version = 2"),
    "wrong-package-type": lambda text: text.replace("[[package]]", "[[package]]\nwheels = 3", 1),
    "not-utf-8": lambda text: text.replace("bar", "b\udcffar"),
    "deep": lambda text: text + "x = " + "[" * 100_000 + "]" * 100_000 + "\n",
    "no-source": lambda text: text.replace("source = { registry", "origin = { registry", 1),
    "unknown-dependency": lambda text: text.replace('{ name = "bar" }', '{ name = "nope" }', 1),
    # a hash is written into the requirements lock: a line break in it would add an option line
    "hash-injects-an-option": lambda text: re.sub(
        r"([0-9a-f]{64})", r"\1\\n--index-url=https://evil.example/simple", text, count=1
    ),
    "hash-short": lambda text: re.sub(r"([0-9a-f]{64})", "abc", text, count=1),
    # a package listed twice for the same environment (pylock.toml: PEP 751 allows one; uv.lock: a
    # second fork of the same version and source, which its dependents cannot tell apart)
    "listed-twice": lambda text: text + text[text.index("[[package") :].split("\n\n")[0] + "\n",
    # bar as a direct URL (uv.lock: its source; pylock.toml: an archive), a line break in the URL
    "url-injects-an-option": lambda text: re.sub(
        r'(name = "bar"\nversion = "2.0"\n)(source = \{ registry = "[^"]*" \}|index = "[^"]*")',
        r'\1source = { url = "https://x.example/bar-2.0-py3-none-any.whl\\n--index-url=https://evil.example/simple" }\n'
        r'archive = { url = "https://x.example/bar-2.0.tar.gz\\n--index-url=https://evil.example/simple", hashes = { sha256 = "'
        + "0" * 64
        + '" } }',
        text,
        count=1,
    ),
    # the same, spelled otherwise (the same project by PEP 503)
    "listed-twice-spelled-otherwise": lambda text: (
        text
        + re.sub(
            r'name = "([^"]+)"',
            lambda m: f'name = "{m[1].upper()}"',
            text[text.index("[[package") :].split("\n\n")[0],
            count=1,
        )
        + "\n"
    ),
    # a name or extra read from the TOML becomes the start of a requirement: "x@URL#" a direct reference
    "name-smuggles-a-url": lambda text: text.replace('name = "bar"', 'name = "other@https://evil.invalid/x.whl#"'),
    "extra-smuggles-a-url": lambda text: text.replace('extra = ["bar"]', 'extra = ["x]@https://evil.invalid/x.whl#"]'),
    # an edge's extras that are no strings: a TypeError (unhashable, or sorted beside a string) out of the walk
    "extra-not-a-string": lambda text: text.replace('extra = ["bar"]', "extra = [{}]"),
    "extra-a-number-beside-a-string": lambda text: text.replace('extra = ["bar"]', 'extra = ["bar", 1]'),
    # packaging raises UndefinedComparison evaluating it (an edge marker; a pylock.toml package marker)
    "marker-undefined-comparison": lambda text: text.replace("sys_platform == 'win32'", "python_version ~= '3'"),
}


HOSTILE_READ_BY_BOTH = {
    "hash-injects-an-option",
    "hash-short",
    "url-injects-an-option",
    "name-smuggles-a-url",
    "marker-undefined-comparison",
    "listed-twice-spelled-otherwise",
}
HOSTILE_READ_BY_UV = {  # pylock.toml has no extras
    "extra-smuggles-a-url",
    "extra-not-a-string",
    "extra-a-number-beside-a-string",
}


@pytest.mark.parametrize("fmt", ["uv-lock", "pylock"])
@pytest.mark.parametrize("mutation", sorted(HOSTILE))
def test_hostile_toml_locks_are_one_error_line(world: dict, tmp_path: Path, fmt: str, mutation: str) -> None:
    text = (
        (world["project"] / "uv.lock").read_text()
        if fmt == "uv-lock"
        else _uv("export", "--frozen", "--format", "pylock.toml", cwd=world["project"]).stdout
    )
    bad = tmp_path / ("uv.lock" if fmt == "uv-lock" else "pylock.toml")
    bad.write_bytes(HOSTILE[mutation](text).encode("utf-8", "surrogateescape"))
    flag = "--uv-lock" if fmt == "uv-lock" else "--pylock"
    result = run_cli("lock", flag, str(bad), "--index", str(world["index"]), "--out", str(tmp_path / "out.txt"))
    if result.returncode == 0:  # the mutation missed what this format reads: a result, then
        assert mutation not in HOSTILE_READ_BY_BOTH and (fmt, mutation) != ("pylock", "listed-twice")
        assert fmt != "uv-lock" or mutation not in HOSTILE_READ_BY_UV
        assert (tmp_path / "out.txt").exists()
        return
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"patched-wheels: error: {bad}")
    assert not (tmp_path / "out.txt").exists()


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", r"'version' is missing: not a uv\.lock$"),  # an empty file would read as a lock of nothing
        ('lock-version = "1.0"\n\n[[packages]]\nname = "six"\nversion = "1.17.0"\n', r"a pylock\.toml\)$"),
        ('version = 2\n\n[[package]]\nname = "six"\nversion = "1.17.0"\n', r"version 2: not a uv\.lock format"),
        ('version = "1"\n', r"'version' must be an integer, not str$"),
    ],
    ids=["empty", "a-pylock", "version-2", "version-a-string"],
)
def test_a_file_that_is_not_a_uv_lock_of_version_1_is_one_error(tmp_path: Path, text: str, message: str) -> None:
    """Given to --uv-lock, a pylock.toml (or an empty file) read as a lock of no package, and ``lock`` wrote a lock
    of nothing but the index's projects."""
    path = tmp_path / "uv.lock"
    path.write_text(text)
    with pytest.raises(pins_module.InvalidLockError, match=f"^{re.escape(str(path))}: .*{message}"):
        read_lock(path, "uv-lock")


def test_special_and_huge_lock_files_are_refused_unread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fifo = tmp_path / "uv.lock"
    os.mkfifo(fifo)
    with pytest.raises(pins_module.InvalidLockError, match="not a regular file"):
        read_lock(fifo, "uv-lock")
    zero = tmp_path / "requirements_lock.txt"
    zero.symlink_to("/dev/zero")
    with pytest.raises(pins_module.InvalidLockError, match="not a regular file"):
        read_lock(zero)
    monkeypatch.setattr(pins_module, "MAX_LOCK_BYTES", 1 << 20)
    huge = tmp_path / "requirements.txt"
    with huge.open("wb") as file:
        file.truncate(2 << 20)
    with pytest.raises(pins_module.InvalidLockError, match=f"larger than {1 << 20} bytes"):
        read_lock(huge)


FORKS = """version = 1
revision = 3
requires-python = ">=3.9"
resolution-markers = [
    "sys_platform == 'win32'",
    "sys_platform != 'win32'",
]

[[package]]
name = "app"
version = "0.1"
source = { editable = "." }
dependencies = [
    { name = "numpy", version = "1.0", source = { registry = "https://pypi.example/simple" }, marker = "sys_platform == 'win32'" },
    { name = "numpy", version = "2.0", source = { registry = "https://pypi.example/simple" }, marker = "sys_platform != 'win32'" },
    { name = "torch", extra = ["cuda"], marker = "sys_platform == 'linux'" },
]

[package.dev-dependencies]
test = [
    { name = "pytest" },
]

[[package]]
name = "numpy"
version = "1.0"
source = { registry = "https://pypi.example/simple" }
resolution-markers = [
    "sys_platform == 'win32'",
]
wheels = [
    { url = "https://files.example/numpy-1.0-cp311-cp311-win_amd64.whl", hash = "sha256:%(a)s" },
]

[[package]]
name = "numpy"
version = "2.0"
source = { registry = "https://pypi.example/simple" }
resolution-markers = [
    "sys_platform != 'win32'",
]
sdist = { url = "https://files.example/numpy-2.0.tar.gz", hash = "sha256:%(b)s" }
wheels = [
    { url = "https://files.example/numpy-2.0-cp311-cp311-manylinux_2_17_x86_64.whl", hash = "sha256:%(c)s" },
    { url = "https://files.example/numpy-2.0-cp311-cp311-macosx_11_0_arm64.whl", hash = "sha256:%(d)s" },
]

[[package]]
name = "nvidia-cublas"
version = "12.1"
source = { registry = "https://pypi.example/simple" }
wheels = [
    { url = "https://files.example/nvidia_cublas-12.1-py3-none-manylinux1_x86_64.whl", hash = "sha256:%(e)s" },
]

[[package]]
name = "pytest"
version = "8.0"
source = { registry = "https://pypi.example/simple" }
wheels = [
    { url = "https://files.example/pytest-8.0-py3-none-any.whl", hash = "sha256:%(f)s" },
]

[[package]]
name = "torch"
version = "2.1.0"
source = { registry = "https://pypi.example/simple" }
wheels = [
    { url = "https://files.example/torch-2.1.0-cp311-cp311-manylinux1_x86_64.whl", hash = "sha256:%(a)s" },
]

[package.optional-dependencies]
cuda = [
    { name = "nvidia-cublas", marker = "platform_machine == 'x86_64'" },
]
""" % {letter: letter * 64 for letter in "abcdef"}


@pytest.mark.parametrize(
    "environment, expected",
    [
        (LINUX, ["numpy==2.0", "nvidia-cublas==12.1", "pytest==8.0", "torch[cuda]==2.1.0"]),
        (WINDOWS, ["numpy==1.0", "pytest==8.0"]),
        ({**LINUX, "sys_platform": "darwin", "platform_system": "Darwin"}, ["numpy==2.0", "pytest==8.0"]),
        ({**LINUX, "platform_machine": "aarch64"}, ["numpy==2.0", "pytest==8.0", "torch[cuda]==2.1.0"]),
    ],
    ids=["linux", "windows", "macos", "linux-arm"],
)
def test_a_uv_lock_for_several_platforms_gives_each_its_pins(
    tmp_path: Path, environment: dict, expected: list[str]
) -> None:
    """Forks picked by the edge's version and marker, extras asked by an edge followed, dev groups of the
    workspace member included, the member itself no pin."""
    path = tmp_path / "uv.lock"
    path.write_text(FORKS)
    lock = read_lock(path, "uv-lock", environment)
    assert [pin.text for pin in lock.pins] == expected
    numpy = next(pin for pin in lock.pins if pin.name == "numpy")
    assert len(numpy.hashes) == (3 if numpy.version.major == 2 else 1)  # the sdist's too


def test_uv_refuses_the_written_lock_when_the_wheel_is_not_the_one_we_wrote(world: dict, tmp_path: Path) -> None:
    """The sha256 written into the uv.lock is checked by uv: a wheel replaced after locking is refused."""
    written = tmp_path / "uv.lock"
    result = run_cli(
        "lock",
        "--uv-lock",
        str(world["project"] / "uv.lock"),
        "--index",
        str(world["index"]),
        "--out",
        str(tmp_path / "r.txt"),
        "--out-uv-lock",
        str(written),
    )
    assert result.returncode == 0, result.stderr
    sha = sha256_of(world["index"] / "foo-1.0+s.1-py3-none-any.whl")
    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(PYPROJECT)
    (project / "uv.lock").write_text(written.read_text().replace(sha, "0" * 64))
    env = {**pip_env(), "UV_NO_CONFIG": "1", "UV_CACHE_DIR": str(tmp_path / "cache"), "UV_PYTHON_DOWNLOADS": "never"}
    refused = subprocess.run(
        [UV, "sync", "--frozen", "--python", sys.executable],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert refused.returncode != 0 and "hash" in refused.stderr.lower(), refused.stderr


@pytest.mark.parametrize("second", ["same-as-out", "directory", "missing-directory"])
def test_two_outputs_are_written_both_or_neither(world: dict, tmp_path: Path, second: str) -> None:
    """--out-uv-lock that cannot be written (or is --out itself, which one output would silently
    overwrite) is one error line naming the flag, and --out is not written either."""
    out = tmp_path / "requirements.txt"
    target = {"same-as-out": out, "directory": tmp_path, "missing-directory": tmp_path / "gone" / "uv.lock"}[second]
    result = run_cli(
        "lock",
        "--uv-lock",
        str(world["project"] / "uv.lock"),
        "--index",
        str(world["index"]),
        "--out",
        str(out),
        "--out-uv-lock",
        str(target),
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"patched-wheels: error: --out-uv-lock {target}: ")
    assert not out.exists()
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


TWO_PLATFORMS = """[project]
name = "proj"
version = "0.1"
requires-python = ">=3.9"
dependencies = ["foo==1.0"]

[tool.uv]
environments = ["sys_platform == 'linux' and platform_machine == 'x86_64'", "sys_platform == 'linux' and platform_machine == 'aarch64'"]
"""


@pytest.fixture(scope="module")
def two_platforms(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path | str]]:
    """foo 1.0 for x86_64 and aarch64 (each wheel says which it is), locked by the real uv for both
    platforms; the index holds foo 1.0+s.1 patched for x86_64 only (the jax-cuda12-pjrt shape)."""
    root = tmp_path_factory.mktemp("twoplatforms")
    orig, index, project = root / "orig", root / "index", root / "project"
    for directory in (orig, index, project):
        directory.mkdir()
    for machine in ("x86_64", "aarch64"):
        build_wheel(
            orig,
            "foo",
            "1.0",
            {"foo/__init__.py": f"BUILT = {machine!r}\n".encode()},
            tag=f"py3-none-manylinux_2_17_{machine}",
            requires=["bar>=2"],
        )
    build_wheel(orig, "bar", "2.0", {"bar/__init__.py": b""})
    build_index(orig)
    build_wheel(
        index,
        "foo",
        "1.0+s.1",
        {"foo/__init__.py": b"BUILT = 'patched'\n"},
        tag="py3-none-manylinux_2_17_x86_64",
        requires=["bar>=2"],
    )
    (project / "pyproject.toml").write_text(TWO_PLATFORMS)
    with serve_over_http(orig) as base:
        url = f"{base}/simple"
        _uv("lock", "--default-index", url, "--python", sys.executable, cwd=project)
        yield {"root": root, "orig": orig, "index": index, "project": project, "url": url}


def _installs(requirements: Path, platform: str, find_links: Path) -> str:
    """The foo the real uv installs from the requirements lock on ``platform`` (``==VERSION`` or `` @ URL``):
    pip evaluates markers for the running machine only, uv for the platform it is given."""
    result = _uv(
        "pip",
        "install",
        "--dry-run",
        "--python-platform",
        platform,
        "--python-version",
        "3.11",
        "--no-index",
        "--find-links",
        str(find_links),
        "--target",
        str(requirements.parent / platform),
        "-r",
        str(requirements),
        cwd=requirements.parent,
    )
    (installed,) = re.findall(r"^ \+ foo(==\S+| @ \S+)$", result.stderr, re.MULTILINE)
    return installed


def test_a_uv_lock_for_two_platforms_keeps_the_other_platform_installable(two_platforms: dict, tmp_path: Path) -> None:
    """The written uv.lock: uv sync --frozen installs the patched wheel here (x86_64); uv export --frozen
    gives aarch64 the upstream wheel with its hash, which uv pip install takes for aarch64. The
    requirements lock from the same uv.lock: pip takes the patched wheel on x86_64, upstream on aarch64."""
    requirements, written = tmp_path / "requirements.txt", tmp_path / "uv.lock"
    result = run_cli(
        "lock",
        "--uv-lock",
        str(two_platforms["project"] / "uv.lock"),
        "--index",
        str(two_platforms["index"]),
        "--out",
        str(requirements),
        "--out-uv-lock",
        str(written),
    )
    assert result.returncode == 0, result.stderr
    aarch64 = "foo-1.0-py3-none-manylinux_2_17_aarch64.whl"
    assert aarch64 in written.read_text() and sha256_of(two_platforms["orig"] / aarch64) in written.read_text()

    project = tmp_path / "project"
    project.mkdir()
    (project / "pyproject.toml").write_text(TWO_PLATFORMS)
    (project / "uv.lock").write_text(written.read_text())
    with serve_over_http(two_platforms["orig"]) as base:  # the lock's upstream URLs: the fixture's server, moved
        (project / "uv.lock").write_text(
            written.read_text().replace(two_platforms["url"].removesuffix("/simple"), base)
        )
        _uv("sync", "--frozen", "--python", sys.executable, cwd=project)
        site = next((project / ".venv" / "lib").glob("python*/site-packages"))
        assert (site / "foo" / "__init__.py").read_text() == "BUILT = 'patched'\n"
        exported = project / "exported.txt"
        exported.write_text(_uv("export", "--frozen", "--no-header", cwd=project).stdout)
        assert (
            "foo==1.0 ; " in exported.read_text() and sha256_of(two_platforms["orig"] / aarch64) in exported.read_text()
        )
        dry_run = _uv(
            "pip",
            "install",
            "--dry-run",
            "--python-platform",
            "aarch64-manylinux_2_28",
            "--python-version",
            "3.11",
            "--target",
            str(project / "aarch64"),
            "--index-url",
            f"{base}/simple",
            "-r",
            str(exported),
            cwd=project,
        )
    assert "+ foo==1.0\n" in dry_run.stderr, dry_run.stderr

    patched = "foo-1.0+s.1-py3-none-manylinux_2_17_x86_64.whl"
    both = tmp_path / "wheels"
    both.mkdir()
    for wheel in (
        two_platforms["orig"] / aarch64,
        two_platforms["orig"] / "bar-2.0-py3-none-any.whl",
        two_platforms["index"] / patched,
    ):
        (both / wheel.name).write_bytes(wheel.read_bytes())
    assert _installs(requirements, "x86_64-manylinux_2_28", both).endswith(f"/{patched}")
    assert _installs(requirements, "aarch64-manylinux_2_28", both) == "==1.0"  # --hash: the upstream aarch64 wheel


def test_a_pylock_for_two_platforms_keeps_the_other_platform_installable(two_platforms: dict, tmp_path: Path) -> None:
    pylock = tmp_path / "pylock.toml"
    pylock.write_text(_uv("export", "--frozen", "--format", "pylock.toml", cwd=two_platforms["project"]).stdout)
    requirements = tmp_path / "requirements.txt"
    result = run_cli(
        "lock", "--pylock", str(pylock), "--index", str(two_platforms["index"]), "--out", str(requirements)
    )
    assert result.returncode == 0, result.stderr
    aarch64, patched = "foo-1.0-py3-none-manylinux_2_17_aarch64.whl", "foo-1.0+s.1-py3-none-manylinux_2_17_x86_64.whl"
    both = tmp_path / "wheels"
    both.mkdir()
    for wheel in (
        two_platforms["orig"] / aarch64,
        two_platforms["orig"] / "bar-2.0-py3-none-any.whl",
        two_platforms["index"] / patched,
    ):
        (both / wheel.name).write_bytes(wheel.read_bytes())
    assert _installs(requirements, "x86_64-manylinux_2_28", both).endswith(f"/{patched}")
    assert _installs(requirements, "aarch64-manylinux_2_28", both) == "==1.0"  # --hash: the upstream aarch64 wheel


def test_the_uv_lock_writer_edits_keys_not_lines_that_look_like_them(world: dict, tmp_path: Path) -> None:
    """A ``source =`` and a ``wheels =`` line inside a multi-line string of the patched package are
    string, not keys: the string comes out as it was, the real source and wheels are ours."""
    text = (world["project"] / "uv.lock").read_text()
    string = '"""\nsource = { registry = "https://evil.invalid/simple" }\nwheels = [\n]\n"""'
    source = tmp_path / "in.lock"
    assert text.count("]\n\n[package.optional-dependencies]") == 1  # foo's: after its wheels, where uv's keys end
    source.write_text(
        text.replace("]\n\n[package.optional-dependencies]", f"]\nnote = {string}\n\n[package.optional-dependencies]")
    )
    written = tmp_path / "uv.lock"
    result = run_cli(
        "lock",
        "--uv-lock",
        str(source),
        "--index",
        str(world["index"]),
        "--out",
        str(tmp_path / "r.txt"),
        "--out-uv-lock",
        str(written),
    )
    assert result.returncode == 0, result.stderr
    from patched_wheels.lock.formats.tomlread import toml_parser

    tomllib = toml_parser(written)
    (foo,) = [p for p in tomllib.loads(written.read_text())["package"] if p["name"] == "foo"]
    assert foo["note"] == tomllib.loads(f"x = {string}")["x"]
    assert foo["source"] == {"registry": (world["index"] / "simple").as_uri()} and foo["version"] == "1.0+s.1"
    assert [w["url"].rsplit("/", 1)[-1] for w in foo["wheels"]] == ["foo-1.0+s.1-py3-none-any.whl"]


def test_a_workspace_member_in_the_index_is_refused(world: dict, tmp_path: Path) -> None:
    """proj is the uv.lock's own project (a virtual source): a wheel of it in the index would be a second
    [[package]] proj, so it is one error line and nothing is written."""
    index = tmp_path / "index"
    index.mkdir()
    for wheel in world["index"].glob("*.whl"):
        (index / wheel.name).write_bytes(wheel.read_bytes())
    build_wheel(index, "proj", "0.1+s.1", {"proj/__init__.py": b""})
    result = run_cli(
        "lock",
        "--uv-lock",
        str(world["project"] / "uv.lock"),
        "--index",
        str(index),
        "--out",
        str(tmp_path / "r.txt"),
        "--out-uv-lock",
        str(tmp_path / "uv.lock"),
    )
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"patched-wheels: error: {world['project'] / 'uv.lock'}: proj is a workspace member"), line
    assert not (tmp_path / "r.txt").exists() and not (tmp_path / "uv.lock").exists()


def test_a_forked_package_whose_wheel_rows_share_lines_is_one_error_line(two_platforms: dict, tmp_path: Path) -> None:
    """The rows of the wheels array of a package that becomes a fork are checked one line each: a row whose
    array value runs onto the next line (valid TOML) leaves a line that parses to no document at all, and
    that layout is refused with one line (it was a traceback: the check read a value out of None)."""
    text = (two_platforms["project"] / "uv.lock").read_text()
    rows = re.findall(
        r"^    \{ url = \"[^\"]*/foo-1\.0-py3-none-manylinux_2_17_[a-z0-9_]+\.whl\".* \},\n", text, re.MULTILINE
    )
    assert len(rows) == 2 and "".join(rows) in text  # foo's two wheels, one row per line as uv writes them
    source = tmp_path / "in.lock"
    source.write_text(
        text.replace("".join(rows), rows[0].removesuffix(" },\n") + ", note = [\n    ] }, " + rows[1].lstrip())
    )
    result = run_cli(
        "lock",
        "--uv-lock",
        str(source),
        "--index",
        str(two_platforms["index"]),
        "--out",
        str(tmp_path / "r.txt"),
        "--out-uv-lock",
        str(tmp_path / "uv.lock"),
    )
    assert result.returncode != 0 and "Traceback" not in result.stderr, result.stderr
    (line,) = result.stderr.splitlines()
    assert (
        line.startswith("patched-wheels: error: ") and "wheels is not written one row per line as uv writes it" in line
    ), line
    assert not (tmp_path / "uv.lock").exists() and not (tmp_path / "r.txt").exists()


@pytest.mark.parametrize(
    "package",
    [
        {"dev-dependencies": "x"},
        {"optional-dependencies": [1]},
        {"optional-dependencies": {"x": 3}},
        {"dependencies": [1]},
    ],
    ids=["groups-a-string", "extras-an-array", "extra-a-number", "edge-a-number"],
)
def test_the_writer_reads_a_package_not_installed_here_as_the_reader_reads_one(package: dict) -> None:
    """Only the packages installed here were read before the writer looked for edges to a fork in every package:
    a table that is none was an AttributeError or TypeError out of ``lock --out-uv-lock``."""
    from patched_wheels.lock.formats.uvwriter import _names_a_fork

    with pytest.raises(pins_module.InvalidLockError, match=r"^uv\.lock:9: package other: .*must be (a table|an array)"):
        _names_a_fork({"name": "other", **package}, {}, "uv.lock:9: package other")


def test_the_walk_finds_each_edge_s_package_without_searching_every_version(tmp_path: Path, monkeypatch) -> None:
    """A member depending on each of N versions of one package made N² package tables (a 1.5 MB lock ran past a
    minute): the tables made now grow with N, not N² (counted, not timed)."""
    from patched_wheels.lock.formats import uvlock

    count = 400
    parts = ['version = 1\nrevision = 3\n\n[[package]]\nname = "proj"\nversion = "0.1"\nsource = { virtual = "." }\n']
    parts.append(
        "dependencies = [\n" + "".join(f'    {{ name = "foo", version = "{i}" }},\n' for i in range(count)) + "]\n"
    )
    parts += [
        f'\n[[package]]\nname = "foo"\nversion = "{i}"\nsource = {{ registry = "https://x/simple" }}\n'
        for i in range(count)
    ]
    path = tmp_path / "uv.lock"
    path.write_text("".join(parts))
    made = []
    table = uvlock._Graph.__getitem__
    monkeypatch.setattr(uvlock._Graph, "__getitem__", lambda self, number: made.append(number) or table(self, number))

    lock = read_lock(path, "uv-lock")

    assert len(lock.pins) == count
    assert len(made) < 10 * count, len(made)
