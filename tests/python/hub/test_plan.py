"""The hub's plan: the Starlark schema against the Python spec, every cross-field check by the attributes'
names, and where each wheel goes. Pure: no wheel, no download, no Bazel."""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest

from patched_wheels.cli import main
from patched_wheels.errors import UsageError
from patched_wheels.hub.documents import HubConfig, HubPlan, HubRequest
from patched_wheels.hub.plan import check_request, checked_request, plan_hub, resolution
from patched_wheels.hub.spec import NOT_ATTRIBUTES, PatchedWheelSpec
from patched_wheels.lock.plan import INDEX_OPTIONS
from patched_wheels.lock.resolve import ResolvedWheel
from support.hubconfig import INDEX_ATTRIBUTES, index_attributes, spec_request_json
from support.starlark import PRIVATE, starlark_constants


def starlark_schema() -> dict[str, dict[str, Any]]:
    """PATCHED_WHEEL_SCHEMA of specs.bzl: attribute -> {kind, default, mandatory, values}."""
    constants = starlark_constants(PRIVATE / "specs.bzl")
    schema = constants["PATCHED_WHEEL_SCHEMA"]
    assert isinstance(schema, ast.Dict)
    result = {}
    for key, call in zip(schema.keys, schema.values):
        assert isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "_field", ast.dump(
            call
        )
        keywords = {}
        for keyword in call.keywords:
            value = keyword.value
            if isinstance(value, ast.Name):  # a constant of the file, e.g. PRELOAD_VALUES
                value = constants[value.id]
            keywords[keyword.arg] = ast.literal_eval(value)
        kind = ast.literal_eval(call.args[0])
        implicit = {"string": "", "int": 0, "string_list": [], "label_list": [], "string_dict": {}}[kind]
        result[ast.literal_eval(key)] = {
            "kind": kind,
            "default": keywords.get("default", implicit),
            "mandatory": keywords.get("mandatory", False),
            "values": keywords.get("values"),
        }
    return result


# Each Starlark attribute kind and the Python annotation of the spec field that carries it.
KIND_ANNOTATIONS = {
    "string": "str",
    "int": "int",
    "string_list": "Sequence[str]",
    "label_list": "Sequence[Path]",
    "string_dict": "Mapping[str, str]",
}


def test_starlark_schema_and_python_spec_agree_in_both_directions() -> None:
    schema = starlark_schema()
    spec_fields = {f.name: f for f in fields(PatchedWheelSpec) if f.name not in NOT_ATTRIBUTES}
    assert sorted(schema) == sorted(spec_fields), "an attribute one side lacks"
    for name, attribute in schema.items():
        field = spec_fields[name]
        assert field.type == KIND_ANNOTATIONS[attribute["kind"]], name
        if attribute["mandatory"]:
            assert (field.default, field.default_factory) == (MISSING, MISSING), f"{name}: mandatory in Starlark only"
            continue
        python_default = field.default_factory() if callable(field.default_factory) else field.default
        normalised = list(python_default) if isinstance(python_default, tuple) else python_default
        assert normalised == attribute["default"], name


def test_the_attribute_values_the_schema_allows_are_the_ones_the_helper_knows() -> None:
    from patched_wheels.patch.request import MODES

    schema = starlark_schema()
    assert sorted(schema["rpath_mode"]["values"]) == sorted(MODES)
    # A new value must be reviewed where the plan and the build decide: PatchedWheelSpec.preloads and runs_probe.
    assert schema["preload"]["values"] == ["auto", "elf", "off"]
    index_options = ast.literal_eval(starlark_constants(PRIVATE / "rules_python_version.bzl")["INDEX_OPTIONS"])
    assert tuple(index_options) == INDEX_OPTIONS
    # The lock attributes: tests/python/lock/formats/test_registry.py (the registry names them).


def spec_json(**values: object) -> dict[str, object]:
    """A spec as the rule writes it: every attribute, the defaults of the Python side."""
    return {**spec_request_json(PatchedWheelSpec(name="faketorch", suffix="test.1")), **values}


def request(*specs: dict[str, object], **values: object) -> HubRequest:
    """A request as the rule writes it; ``values`` replace its keys or its attributes (a lock attribute's path)."""
    given = {name: values.pop(name) for name in list(values) if name in INDEX_ATTRIBUTES}
    raw: dict[str, object] = {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(**{"requirements_lock": "/ws/requirements_lock.txt", **given}),
        "rules_python_version": "2.3.2",
        "labels": {},
        "repository": "/out/external/fixed",
        "patched": list(specs) or [spec_json()],
    }
    raw.update(values)
    return HubRequest.from_json(raw)


CALL = 'patched.patched_wheel(name = "faketorch", hub = "fixed")'


def planned(request: HubRequest, wheels: list[ResolvedWheel], *, cache_root: Path | None) -> HubPlan:
    """The plan of ``request`` over ``wheels``, as ``hub plan`` makes it."""
    return plan_hub(checked_request(request, wheels), cache_root=cache_root)


@pytest.mark.parametrize(
    ("attributes", "message"),
    [
        ({"urls": ["https://x/faketorch-2.1.0-py3-none-any.whl"]}, "urls and sha256 go together"),
        ({"sha256": "ab" * 32}, "urls and sha256 go together"),
        ({"urls": ["https://x/a.whl"], "sha256": "XYZ"}, 'sha256 = "XYZ" is not 64 lower-case hex digits'),
        ({"preload_wheels": ["nvidia-*"]}, 'preload_wheels needs preload = "auto"'),
        ({"preload_package": "torch"}, 'preload_package needs preload = "auto"'),
        ({"probe": "import jax; jax.devices()"}, 'probe needs preload = "auto"'),
        (
            {"preload": "elf", "probe": "import jax; jax.devices()"},
            'probe needs preload = "auto" (preload = "elf" runs no package code)',
        ),
        (
            {"preload": "auto", "probe": "import jax; jax.devices("},
            'probe = "import jax; jax.devices(": not Python this interpreter runs (SyntaxError: ',
        ),
        (
            {"preload": "auto", "probe": "import jax\n  jax.devices()"},
            'probe = "import jax\\n  jax.devices()": not Python this interpreter runs (IndentationError: ',
        ),
        (
            {"preload": "elf", "preload_package": "not a module"},
            'preload_package = "not a module" is not a module name',
        ),
        ({"split_into": "libs"}, "split_into needs exactly one of split_max_size and split_move"),
        (
            {"split_into": "libs", "split_max_size": 10, "split_move": ["*.so"]},
            "split_into needs exactly one of split_max_size and split_move, not both",
        ),
        ({"split_into": "libs", "split_max_size": -1}, "split_max_size = -1 is negative"),
        ({"split_max_size": 10}, "split_max_size needs split_into"),
        ({"split_move": ["*.so"]}, "split_move needs split_into"),
        ({"rpath_mode": "prepend"}, 'rpath_mode = "prepend" needs rpath'),
        ({"strip": -1}, "strip = -1 is negative"),
        ({"suffix": "not a label!"}, "suffix 'not a label!' is not a valid PEP 440 local version label"),
        ({"requirement": "faketorch=="}, 'requirement = "faketorch==": '),
        (
            {"requirement": "faketorch ; " + "(" * 2000 + 'python_version > "3"' + ")" * 2000},
            'requirement = "faketorch ; (((',
        ),
        ({"requirement": "torch==2.1.0"}, 'requirement = "torch==2.1.0" names another project than name = "faketorch"'),
    ],
)
def test_contradictory_attributes_are_named(attributes: dict[str, object], message: str) -> None:
    with pytest.raises(UsageError) as caught:
        check_request(request(spec_json(**attributes)))
    assert str(caught.value).startswith(f"{CALL}: {message}"), caught.value


def test_consistent_attributes_pass() -> None:
    check_request(
        request(
            spec_json(
                preload="auto", preload_wheels=["nvidia-*"], probe="import x", split_into="libs", split_move=["*.so"]
            )
        )
    )
    check_request(
        request(spec_json(split_into="libs", split_max_size=10, rpath={"a/*.so": "$ORIGIN"}, rpath_mode="append"))
    )
    check_request(request(spec_json(preload="elf", preload_package="faketorch", preload_wheels=["nvidia-*"])))


def test_workspace_errors_name_the_macros() -> None:
    with pytest.raises(
        UsageError, match=r'^patched_wheel\(name = "faketorch"\) of patched_index\(name = "fixed"\): urls'
    ):
        check_request(request(spec_json(sha256="ab" * 32), bzlmod=False))


@pytest.mark.parametrize(
    ("locks", "message"),
    [
        ({"requirements_lock": None}, "give exactly one of requirements_lock, uv_lock, pylock$"),
        (
            {"uv_lock": "/ws/uv.lock"},
            "give exactly one of requirements_lock, uv_lock, pylock, not requirements_lock and uv_lock$",
        ),
    ],
)
def test_exactly_one_lock_attribute(locks: dict[str, str | None], message: str) -> None:
    with pytest.raises(UsageError, match=r'^patched\.index\(name = "fixed"\): ' + message):
        check_request(request(**locks))


def test_index_option_must_be_readable_by_the_rules_python_in_use() -> None:
    with pytest.raises(UsageError, match='index_option = "extra-index-url" cannot be read by rules_python 2.3.2'):
        check_request(request(index_option="extra-index-url"))
    with pytest.raises(UsageError, match=r"cannot be read by rules_python \(unreleased\)"):
        check_request(request(index_option="index-url", rules_python_version=""))
    for version in ("0", "0.22.1", "1.6.0"):
        check_request(request(index_option="find-links", rules_python_version=version))


@pytest.mark.parametrize("url", ["https://x y/simple", "https://x/simple\n--trusted-host=evil", "https://x/simple\\"])
def test_an_index_url_that_cannot_be_written_into_a_lock_is_named_as_the_attribute(url: str) -> None:
    """The build writes ``index_url`` into the lock as ``--index-url=``: a blank or line break in it is refused
    before any download, naming the attribute (not the ``lock`` command's ``--upstream-index-url``)."""
    with pytest.raises(
        UsageError, match=r"^patched\.index\(name = \"fixed\"\): index_url 'https://x.*cannot be written into a lock$"
    ):
        check_request(request(index_url=url))


def test_a_project_given_twice_is_refused_whatever_its_spelling() -> None:
    with pytest.raises(UsageError, match=r'name = "Fake_Torch", hub = "fixed"\): given twice for one hub'):
        check_request(request(spec_json(name="fake-torch"), spec_json(name="Fake_Torch")))


def test_resolution_names_the_lock_flag_and_the_explicit_wheels() -> None:
    explicit = spec_json(name="Fake.Torch", urls=["https://x/fake_torch-1-py3-none-any.whl"], sha256="ab" * 32)
    assert resolution(request(explicit, spec_json(name="other"), requirements_lock=None, uv_lock="/ws/uv.lock")) == {
        "lock_args": ["--uv-lock", "/ws/uv.lock"],
        "explicit": {"fake-torch": {"urls": ["https://x/fake_torch-1-py3-none-any.whl"], "sha256": "ab" * 32}},
    }


def wheel(project: str, version: str = "1.0") -> ResolvedWheel:
    filename = f"{project.replace('-', '_')}-{version}-py3-none-linux_x86_64.whl"
    return ResolvedWheel(project, filename, (f"https://files.example/{filename}",), f"{len(project):064x}")  # type: ignore[arg-type]


WHEELS = [wheel("faketorch", "2.1.0"), wheel("fake-nvidia-jit"), wheel("fake-nvidia-sparse")]


def test_direct_references_name_the_unpatched_wheels_upstream() -> None:
    plan = planned(request(), WHEELS, cache_root=None)
    assert plan.exports == ("requirements_lock.txt", "pip_closure.json") and "needs_patchelf" not in plan.to_json()
    config = plan.config
    assert [w.filename for w in config.wheels] == [w.filename for w in WHEELS]
    assert config.patched[0].wheel == Path("/out/external/fixed/originals") / WHEELS[0].filename
    assert config.replaced == {"faketorch": [WHEELS[0].sha256]}
    assert config.references == {w.project: (w.urls[0], w.sha256) for w in WHEELS[1:]}
    assert config.out == Path("/out/external/fixed/requirements_lock.txt") and config.out_uv_lock is None


def test_an_output_base_with_a_blank_is_refused_before_any_download_naming_it() -> None:
    """The lock names each patched wheel by a file:// URL under the hub repository, which Bazel opens as written."""
    with pytest.raises(
        UsageError,
        match=r"^patched\.index\(name = \"fixed\"\): the hub repository's directory '/home/J Doe/out/fixed': holds ' '",
    ):
        planned(request(repository="/home/J Doe/out/fixed"), WHEELS, cache_root=None)


def test_every_wheel_is_fetched_for_the_build_to_read() -> None:
    """Pip's closure needs each wheel's METADATA, and whatever a cache or facts file says of a wheel is checked
    against the wheel: every wheel is fetched, the unpatched ones into _wheels/, deleted after the build."""
    cache = Path("/home/u/.cache/rules_patched_wheels")
    for specs in ([spec_json(preload="auto")], [spec_json()]):
        plan = planned(request(*specs), WHEELS, cache_root=cache)
        assert [f.output for f in plan.fetch] == [f"originals/{WHEELS[0].filename}"] + [
            f"_wheels/{w.filename}" for w in WHEELS[1:]
        ]
        assert all(w.path is not None for w in plan.config.wheels)
        assert plan.scratch == ("originals", "_wheels") and "pip_closure.json" in plan.exports
    assert planned(request(spec_json(preload="auto")), WHEELS, cache_root=cache).config.cache_root == cache


def test_an_index_option_serves_every_wheel_from_the_hub() -> None:
    plan = planned(request(index_option="index-url", rules_python_version="1.6.0"), WHEELS, cache_root=None)
    assert [f.output for f in plan.fetch] == [f"originals/{WHEELS[0].filename}"] + [
        f"index/{w.filename}" for w in WHEELS[1:]
    ]


@pytest.mark.parametrize("release", ["0", "1.6.0"])
def test_direct_references_for_a_pip_release_serve_every_wheel_from_the_hub(release: str) -> None:
    """rules_python before 2 installs with pip, which would fetch each unpatched wheel by URL again after every
    `clean --expunge`: the hub keeps the copies it fetched by sha256 (through the repository cache) in its index
    and the lock sends pip there alone. 2.x fetches the unpatched wheels itself, by sha256."""
    plan = planned(request(rules_python_version=release), WHEELS, cache_root=None)
    assert [f.output for f in plan.fetch] == [f"originals/{WHEELS[0].filename}"] + [
        f"index/{w.filename}" for w in WHEELS[1:]
    ]
    assert plan.config.every_pin_served and plan.config.attributes.index_option == "direct"
    for modern in ("2.3.2", ""):
        assert not planned(request(rules_python_version=modern), WHEELS, cache_root=None).config.every_pin_served
    pip_index = planned(request(index_option="index-url", rules_python_version=release), WHEELS, cache_root=None)
    assert not pip_index.config.every_pin_served  # that option sends pip to the hub's index already


def test_a_uv_lock_input_exports_a_uv_lock() -> None:
    split = spec_json(preload="auto", split_into="faketorch-libs", split_move=["*.so"])
    plan = planned(request(split, requirements_lock=None, uv_lock="/ws/uv.lock"), WHEELS, cache_root=None)
    assert plan.exports == ("requirements_lock.txt", "pip_closure.json", "uv.lock")
    assert (
        plan.config.out_uv_lock == Path("/out/external/fixed/uv.lock") and plan.config.attributes.lock[0] == "uv_lock"
    )


def test_a_release_the_requirement_refuses_fails_before_any_download() -> None:
    with pytest.raises(
        UsageError,
        match=r'the lock pins faketorch-2\.1\.0-.*\.whl, version 2\.1\.0, which does not satisfy requirement = "faketorch==2\.2\.0"',
    ):
        planned(request(spec_json(requirement="faketorch==2.2.0")), WHEELS, cache_root=None)
    assert planned(request(spec_json(requirement="faketorch>=2")), WHEELS, cache_root=None).fetch


def test_a_patched_project_the_lock_does_not_pin_is_named_with_the_lock_attribute() -> None:
    with pytest.raises(UsageError, match=r'faketorch is not pinned in pylock = "/ws/pylock.toml"'):
        planned(request(requirements_lock=None, pylock="/ws/pylock.toml"), WHEELS[1:], cache_root=None)


LABELS = {"requirements_lock": "//third_party:requirements_lock.txt", "pylock": "//:pylock.toml"}
"""How the rule writes the user's labels into a request (hub.bzl's ``request_labels``)."""


@pytest.mark.parametrize(
    ("values", "wheels", "message"),
    [
        (
            {"pylock": "/ws/pylock.toml", "requirements_lock": None},
            WHEELS[1:],
            'not pinned in pylock = "//:pylock.toml"',
        ),
        (
            {"extras": ["jax[cuda13]"]},
            WHEELS,
            'jax is not pinned in requirements_lock = "//third_party:requirements_lock.txt"',
        ),
    ],
)
def test_the_plan_names_a_label_attribute_as_the_user_wrote_it(
    values: dict[str, object], wheels: list[ResolvedWheel], message: str
) -> None:
    """Not the path Bazel resolved the label to: the request holds both."""
    with pytest.raises(UsageError, match=re.escape(message)):
        planned(request(labels=LABELS, **values), wheels, cache_root=None)


def test_the_build_gets_the_labels_to_name_the_attributes_by() -> None:
    config = planned(request(labels={"requirements_lock": LABELS["requirements_lock"]}), WHEELS, cache_root=None).config
    assert config.attributes.lock_as_written(config.labels) == (
        'requirements_lock = "//third_party:requirements_lock.txt"'
    )
    assert HubConfig.from_json(json.loads(json.dumps(config.to_json()))).labels == config.labels
    # A configuration written without them (by hand) names the lock by its path.
    assert config.attributes.lock_as_written({}) == 'requirements_lock = "/ws/requirements_lock.txt"'


def test_labels_for_no_label_attribute_are_refused_in_the_request_and_the_configuration() -> None:
    """The rule writes a label for a label attribute only: any other key is a file written apart from it."""
    with pytest.raises(ValueError, match=re.escape("hub request: labels: unknown keys ['index_url']")):
        request(labels={**LABELS, "index_url": "//:x"})
    raw = planned(request(labels=LABELS), WHEELS, cache_root=None).config.to_json()
    raw["labels"]["lock"] = "//:requirements_lock.txt"
    with pytest.raises(ValueError, match=re.escape("hub configuration: labels: unknown keys ['lock']")):
        HubConfig.from_json(raw)


def test_the_config_round_trips_and_refuses_a_missing_or_unknown_key() -> None:
    config = planned(request(spec_json(preload="auto")), WHEELS, cache_root=Path("/c")).config
    assert HubConfig.from_json(json.loads(json.dumps(config.to_json()))).to_json() == config.to_json()
    raw = config.to_json()
    del raw["references"]
    with pytest.raises(ValueError, match=r"hub configuration: missing keys \['references'\]"):
        HubConfig.from_json(raw)
    raw = config.to_json()
    raw["patched"][0]["preload_wheel"] = []
    with pytest.raises(ValueError, match=r"patched_wheel 'faketorch': unknown keys \['preload_wheel'\]"):
        HubConfig.from_json(raw)


def test_plan_command_checks_first_and_writes_the_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(requirements_lock="/ws/req.txt"),
        "rules_python_version": "0",
        "labels": {},
        "repository": str(tmp_path / "repo"),
        "patched": [spec_json(split_into="x")],
    }
    (tmp_path / "request.json").write_text(json.dumps(raw), encoding="utf-8")
    assert main(["hub", "plan", "--request", str(tmp_path / "request.json")]) == 1
    error = capsys.readouterr().err
    assert error == f"patched-wheels: error: {CALL}: split_into needs exactly one of split_max_size and split_move\n"

    raw["patched"] = [spec_json()]
    (tmp_path / "request.json").write_text(json.dumps(raw), encoding="utf-8")
    resolved = [w.as_json() for w in WHEELS]
    (tmp_path / "resolved.json").write_text(json.dumps(resolved), encoding="utf-8")
    args = ["hub", "plan", "--request", str(tmp_path / "request.json"), "--resolved", str(tmp_path / "resolved.json")]
    assert main([*args, "--config-out", str(tmp_path / "_hub.json")]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["fetch"][0] == {
        "urls": list(WHEELS[0].urls),
        "sha256": WHEELS[0].sha256,
        "output": f"originals/{WHEELS[0].filename}",
    }
    assert [fetch["output"] for fetch in printed["fetch"][1:]] == [f"index/{w.filename}" for w in WHEELS[1:]]
    config = HubConfig.from_json(json.loads((tmp_path / "_hub.json").read_text(encoding="utf-8")))
    assert config.patched[0].wheel == tmp_path / "repo" / "originals" / WHEELS[0].filename
    assert config.every_pin_served


_IMPORTED = """
import json, sys
from patched_wheels.cli import main
status = main(sys.argv[1:])
print(json.dumps(sorted(name for name in sys.modules if name.startswith(("elftools", "patched_wheels.loading.observe")))))
sys.exit(status)
"""


def test_the_plan_imports_no_elf_reader(tmp_path: Path) -> None:
    """Both phases run in every cold fetch of a hub (phase one in the extension), and pyelftools was a sixth
    of their start-up: neither reads a cache nor an ELF file (the build reads them, with the wheels at hand)."""
    raw = {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(requirements_lock="/ws/req.txt"),
        "rules_python_version": "0",
        "labels": {},
        "repository": str(tmp_path / "repo"),
        "patched": [spec_json(preload="auto")],
    }
    (tmp_path / "request.json").write_text(json.dumps(raw), encoding="utf-8")
    (tmp_path / "resolved.json").write_text(json.dumps([w.as_json() for w in WHEELS]), encoding="utf-8")
    phase_one = ["hub", "plan", "--request", str(tmp_path / "request.json")]
    phase_two = [*phase_one, "--resolved", str(tmp_path / "resolved.json"), "--config-out", str(tmp_path / "_hub.json")]
    environment = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(sys.path),
        "RULES_PATCHED_WHEELS_CACHE": str(tmp_path / "cache"),
    }
    for args, expected in ((phase_one, []), (phase_two, [])):
        result = subprocess.run(
            [sys.executable, "-S", "-c", _IMPORTED, *args], capture_output=True, text=True, env=environment, check=False
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.splitlines()[-1]) == expected, args


def test_a_request_missing_a_key_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "request.json").write_text(json.dumps({"hub": "fixed"}), encoding="utf-8")
    assert main(["hub", "plan", "--request", str(tmp_path / "request.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "cannot read the hub request: hub request: missing keys" in error, error


def test_whether_the_build_reads_the_graph_is_the_plans_decision_in_the_config() -> None:
    """Decided once, from the request: the build reads the configuration's answer and decides nothing again."""
    for spec, reads in ((spec_json(preload="elf"), True), (spec_json(split_into="libs", split_max_size=1), True)):
        assert planned(request(spec), WHEELS, cache_root=None).config.needs_graph is reads
    assert planned(request(spec_json()), WHEELS, cache_root=None).config.needs_graph is False


def test_the_probe_travels_from_the_request_to_the_build_config() -> None:
    probe = "import faketorch; faketorch.answer()"
    config = planned(request(spec_json(preload="auto", probe=probe)), WHEELS, cache_root=None).config
    assert HubConfig.from_json(json.loads(json.dumps(config.to_json()))).patched[0].probe == probe


def test_a_resolved_wheel_missing_a_key_is_one_error_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = spec_json()
    request_json = {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(requirements_lock="/ws/req.txt", index_url=""),
        "rules_python_version": "0",
        "labels": {},
        "repository": str(tmp_path),
        "patched": [raw],
    }
    (tmp_path / "request.json").write_text(json.dumps(request_json), encoding="utf-8")
    resolved = [{key: value for key, value in WHEELS[0].as_json().items() if key != "sha256"}]
    (tmp_path / "resolved.json").write_text(json.dumps(resolved), encoding="utf-8")
    args = ["hub", "plan", "--request", str(tmp_path / "request.json"), "--resolved", str(tmp_path / "resolved.json")]
    assert main([*args, "--config-out", str(tmp_path / "_hub.json")]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and "resolved wheel: missing keys ['sha256']" in error, error
    assert not (tmp_path / "_hub.json").exists()


@pytest.mark.parametrize(
    "filename",
    [
        "..%2F..%2Fescape.whl",
        "../../escape-1.0-py3-none-any.whl",
        "faketorch-2.1.0.tar.gz",
        "faketorch-2.1.0-py3-none-any/x.whl",  # the parse reads no platform tag: the "/" is refused apart
        "fakétorch-2.1.0-py3-none-any.whl",  # packaging's parse_wheel_filename takes it, pip and WheelFilename do not
    ],
)
def test_a_resolved_name_that_is_not_a_wheel_file_name_is_refused(filename: str) -> None:
    bad = ResolvedWheel("faketorch", filename, ("https://x/y",), WHEELS[0].sha256)  # type: ignore[arg-type]
    with pytest.raises(
        UsageError,
        match=r'requirements_lock = "/ws/requirements_lock.txt": faketorch resolves to .*not a wheel file name',
    ):
        planned(request(), [bad, *WHEELS[1:]], cache_root=None)


@pytest.mark.parametrize(
    ("filename", "problem"),
    [
        ("faketorch-2.1.0.tar.gz", "its extension is not .whl"),
        ("fakétorch-2.1.0-py3-none-any.whl", "invalid project name"),
        ("faketorch-2.1.0-py3-none.whl", "4 parts separated by '-', not 5 or 6"),
    ],
)
def test_a_requirement_on_a_name_that_is_not_a_wheel_file_name_is_one_line_naming_the_call_and_the_file(
    filename: str, problem: str
) -> None:
    """The ``requirement`` is checked on the file name as every command reads one (``WheelFilename.parse``)."""
    bad = ResolvedWheel("faketorch", filename, ("https://x/y",), WHEELS[0].sha256)  # type: ignore[arg-type]
    with pytest.raises(UsageError) as raised:
        planned(request(spec_json(requirement="faketorch>=2")), [bad, *WHEELS[1:]], cache_root=None)
    assert str(raised.value) == f"{CALL}: {filename}: not a valid wheel filename ({problem})"


@pytest.mark.parametrize("hostile", ["fifo", "/dev/zero", "directory", "latin1"])
def test_a_hostile_request_file_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], hostile: str
) -> None:
    import os

    path = tmp_path / "request.json"
    if hostile == "fifo":
        os.mkfifo(path)
    elif hostile == "directory":
        path.mkdir()
    elif hostile == "latin1":
        path.write_bytes(b'{"hub": "caf\xe9"}')
    else:
        path = Path(hostile)
    assert main(["hub", "plan", "--request", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and f"{path}: cannot read the hub request" in error, error


def _raw_request(**spec: object) -> dict[str, object]:
    return {
        "hub": "fixed",
        "bzlmod": True,
        "attributes": index_attributes(requirements_lock="/ws/req.txt"),
        "rules_python_version": "2.3.2",
        "labels": {},
        "repository": "/out/external/fixed",
        "patched": [spec_json(**spec)],
    }


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"strip": "1"}, f'{CALL}: strip = "1": expected an integer'),
        ({"strip": True}, f"{CALL}: strip = true: expected an integer"),
        ({"suffix": 5}, f"{CALL}: suffix = 5: expected a string"),
        ({"sha256": 123, "urls": ["https://x/a.whl"]}, f"{CALL}: sha256 = 123: expected a string"),
        # One URL, not one per character.
        (
            {"urls": "https://x/faketorch-2.1.0-py3-none-any.whl", "sha256": "ab" * 32},
            f'{CALL}: urls = "https://x/faketorch-',
        ),
        ({"rpath": ["pkg/*.so", "$ORIGIN"]}, f'{CALL}: rpath = ["pkg/*.so", "$ORIGIN"]: expected a dict of strings'),
        ({"rpath": {"pkg/*.so": 1}}, f"{CALL}: rpath = "),
        ({"patches": [1]}, f"{CALL}: patches = [1]: expected a list of paths"),
        ({"preload": "yes"}, f'{CALL}: preload = "yes": must be one of auto, elf, off'),
        (
            {"rpath_mode": "replace", "rpath": {"a/*.so": "$ORIGIN"}},
            f'{CALL}: rpath_mode = "replace": must be one of set, prepend, append',
        ),
        # The checks that need no wheel, made by the plan before any download, in the attributes' words.
        (
            {"split_into": "bad name!", "split_max_size": 10},
            f"{CALL}: split_into 'bad name!' is not a valid project name",
        ),
        (
            {"rpath": {"pkg/*.so": "/usr/lib"}},
            f'{CALL}: rpath = {{"pkg/*.so": "/usr/lib"}}: entry \'/usr/lib\' must start with $ORIGIN',
        ),
        ({"rpath": {"[" * 50: "$ORIGIN"}}, f'{CALL}: rpath = {{"{"[" * 50}": "$ORIGIN"}}: GLOB'),
        (
            {"preload": "auto", "preload_package": "jax-plugins.x"},
            f'{CALL}: preload_package = "jax-plugins.x" is not a module name',
        ),
        ({"delete": ["a[b"]}, f"{CALL}: delete = \"a[b\": an unclosed '['"),
        ({"split_into": "libs", "split_move": ["x[" + "y" * 2000]}, f'{CALL}: split_move = "x[yyy'),
    ],
)
def test_the_request_is_checked_against_one_schema_before_any_download(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], change: dict[str, object], message: str
) -> None:
    path = tmp_path / "request.json"
    path.write_text(json.dumps(_raw_request(**change)), encoding="utf-8")
    assert main(["hub", "plan", "--request", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"patched-wheels: error: {message}"), error


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"hub": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
        (
            json.dumps({**_raw_request(), "patched": ["x"]}),
            'patched.index(name = "fixed"): patched[0]: expected an object, got "x"',
        ),
        (json.dumps({**_raw_request(), "bzlmod": "yes"}), 'hub request: bzlmod = "yes": expected true or false'),
        (json.dumps({**_raw_request(), "patched": {"name": "x"}}), "hub request: patched = "),
    ],
)
def test_a_malformed_request_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, message: str
) -> None:
    path = tmp_path / "request.json"
    path.write_text(text, encoding="utf-8")
    assert main(["hub", "plan", "--request", str(path)]) == 1
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message in error and "Traceback" not in error, error


def test_python_preload_values_are_the_starlark_ones() -> None:
    from patched_wheels.hub.spec import PRELOAD_VALUES

    assert list(PRELOAD_VALUES) == starlark_schema()["preload"]["values"]


@pytest.mark.parametrize(
    ("extras", "message"),
    [
        (["jax"], r'extras = \["jax"\]: write a project and its extras, e\.g\. "jax\[cuda13\]"'),
        (["jax[cuda13]==0.10"], r'extras = \["jax\[cuda13\]==0\.10"\]: write a project and its extras'),
        (["not a requirement["], r"extras = \[\"not a requirement\[\"\]: write a project"),
        (
            ["jax[cuda13]"],
            r'extras = \["jax\[cuda13\]"\]: jax is not pinned in requirements_lock = "/ws/requirements_lock\.txt"',
        ),
    ],
)
def test_the_extras_attribute_is_checked_before_any_download(extras: list[str], message: str) -> None:
    with pytest.raises(UsageError, match=r'^patched\.index\(name = "fixed"\): ' + message):
        planned(request(extras=extras), WHEELS, cache_root=None)


def test_the_extras_attribute_reaches_the_build_by_canonical_project() -> None:
    config = planned(request(extras=["Fake_Nvidia.JIT[Cu_Da]", "fake-nvidia-jit[rt]"]), WHEELS, cache_root=None).config
    assert config.root_extras == {"fake-nvidia-jit": ["cu-da", "rt"]}
