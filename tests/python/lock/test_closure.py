"""pip's closure: the extras activated, its document, what the hub restores, what an installed set lacks."""

from __future__ import annotations

import json

import pytest

from patched_wheels.errors import UsageError
from patched_wheels.lock.closure import FORMAT, MAX_STEPS, Closure, missing_from, restored_requirements
from support.closures import closure, dist


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


def test_an_undeclared_extra_gets_no_edges_and_asking_for_it_is_reported() -> None:
    a = dist("a", ['c; extra == "x"', 'd; extra == "y"'], ["y"])
    assert set(a.extras) == {"y"}  # type: ignore[attr-defined]
    whole = closure(a, dist("app", ["a[x,y]"]), dist("c", []), dist("d", []), roots={"a": ("w",)})
    assert whole.activated() == {"a": {"y"}}
    assert whole.unprovided() == [("a", "w", ""), ("a", "x", "app")]
    assert "x" not in whole.to_json()["dists"]["a"]["extras"]
    assert restored_requirements(whole) == {"a": ["d"]}
