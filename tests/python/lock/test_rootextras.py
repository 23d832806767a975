"""The root extras a lock shows but does not record: inferred where only the extra explains a pin."""

from __future__ import annotations

import pytest

from patched_wheels.lock import rootextras
from patched_wheels.lock.rootextras import inferred_root_extras
from support.closures import closure, dist


def inferred(
    *dists: object, roots: dict[str, tuple[str, ...]] | None = None, decided: frozenset[str] = frozenset()
) -> list[tuple[str, str, tuple[str, ...]]]:
    found = inferred_root_extras(closure(*dists, roots=roots), decided)  # type: ignore[arg-type]
    return [(row.project, row.extra, row.evidence) for row in found]


def test_a_root_extra_is_inferred_where_the_lock_pins_all_it_requires_and_only_it_explains_a_pin() -> None:
    rt = dist("tk-rt", [])
    toolkit = dist(
        "toolkit",
        ['tk-rt>=1; extra == "rt"', 'tk-win; extra == "rt" and sys_platform == "win32"', 'tk-x; extra == "x"'],
        ["rt", "x"],
    )
    assert inferred(toolkit, rt) == [("toolkit", "rt", ("tk-rt",))], "tk-win does not apply; x's pin is not locked"
    assert inferred(toolkit, rt, dist("app", ["toolkit[rt]"])) == [], "already asked by an edge"
    assert inferred(toolkit, rt, roots={"toolkit": ("rt",)}) == [], "already asked by the lock's root"
    assert inferred(toolkit, rt, decided=frozenset({"toolkit"})) == [], "the extras attribute decided toolkit's extras"
    assert inferred(toolkit, rt, dist("other", ["tk-rt"])) == [], "tk-rt is explained by another requirement"
    partly = dist("toolkit", ['tk-rt; extra == "rt"', 'tk-missing; extra == "rt"'], ["rt"])
    assert inferred(partly, rt) == [], "the lock does not pin tk-missing: the extra was not asked"
    assert inferred(dist("toolkit", ['tk-rt<1; extra == "rt"'], ["rt"]), rt) == [], "the pin is outside the specifier"
    assert inferred(dist("toolkit", ['tk-rt; extra == "rt"']), rt) == [], "an extra Provides-Extra does not declare"
    nested = dist("toolkit", ['tk-rt[gpu]; extra == "rt"'], ["rt"])
    rt_gpu = dist("tk-rt", ['tk-gpu; extra == "gpu"'], ["gpu"])
    assert inferred(nested, rt_gpu) == [], "tk-rt[gpu] requires tk-gpu, which the lock does not pin"
    assert inferred(nested, rt_gpu, dist("tk-gpu", [])) == [
        ("tk-rt", "gpu", ("tk-gpu",)),  # one pass: each explains an unexplained pin on its own
        ("toolkit", "rt", ("tk-rt",)),
    ]


def test_an_extra_that_would_close_a_cycle_is_not_inferred() -> None:
    """A plugin's ``standalone`` extra requiring its host, the host a root requiring the plugin (sphinx and
    sphinxcontrib-applehelp): the host is the root, and rules_python refuses the cycle restoring would make."""
    host = dist("sphinx", ["applehelp"])
    plugin = dist("applehelp", ['sphinx>=1; extra == "standalone"'], ["standalone"])
    assert inferred(host, plugin) == []
    through = [dist("sphinx", ["docutils"]), dist("docutils", ["roman", "applehelp"]), dist("roman", ["docutils"])]
    assert inferred(*through, plugin) == [], "sphinx requires applehelp through a cycle of its own"
    assert inferred(dist("sphinx", []), plugin) == [("applehelp", "standalone", ("sphinx",))]
    # The cycle made by the extras' own edges (issue 52, a new variant: both were inferred, a requiring b and
    # b requiring a once restored): a[x] asks b[y], whose requirement names a.
    a, c = dist("a", ['b[y]; extra == "x"'], ["x"]), dist("c", [])
    assert inferred(a, dist("b", ['a[x]; extra == "y"', 'c; extra == "y"'], ["y"]), c) == [], "through b[y]"
    assert inferred(a, dist("b", ['a; extra == "y"'], ["y"])) == [("b", "y", ("a",))], "b[y] alone closes none"


def test_inference_is_one_pass_over_the_known_closure() -> None:
    """Both extras explain the same unexplained pin: both are inferred, whichever is looked at first."""
    b = dist("b", [])
    a = dist("a", ['b; extra == "x"'], ["x"])
    c = dist("c", ['b; extra == "z"'], ["z"])
    assert inferred(a, b, c) == inferred(c, b, a) == [("a", "x", ("b",)), ("c", "z", ("b",))]


def test_inference_reads_each_requirement_of_a_chain_of_extras_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """a0[x] asks a1[x], which asks a2[x], ... each pinning one more wheel only it explains (issue 52, a new
    variant of the inference's hostile locks): each extra walked its whole chain apart, so the pins were checked
    quadratically often (1,000 links took 89 s, 10,000 hours); now once per requirement, whatever the length."""
    links = 300
    dists = [
        dist(f"a{i}", [*([f'a{i + 1}[x]; extra == "x"'] if i + 1 < links else []), f'q{i}; extra == "x"'], ["x"])
        for i in range(links)
    ]
    dists += [dist(f"q{i}", []) for i in range(links)]
    checked: list[str] = []
    real = rootextras._pin_satisfies
    monkeypatch.setattr(rootextras, "_pin_satisfies", lambda d, e: checked.append(e.requirement) or real(d, e))
    found = inferred(*dists)
    assert len(found) == links and found[0] == ("a0", "x", ("a1", "q0"))
    assert len(checked) == 2 * links - 1, f"{len(checked)} checks of {2 * links - 1} requirements"
