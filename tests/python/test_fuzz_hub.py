"""Mutated hub JSON through ``hub plan`` (the request, phase one; the resolved wheels, phase two) and ``hub
build`` (its configuration): only the promises are asserted.

The Bazel rule writes these files from what the user declared (a WORKSPACE macro's values reach them
untyped), so each case replaces one value anywhere in a valid file with a value of another type or shape
(a string for a list, a list for an object, a huge or nested value, a control character), drops or adds a
key, or cuts the text. The promises: exit 1 with exactly one ``patched-wheels: error:`` line and nothing
on stdout, or exit 0 with the plan as JSON on stdout. Never a traceback.

Seeded like ``test_fuzz.py``: ``RPW_FUZZ_SEED`` (default fixed), ``RPW_FUZZ_CASES`` (default 300) and
``RPW_FUZZ_SECONDS`` (default 30) bound the run; a failure names the seed, the case and its mutation.
"""

from __future__ import annotations

import copy
import json
import os
import random
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from patched_wheels.hub.spec import PatchedWheelSpec
from support.fuzzing import run_cli
from support.hubconfig import index_attributes, spec_request_json

_SEED_SETTING = os.environ.get("RPW_FUZZ_SEED", "20261126")
SEED = time.time_ns() % 1_000_000_007 if _SEED_SETTING == "random" else int(_SEED_SETTING)
CASES = int(os.environ.get("RPW_FUZZ_CASES") or 300)
SECONDS = float(os.environ.get("RPW_FUZZ_SECONDS") or 30)

SHA = "ab" * 32
# Values of every JSON type and of the shapes that broke the plan: a string where a list goes (one URL per
# character), a list where an object goes, numbers as strings, control characters, unclosed globs, depth.
VALUES: list[Any] = [
    "1",
    1,
    -1,
    0,
    2**70,
    1.5,
    True,
    False,
    None,
    "",
    "x",
    "yes",
    "auto",
    "off",
    "set",
    "append",
    [],
    {},
    ["x"],
    [1],
    [None],
    {"a": 1},
    {"a": "b"},
    {"pkg/*.so": "$ORIGIN/a\u0000b"},
    {"[" * 40: "$ORIGIN"},
    "https://x/faketorch-2.1.0-py3-none-any.whl",
    "a\r\npatched-wheels: error: forged",
    "\u0000",
    "[" * 3000,
    "x" * 100_000,
    "caf\u00e9",
    "../../etc/passwd",
    SHA,
    "not a label!",
    "jax-plugins.x",
    "$ORIGIN",
    ["[" * 3000],
    [[[[[[[[[[["deep"]]]]]]]]]]],
    ["*.so"],
    ["nvidia-*"],
]


def _request(repository: Path) -> dict[str, Any]:
    spec = spec_request_json(PatchedWheelSpec(name="faketorch", suffix="test.1"))
    spec.update(preload="auto", preload_wheels=["nvidia-*"], rpath={"faketorch/*.so": "$ORIGIN/../x"}, delete=["*.txt"])
    return {
        "hub": "fuzz",
        "bzlmod": True,
        "attributes": index_attributes(requirements_lock="/ws/requirements_lock.txt"),
        "rules_python_version": "2.3.2",
        "labels": {"requirements_lock": "//:requirements_lock.txt"},  # mutated too: a label the user wrote
        "repository": str(repository),
        "patched": [spec, {**spec, "name": "other", "split_into": "other-libs", "split_max_size": 10}],
    }


def _resolved() -> list[dict[str, Any]]:
    return [
        {
            "project": project,
            "filename": f"{project.replace('-', '_')}-2.1.0-py3-none-any.whl",
            "urls": [f"https://x/{project}.whl"],
            "sha256": SHA,
        }
        for project in ("faketorch", "other", "nvidia-x")
    ]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in ``value`` a mutation can hit: each key of each object, each item of each list."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*prefix, index))
    return found


def _mutate(rng: random.Random, document: Any) -> tuple[str, str]:
    """One mutation of ``document`` as JSON text, and a description of it."""
    document = copy.deepcopy(document)
    kind = rng.choice(["replace", "replace", "replace", "drop", "add", "cut", "nest"])
    if kind == "cut":
        text = json.dumps(document)
        at = rng.randrange(len(text))
        return f"cut at {at}", text[:at]
    if kind == "nest":
        depth = rng.choice([100, 10_000, 100_000])
        text = json.dumps(document)
        at = rng.choice([index for index, char in enumerate(text) if char == ":"]) + 1
        return f"{depth} nested [ at {at}", text[:at] + "[" * depth + "]" * depth + "," + text[at:]
    path = rng.choice(_paths(document)[1:])
    *parents, last = path
    container = document
    for step in parents:
        container = container[step]
    if kind == "drop" and isinstance(container, dict):
        del container[last]
        return f"drop {path}", json.dumps(document)
    if kind == "add" and isinstance(container, dict):
        container[rng.choice(["extra", "wheel", "patch_indices", "locks"])] = rng.choice(VALUES)
        return f"add a key beside {path}", json.dumps(document)
    value = rng.choice(VALUES)
    container[last] = value
    return f"{path} = {json.dumps(value)[:60]}", json.dumps(document)


def _check(status: int, out: str, err: str) -> None:
    """The promise: one error line and no output, or success and the plan as JSON."""
    if status == 0:
        json.loads(out)
        assert "patched-wheels: error:" not in err, f"stderr {err!r}"
        return
    assert status == 1, f"exit {status}"
    assert out == "", f"stdout {out[:200]!r}"
    assert err.count("\n") == 1 and err.startswith("patched-wheels: error: "), f"stderr {err[:300]!r}"
    assert len(err) < 4000, f"an error line of {len(err)} characters"


@pytest.mark.parametrize("target", ["request", "resolved", "config"])
def test_mutated_hub_json_keeps_the_promises(target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RULES_PATCHED_WHEELS_CACHE", str(tmp_path / "cache"))
    request, resolved = _request(tmp_path / "repo"), _resolved()
    # The unmutated files pass: every case starts from a valid plan.
    (tmp_path / "request.json").write_text(json.dumps(request), encoding="utf-8")
    (tmp_path / "resolved.json").write_text(json.dumps(resolved), encoding="utf-8")
    phase_two = ["--resolved", str(tmp_path / "resolved.json"), "--config-out", str(tmp_path / "_hub.json")]
    status, out, err = run_cli(["hub", "plan", "--request", str(tmp_path / "request.json"), *phase_two])
    assert status == 0, err
    # The build's configuration as the plan wrote it; its wheels were never fetched, so a build fails, but only
    # after reading the whole configuration: the cases reach every check of it.
    config = json.loads((tmp_path / "_hub.json").read_text(encoding="utf-8"))
    documents = {"request": request, "resolved": resolved, "config": config}
    failures, ran, deadline = [], 0, time.monotonic() + SECONDS
    for case in range(CASES):
        if time.monotonic() > deadline:
            break
        rng = random.Random(f"{SEED}-{target}-{case}")
        description, text = _mutate(rng, documents[target])
        (tmp_path / f"{target}.json").write_text(text, encoding="utf-8")
        if target == "config":
            argv = ["hub", "build", "--config", str(tmp_path / "config.json")]
        else:
            argv = [
                "hub",
                "plan",
                "--request",
                str(tmp_path / "request.json"),
                *(phase_two if target == "resolved" or case % 2 else []),
            ]
        try:
            _check(*run_cli(argv))
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # a traceback of the CLI (or SystemExit) is exactly what is looked for
            failures.append(f"case {case}: {description}: {error!r}\n{traceback.format_exc(limit=-4)}")
        ran += 1
    assert ran >= min(CASES, 40), f"only {ran} cases ran in {SECONDS} s"
    assert not failures, f"RPW_FUZZ_SEED={SEED}: {len(failures)} of {ran} cases broke a promise:\n" + "\n".join(
        failures[:5]
    )
