"""The documentation's links resolve, and the README keeps what CI and issue 33 rely on.

Files move (the helper's modules are being regrouped into subpackages); a link to a page or a heading
that is gone is caught here rather than by a reader.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def documentation() -> list[Path]:
    pages = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "benchmarks").rglob("README.md"))]
    return pages + sorted((ROOT / "docs").glob("*.md")) + sorted((ROOT / "benchmarks" / "results").glob("*.md"))


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation other than `-` and `_` dropped, blanks as `-`."""
    found = set()
    fenced = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            fenced = not fenced
        match = None if fenced else re.match(r"#{1,6} (.*)", line)
        if match:
            found.add(re.sub(r"[^\w\- ]", "", match.group(1).strip().lower()).replace(" ", "-"))
    return found


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(encoding="utf-8"), flags=re.S)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans are not links
    return re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("page", documentation(), ids=lambda page: str(page.relative_to(ROOT)))
def test_links_resolve(page: Path) -> None:
    broken = []
    for link in links(page):
        if re.match(r"[a-z]+:", link):
            continue  # an external URL
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target):
            broken.append(f"{link}: no heading with that anchor")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


def test_anchor_rule(tmp_path: Path) -> None:
    """The anchor rule itself, on headings of the kinds the pages use (code fences are not headings)."""
    page = tmp_path / "page.md"
    page.write_text('# A\n## 7. The preload (`preload = "auto"`)\n```\n# not a heading\n```\n### compat_stacks.py\n')
    assert anchors(page) == {"a", "7-the-preload-preload--auto", "compat_stackspy"}


def test_readme_is_a_page_with_the_ci_command() -> None:
    """Issue 33: the README is a page (at most 200 lines; the rest lives in docs/), and it shows the
    command CI runs (.ci/run calls tools/test and says it runs the README's test command)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 200
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert re.search(r"^tools/test\b", ci, flags=re.M)
    blocks = "\n".join(re.findall(r"```sh\n(.*?)```", readme, flags=re.S))
    assert re.search(r"^tools/test\s", blocks, flags=re.M)
    assert re.search(r"^tools/bazel test //calculator/\.\.\.\s", blocks, flags=re.M)


DATED_MEASUREMENT = re.compile(
    r"(?<![\w/.-])20\d\d-\d\d-\d\d(?![\w.-])"  # a date, not a results file's name in a link
    r"|\b\d+(?:\.\d+)?x (?:plain|rules_python|the probe|`cp`)|\*\*\d+(?:\.\d+)?x\*\*"  # a ratio to a baseline
    r"|\b\d+(?:\.\d+)? ?s (?:of CPU|wall)\b|\b\d+(?:\.\d+)? s -> \d"  # a time, or a time before -> after
    r"|(?i:\bmeasured on (?:this|a|the) [\w-]*(?:machine|core|VM))"
)
"""What a dated measurement in a user page looks like: figures go to benchmarks/results/, dated, beside the
machine and the commits they were measured on, and the docs link there with a sentence that stays true."""


def dated_measurements(text: str) -> list[str]:
    return [match.group(0) for match in DATED_MEASUREMENT.finditer(text)]


@pytest.mark.parametrize("page", sorted((ROOT / "docs").glob("*.md")), ids=lambda page: page.name)
def test_docs_hold_no_dated_measurement(page: Path) -> None:
    assert dated_measurements(page.read_text(encoding="utf-8")) == []


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("measured on the torch 2.1.0 example (2-core machine,\n2026-11-26; [b](../b.md)):", ["2026-11-26"]),
        ("costs **1.01x** plain rules_python's CPU (each hub's helper: 3 s of CPU)", ["**1.01x**", "3 s of CPU"]),
        (
            "building the tree: 7.4 s -> 1.0 s; the test takes about 1.5x the probe's own wall time",
            ["7.4 s -> 1", "1.5x the probe"],
        ),
        ("Measured on this machine (2 cores, python-isal): ...", ["Measured on this machine"]),
        ("[results](../benchmarks/results/2026-11-28-compat-newest.md), rules_python 2.3.2, torch 2.1.0", []),
        ("a ctime under 2 s old; 64 MiB; `--timeout 30s`; 10 %; a 2x2 matrix", []),
    ],
)
def test_the_dated_measurement_rule(text: str, found: list[str]) -> None:
    assert dated_measurements(text) == found
