"""pip's closure: the edges each extra adds, what the hub restores, what an installed set lacks."""

from __future__ import annotations

import json

import pytest

from patched_wheels.errors import UsageError
from patched_wheels.lock import rootextras
from patched_wheels.lock.closure import FORMAT, MAX_STEPS, Closure, missing_from, restored_requirements
from patched_wheels.lock.requiresdist import read_dist
from patched_wheels.lock.rootextras import inferred_root_extras

LINUX = {"sys_platform": "linux", "python_version": "3.11", "platform_machine": "x86_64"}


def dist(project: str, requires: list[str], provides: list[str] = ()) -> object:  # type: ignore[assignment]
    return read_dist(project, "1.0", requires, provides, origin=project, environment=LINUX)


def closure(*dists: object, roots: dict[str, tuple[str, ...]] | None = None) -> Closure:
    return Closure({d.project: d for d in dists}, roots or {})  # type: ignore[attr-defined]


def test_an_extra_keeps_the_rest_of_its_marker_and_drops_what_does_not_hold_here() -> None:
    toolkit = dist(
        "toolkit",
        [
            'tk-rt==1.0; extra == "rt"',
            'tk-linux; extra == "rt" and sys_platform == "linux"',
            'tk-win; sys_platform == "win32" and extra == "rt"',
            'tk-either; python_version >= "3.9" and (extra == "rt" or extra == "all")',
            'tk-base; sys_platform == "linux"',
            "tk-always",
        ],
        ["rt", "all"],
    )
    assert [e.project for e in toolkit.requires] == ["tk-base", "tk-always"]  # type: ignore[attr-defined]
    assert [e.restored for e in toolkit.extras["rt"]] == [  # type: ignore[attr-defined]
        "tk-rt==1.0",
        'tk-linux ; sys_platform == "linux"',
        'tk-either ; python_version >= "3.9"',
    ]
    assert [e.project for e in toolkit.extras["all"]] == ["tk-either"]  # type: ignore[attr-defined]


def test_extras_asked_by_any_edge_or_root_are_restored_to_a_fixed_point() -> None:
    jax = dist("jax", ['jax-plugin[with-cuda]==1.0; extra == "cuda"', "jaxlib"], ["cuda"])
    plugin = dist(
        "jax-plugin", ['nvidia-rt; extra == "with-cuda"', 'nvidia-other; extra == "other"'], ["with-cuda", "other"]
    )
    torch = dist("torch", ["cuda-toolkit[cudart]; sys_platform == 'linux'"])
    toolkit = dist(
        "cuda-toolkit", ['nvidia-cudart; extra == "cudart"', 'nvidia-nvjpeg; extra == "nvjpeg"'], ["cudart", "nvjpeg"]
    )
    leaves = [dist(name, []) for name in ("jaxlib", "nvidia-rt", "nvidia-other", "nvidia-cudart", "nvidia-nvjpeg")]
    whole = closure(jax, plugin, torch, toolkit, *leaves, roots={"jax": ("cuda",)})
    assert whole.activated() == {"jax": {"cuda"}, "jax-plugin": {"with-cuda"}, "cuda-toolkit": {"cudart"}}
    assert restored_requirements(whole) == {
        "cuda-toolkit": ["nvidia-cudart"],
        "jax": ["jax-plugin[with-cuda]==1.0"],
        "jax-plugin": ["nvidia-rt"],
    }
    assert restored_requirements(closure(jax, plugin, *leaves)) == {}, "no root asks for jax[cuda]: nothing to restore"


def test_a_self_reference_activates_the_extra_without_requiring_itself() -> None:
    tf = dist(
        "tensorflow",
        ['tensorflow[and-cuda-libs]; extra == "and-cuda"', 'nvidia-x; extra == "and-cuda-libs"'],
        ["and-cuda", "and-cuda-libs"],
    )
    whole = closure(tf, dist("nvidia-x", []), roots={"tensorflow": ("and-cuda",)})
    assert restored_requirements(whole) == {"tensorflow": ["nvidia-x"]}


def test_an_activated_extra_whose_requirement_the_lock_lacks_is_one_error() -> None:
    whole = closure(dist("toolkit", ['tk-rt; extra == "rt"'], ["rt"]), dist("app", ["toolkit[rt]"]))
    with pytest.raises(
        UsageError, match=r"^hub: toolkit\[rt\] requires 'tk-rt; extra == \"rt\"', which the lock does not pin"
    ):
        whole.check_pinned("hub")


def test_missing_names_each_wheel_and_the_chain_that_brings_it_and_survives_json() -> None:
    whole = closure(
        dist("app", ["toolkit[rt]==1.0"]), dist("toolkit", ['tk-rt==1.0; extra == "rt"'], ["rt"]), dist("tk-rt", [])
    )
    for model in (whole, Closure.from_json(json.loads(json.dumps(whole.to_json())), "pip_closure.json")):
        (missing,) = missing_from(model, ["app", "toolkit"])
        assert (
            missing.describe()
            == "tk-rt (toolkit requires 'tk-rt==1.0; extra == \"rt\"' <- app requires 'toolkit[rt]==1.0')"
        )
        assert missing_from(model, ["app", "toolkit", "tk_rt"]) == []
        assert missing_from(model, ["toolkit"]) == [], "toolkit alone asks for no extra"


@pytest.mark.parametrize(
    "raw",
    [
        [],
        {"format": "x"},
        {"format": "rules_patched_wheels.pip_closure/1", "root_extras": {}, "projects": {}},
        {"format": FORMAT, "root_extras": {}, "dists": {"a": {}}},
        {"format": FORMAT, "root_extras": [], "dists": {}},
        {"format": FORMAT, "root_extras": {}, "dists": {}, "projects": {}},
        {"format": FORMAT, "root_extras": {"a": [1]}, "dists": {}},
    ],
)
def test_a_document_that_is_not_a_closure_is_one_error(raw: object) -> None:
    with pytest.raises(UsageError, match=r"^f\.json: not a pip closure file"):
        Closure.from_json(raw, "f.json")


def _written(whole: Closure) -> object:
    """``whole`` as the hub writes ``pip_closure.json`` and a test reads it back (hub/build.py's spelling)."""
    return json.loads(json.dumps(whole.to_json(), indent=1, sort_keys=True) + "\n")


def test_a_closure_read_back_is_the_closure_written() -> None:
    """The document keeps what the hub was given: each edge's restored requirement (read back, /1 restored
    ``'tk-rt==1.0; extra == "rt"'``, its marker and all) and the extras a wheel provides with no edge here."""
    toolkit = dist(
        "toolkit", ['tk-rt==1.0; extra == "rt"', 'tk-win; extra == "win" and sys_platform == "win32"'], ["rt", "win"]
    )
    whole = closure(dist("app", ["toolkit[rt,win]==1.0"]), toolkit, dist("tk-rt", []), roots={"app": ()})
    restored = Closure.from_json(_written(whole), "pip_closure.json")
    assert restored == whole
    assert restored_requirements(restored) == {"toolkit": ["tk-rt==1.0"]}
    assert restored.unprovided() == whole.unprovided() == []


def test_a_closure_naming_a_wheel_under_another_name_is_one_error() -> None:
    raw = _written(closure(dist("a", [])))
    raw["dists"]["b"] = raw["dists"].pop("a")  # type: ignore[index]
    with pytest.raises(UsageError, match=r'^f\.json: not a pip closure file .*: dists\["b"\] holds project "a"$'):
        Closure.from_json(raw, "f.json")


def test_a_requirement_no_parser_reads_is_one_warning_and_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    """A third party's wheel the user cannot fix must not stop the hub: one warning naming the wheel and the line."""
    toolkit = read_dist(
        "toolkit",
        "1.0",
        ["tk-base", "tk ((>= 1", 'tk-rt; extra == "rt"'],
        ["rt"],
        origin="toolkit-1.0.whl: METADATA",
        environment=LINUX,
    )
    assert [e.project for e in toolkit.requires] == ["tk-base"] and [e.project for e in toolkit.extras["rt"]] == [
        "tk-rt"
    ]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("patched-wheels: warning: toolkit-1.0.whl: METADATA: Requires-Dist 'tk ((>= 1' ignored: "), (
        line
    )


def test_a_long_chain_keeps_its_outermost_and_innermost_steps_and_counts_the_rest() -> None:
    """A chain of 30 links: each missing project keeps at most MAX_STEPS steps (the outermost, then the innermost),
    saying how many it left out; a chain as short as MAX_STEPS is kept whole. Before, every missing project held
    (and printed) its whole chain: quadratic in the chain's length."""
    links = [dist("root", ["link-1"])] + [dist(f"link-{i}", [f"link-{i + 1}==1.0"]) for i in range(1, 30)]
    missing = {one.project: one for one in missing_from(closure(*links, dist("link-30", [])), ["root"])}
    assert sorted(missing) == sorted(f"link-{i}" for i in range(1, 31))
    assert missing["link-30"].chain == (
        ("root", "link-1"),
        *((f"link-{i}", f"link-{i + 1}==1.0") for i in range(23, 30)),
    )
    assert missing["link-30"].left_out == 30 - MAX_STEPS
    assert missing["link-30"].describe() == (
        "link-30 (link-29 requires 'link-30==1.0' <- link-28 requires 'link-29==1.0' <- link-27 requires 'link-28==1.0' <- "
        "link-26 requires 'link-27==1.0' <- link-25 requires 'link-26==1.0' <- link-24 requires 'link-25==1.0' <- "
        "link-23 requires 'link-24==1.0' <- ... 22 more <- root requires 'link-1')"
    )
    whole = missing[f"link-{MAX_STEPS}"]
    assert (len(whole.chain), whole.left_out) == (MAX_STEPS, 0) and whole.chain[0] == ("root", "link-1")
    assert all(len(one.chain) <= MAX_STEPS for one in missing.values())


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


def test_an_undeclared_extra_gets_no_edges_and_asking_for_it_is_reported() -> None:
    a = dist("a", ['c; extra == "x"', 'd; extra == "y"'], ["y"])
    assert set(a.extras) == {"y"}  # type: ignore[attr-defined]
    whole = closure(a, dist("app", ["a[x,y]"]), dist("c", []), dist("d", []), roots={"a": ("w",)})
    assert whole.activated() == {"a": {"y"}}
    assert whole.unprovided() == [("a", "w", ""), ("a", "x", "app")]
    assert "x" not in whole.to_json()["dists"]["a"]["extras"]
    assert restored_requirements(whole) == {"a": ["d"]}


@pytest.mark.parametrize(
    "marker",
    [
        'extra == "y" and implementation_name ~= "1"',
        'extra ~= "1.0"',
        'extra === "y"',
        '"1.0" ~= extra',
        'platform_machine ~= "1"',
        '"y" in extras',  # PEP 751's variables: packaging has no value for them in a wheel (a KeyError)
        'extra == "y" and dependency_groups == "g"',
    ],
)
def test_a_marker_that_cannot_be_evaluated_leaves_its_requirement_out_with_one_warning(
    marker: str, capsys: pytest.CaptureFixture[str]
) -> None:
    a = dist("a", [f"c; {marker}", 'd; extra == "y"', "e"], ["y"])
    assert [e.project for e in a.requires] == ["e"]  # type: ignore[attr-defined]
    assert {x: [e.project for e in v] for x, v in a.extras.items()} == {"y": ["d"]}  # type: ignore[attr-defined]
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(
        f"patched-wheels: warning: a: Requires-Dist {f'c; {marker}'!r} ignored: its marker cannot be evaluated ("
    )


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
