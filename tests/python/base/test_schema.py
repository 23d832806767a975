"""The one reader of the JSON the Starlark side hands the helper (``base/schema.py``): every document is its
dataclasses, read strictly, and the keys hub.bzl writes are the ones the dataclasses declare."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Mapping, Sequence

import pytest

from patched_wheels.base.schema import AMONG, CALL, KEYS, OMIT, VALUES, read_object, to_json
from patched_wheels.errors import UsageError
from patched_wheels.hub.documents import (
    INDEX,
    LABEL_ATTRIBUTES,
    ORIGINALS,
    READ_ONLY,
    HubConfig,
    HubRequest,
    IndexAttributes,
)
from support.hubconfig import INDEX_ATTRIBUTES, index_attributes
from support.starlark import PRIVATE, starlark_constants


@dataclass(frozen=True)
class Item:
    name: str
    size: int
    path: Path | None = None


@dataclass(frozen=True)
class Document:
    """One field of each kind the documents use, so a new field of any kind needs nothing but its declaration."""

    name: str
    flag: bool
    count: int
    mode: str = field(metadata={VALUES: ("a", "b")})
    where: Path
    maybe: Path | None
    words: Sequence[str]
    paths: Sequence[Path]
    pairs: Mapping[str, tuple[str, str]]
    lists: Mapping[str, Sequence[str]]
    fixed: Mapping[str, str] = field(metadata={KEYS: ("x", "y")})
    some: Mapping[str, str] = field(metadata={AMONG: ("x", "y")})
    items: Sequence[Item] = field(
        metadata={OMIT: ("path",), CALL: lambda read, index, raw: f"item {index} of {read['name']}"}
    )
    one: Item


def _raw(**change: object) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "name": "doc",
        "flag": True,
        "count": 3,
        "mode": "b",
        "where": "/w",
        "maybe": None,
        "words": ["a"],
        "paths": ["/p"],
        "pairs": {"k": ["u", "s"]},
        "lists": {"k": ["e"]},
        "fixed": {"x": "1", "y": ""},
        "some": {"y": "2"},
        "items": [{"name": "i", "size": 1}],
        "one": {"name": "o", "size": 2, "path": "/o"},
    }
    return {**raw, **change}


def test_a_document_is_built_from_its_annotations_and_written_back_as_it_came() -> None:
    document = read_object(Document, _raw(), "the document")
    assert document == Document(
        name="doc",
        flag=True,
        count=3,
        mode="b",
        where=Path("/w"),
        maybe=None,
        words=("a",),
        paths=(Path("/p"),),
        pairs={"k": ("u", "s")},
        lists={"k": ("e",)},
        fixed={"x": "1", "y": ""},
        some={"y": "2"},
        items=(Item("i", 1),),
        one=Item("o", 2, Path("/o")),
    )
    written = to_json(document)
    written["items"][0].pop("path")  # omitted by the parent's schema: it keeps its default
    assert written == _raw()


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"count": True}, UsageError, "the document: count = true: expected an integer"),
        ({"flag": 1}, UsageError, "the document: flag = 1: expected true or false"),
        ({"where": ""}, UsageError, 'the document: where = "": expected a path'),
        ({"maybe": 3}, UsageError, "the document: maybe = 3: expected a path or null"),
        ({"words": "a"}, UsageError, 'the document: words = "a": expected a list of strings'),
        ({"paths": [""]}, UsageError, 'the document: paths = [""]: expected a list of paths'),
        (
            {"pairs": {"k": ["u"]}},
            UsageError,
            'the document: pairs = {"k": ["u"]}: expected a dict of lists of 2 strings',
        ),
        ({"lists": {"k": "e"}}, UsageError, 'the document: lists = {"k": "e"}: expected a dict of lists of strings'),
        ({"mode": "c"}, UsageError, 'the document: mode = "c": must be one of a, b'),
        ({"fixed": {"x": ""}}, ValueError, "the document: fixed: missing keys ['y']"),
        ({"some": {"x": "", "z": "", "w": ""}}, ValueError, "the document: some: unknown keys ['w', 'z']"),
        ({"some": []}, UsageError, "the document: some = []: expected a dict of strings"),
        ({"items": [{"name": "i"}]}, ValueError, "item 0 of doc: missing keys ['size']"),
        ({"items": [{"name": "i", "size": 1, "path": "/x"}]}, ValueError, "item 0 of doc: unknown keys ['path']"),
        ({"items": [{"name": "i", "size": "1"}]}, UsageError, 'item 0 of doc: size = "1": expected an integer'),
        ({"items": ["i"]}, ValueError, 'item 0 of doc: expected an object, got "i"'),
        ({"extra": 1}, ValueError, "the document: unknown keys ['extra']"),
        ({"one": {"name": "o", "size": 2}}, ValueError, "the document: one: missing keys ['path']"),
        (
            {"one": {"name": "o", "size": 2, "path": 3}},
            UsageError,
            "the document: one: path = 3: expected a path or null",
        ),
        ({"one": []}, ValueError, "the document: one: expected an object, got []"),
    ],
)
def test_a_value_off_the_schema_is_named_by_its_document_and_key(
    change: dict[str, object], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        read_object(Document, _raw(**change), "the document")
    assert type(raised.value) is error and str(raised.value) == message


def _hub_request_function() -> ast.FunctionDef:
    module = ast.parse((PRIVATE / "hub.bzl").read_text(encoding="utf-8"))
    (function,) = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name == "hub_request"]
    return function


def test_every_attribute_of_index_attrs_is_a_field_of_the_request_and_of_the_configuration() -> None:
    """What makes a new attribute of ``patched.index`` one entry of INDEX_ATTRS, one field of IndexAttributes and
    the code that reads it: the two list the same attributes, in the same order, and the request and the build's
    configuration each hold the one IndexAttributes (no field copied from one to the other)."""
    declared = starlark_constants(PRIVATE / "hub.bzl")["INDEX_ATTRS"]
    assert isinstance(declared, ast.Dict)
    index_attrs = [key.value for key in declared.keys if isinstance(key, ast.Constant)]
    assert [f.name for f in fields(IndexAttributes)] == index_attrs
    for document in (HubRequest, HubConfig):
        assert [f.name for f in fields(document) if f.type in (IndexAttributes, "IndexAttributes")] == ["attributes"]
        assert not {f.name for f in fields(document)} & set(index_attrs), document


def test_the_labels_a_request_may_name_are_the_label_attributes_of_index_attrs() -> None:
    """hub.bzl's ``request_labels`` writes an entry for each attribute whose value is a Label: the keys the request's
    and the configuration's ``labels`` may hold, and no others (an unknown key would never be looked up)."""
    declared = starlark_constants(PRIVATE / "hub.bzl")["INDEX_ATTRS"]
    assert isinstance(declared, ast.Dict)
    labels = [
        key.value
        for key, value in zip(declared.keys, declared.values)
        if isinstance(key, ast.Constant) and isinstance(value, ast.Call) and ast.unparse(value.func) == "attr.label"
    ]
    assert list(LABEL_ATTRIBUTES) == labels and "wheel_facts" in labels
    for document in (HubRequest, HubConfig):
        (field_,) = [f for f in fields(document) if f.name == "labels"]
        assert field_.metadata[AMONG] == LABEL_ATTRIBUTES, document


def test_the_defaults_hub_bzl_writes_are_read_as_the_attributes() -> None:
    """Each attribute's type in IndexAttributes reads the value Bazel gives it (its default, or a label's path)."""
    labels = {name: "/ws/file" for name, default in INDEX_ATTRIBUTES.items() if default is None}
    attributes = read_object(IndexAttributes, index_attributes(**labels), "attributes")
    assert attributes.requirements_lock == Path("/ws/file") and attributes.restore_extras is True
    assert read_object(IndexAttributes, index_attributes(), "attributes").locks == dict.fromkeys(attributes.locks)


def test_the_request_hub_bzl_writes_has_exactly_the_keys_hub_request_declares() -> None:
    """hub.bzl writes the request as a dict literal and assignments to it: its keys are HubRequest's fields."""
    written = set()
    for node in ast.walk(_hub_request_function()):
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name) and node.targets[0].id == "request":
            assert isinstance(node.value, ast.Dict)
            written |= {key.value for key in node.value.keys if isinstance(key, ast.Constant)}
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Subscript):
            target = node.targets[0]
            if isinstance(target.value, ast.Name) and target.value.id == "request":
                assert isinstance(target.slice, ast.Constant), "a key hub.bzl computes: the test cannot read it"
                written.add(target.slice.value)
    assert written == {f.name for f in fields(HubRequest)}


def test_hub_bzl_names_no_folder_of_the_hub_repository() -> None:
    """The plan names the hub's folders (what to fetch where, what to delete, which wheels to export): the rule
    only follows it, so no string of hub.bzl names one."""
    module = ast.parse((PRIVATE / "hub.bzl").read_text(encoding="utf-8"))
    strings = [
        node.value for node in ast.walk(module) if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]
    for folder in (INDEX, ORIGINALS, READ_ONLY):
        named = re.compile(rf"(?<![\w.-]){re.escape(folder)}(/|$)")
        assert not [text for text in strings if named.search(text)], folder


@dataclass(frozen=True)
class Nested:
    """The kinds the helper's own documents add (pip_closure.json, wheel_facts.json, a layout_test's config)."""

    by_key: Mapping[str, tuple[Item, ...]]
    tags: frozenset[str]
    anything: object
    origin: Path


def test_objects_in_a_dict_sets_and_any_json_round_trip_and_a_field_may_be_given() -> None:
    raw = {"by_key": {"k": [{"name": "i", "size": 1, "path": None}]}, "tags": ["b", "a"], "anything": {"x": [1]}}
    document = read_object(Nested, raw, "doc", given={"origin": Path("/here")})
    assert document == Nested({"k": (Item("i", 1),)}, frozenset({"a", "b"}), {"x": [1]}, Path("/here"))
    assert to_json(document) == {**raw, "tags": ["a", "b"], "origin": "/here"}, "a set is written sorted"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"by_key": {"k": [{"name": "i"}]}}, r'^doc: by_key\["k"\]\[0\]: missing keys \[.path., .size.\]$'),
        ({"by_key": {"k": [{"name": "i", "size": "1", "path": None}]}}, r'^doc: by_key\["k"\]\[0\]: size = "1"'),
        ({"tags": "a"}, r'^doc: tags = "a": expected a list of strings$'),
        ({"origin": "/elsewhere"}, r"^doc: unknown keys \['origin'\]$"),
    ],
)
def test_an_object_in_a_dict_is_named_by_its_key(change: dict[str, object], message: str) -> None:
    raw = {"by_key": {}, "tags": [], "anything": None, **change}
    with pytest.raises((UsageError, ValueError), match=message):
        read_object(Nested, raw, "doc", given={"origin": Path("/here")})
