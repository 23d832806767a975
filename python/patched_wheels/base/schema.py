"""The one reader of the JSON documents the helper reads or writes: the hub request, the resolved wheels and the
build step's configuration the Starlark side hands it; pip's closure (``pip_closure.json``), the wheel facts
(``wheel_facts.json``), a ``layout_test``'s config and the preload data a patched wheel ships.

Each document is declared once, as frozen dataclasses whose annotations are its schema; :func:`read_object`
checks a decoded JSON value against them before any of it is used (a WORKSPACE macro's values reach the rule
untyped) and builds the objects. A missing or unknown key means the two sides of a schema changed apart: it is
named, never dropped or defaulted. A value of the wrong type, or not one of a field's allowed values, is named
by its key as the user wrote it. So a new attribute touches its dataclass field and the code that uses it, and
no table of keys and types beside them.

A field may be an object of its own (a dataclass: its errors start with ``<document>: <field>``), or a list of
them. What a field's ``metadata`` may say: :data:`VALUES`, the values a string may take; :data:`KEYS`, the keys an
object must have exactly; :data:`AMONG`, the keys a dict may hold (any of them); :data:`OMIT`, the fields a list's
objects leave out (they keep their defaults); :data:`CALL`, how an error names each object of a list (given the
fields read before it, its index and its JSON), by default ``<document>: <field>[<index>]``. An object inside a
dict or a list is read the same way, its errors naming it ``<document>: <field>["<key>"]`` or ``[<index>]``.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import json
import sys
import typing
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Collection, TypeVar

from patched_wheels.errors import UsageError

T = TypeVar("T")

VALUES, KEYS, AMONG, OMIT, CALL = "values", "keys", "among", "omit", "call"

#: How an error names one object of a list: (the fields of its parent read so far, its index, its JSON) -> name.
ItemCall = Callable[[Mapping[str, Any], int, Any], str]


def shown(value: object) -> str:
    """``value`` as JSON, cut to a length an error line can quote."""
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:60] + "..."


def choice_problem(attribute: str, value: object, allowed: Collection[object]) -> str | None:
    """Why ``value`` is none of ``allowed``, in the attribute's words; None when it is one."""
    return None if value in allowed else f"{attribute} = {shown(value)}: must be one of {', '.join(map(str, allowed))}"


def same_keys(raw: object, expected: Collection[str], what: str) -> None:
    """Refuse a JSON value that is not an object whose keys are exactly ``expected``: one schema, no silent
    defaults. A ValueError: the file, not the user's attributes, is at fault (the CLI names it)."""
    if not isinstance(raw, Mapping):
        raise ValueError(f"{what}: expected an object, got {shown(raw)}")
    _refuse_keys(what, missing=sorted(set(expected) - set(raw)), unknown=sorted(set(raw) - set(expected)))


def _refuse_keys(what: str, *, missing: list[str], unknown: list[str]) -> None:
    """The one error of keys missing or unknown (a ValueError, as :func:`same_keys` says why)."""
    if missing or unknown:
        raise ValueError(
            f"{what}: "
            + "; ".join(
                part
                for part in (f"missing keys {missing}" if missing else "", f"unknown keys {unknown}" if unknown else "")
                if part
            )
        )


def read_object(
    cls: type[T], raw: object, what: str, *, omit: Collection[str] = (), given: Mapping[str, Any] | None = None
) -> T:
    """A ``cls`` (a dataclass) from ``raw``, a decoded JSON object holding every field but ``omit`` and ``given``,
    each checked against its annotation (and its metadata) in the order the fields are declared; errors start with
    ``what``. ``given``: fields the reader knows and the document does not hold (where the file was found)."""
    given = given or {}
    fields = [field for field in dataclasses.fields(cls) if field.name not in omit and field.name not in given]  # type: ignore[arg-type]
    same_keys(raw, [field.name for field in fields], what)
    assert isinstance(raw, Mapping)  # same_keys refused anything else
    annotations = _field_types(typing.cast(type, cls))
    values: dict[str, Any] = {}
    for field in fields:
        values[field.name] = _read_field(annotations[field.name], raw[field.name], field, what, values)
    return cls(**values, **given)


class _UnionsAsTyping(ast.NodeTransformer):
    """``A | B`` in an annotation rewritten as ``typing.Union[A, B]``, which Python 3.9 evaluates."""

    def visit_BinOp(self, node: ast.BinOp) -> ast.expr:
        self.generic_visit(node)
        if not isinstance(node.op, ast.BitOr):
            return node
        union = ast.Attribute(value=ast.Name(id="typing", ctx=ast.Load()), attr="Union", ctx=ast.Load())
        return ast.Subscript(value=union, slice=ast.Tuple(elts=[node.left, node.right], ctx=ast.Load()), ctx=ast.Load())


@functools.lru_cache(maxsize=None)
def _field_types(cls: type) -> dict[str, Any]:
    """The fields' annotations of ``cls``, evaluated in its module: the modules write them as strings, with
    ``X | None``, which ``typing.get_type_hints`` cannot evaluate before Python 3.10 (the helper runs on 3.9).
    Cached by class: a class's annotations never change, and a list of a thousand wheels reads one class."""
    namespace = {**vars(sys.modules[cls.__module__]), "typing": typing}
    types_by_name = {}
    for field in dataclasses.fields(cls):
        annotation = field.type
        if isinstance(annotation, str):
            tree = ast.fix_missing_locations(_UnionsAsTyping().visit(ast.parse(annotation, mode="eval")))
            annotation = eval(compile(tree, f"<{cls.__name__}.{field.name}>", "eval"), namespace)
        types_by_name[field.name] = annotation
    return types_by_name


def to_json(value: Any) -> Any:
    """``value`` (a dataclass of this vocabulary, or one of its fields' values) as JSON that :func:`read_object`
    reads back: fields in declared order, paths as strings, tuples as lists, sets as sorted lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {field.name: to_json(getattr(value, field.name)) for field in dataclasses.fields(value)}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(to_json(entry) for entry in value)
    if isinstance(value, (tuple, list)):
        return [to_json(entry) for entry in value]
    if isinstance(value, Mapping):
        return {key: to_json(entry) for key, entry in value.items()}
    return value


def type_problem(attribute: str, value: object, annotation: object) -> str | None:
    """Why ``value`` is not of ``annotation`` (a type of this module's vocabulary), in the attribute's words;
    None when it is."""
    return None if _accepts(annotation, value) else f"{attribute} = {shown(value)}: expected {_described(annotation)}"


def _read_field(annotation: object, value: object, field: dataclasses.Field, what: str, read: Mapping[str, Any]) -> Any:
    """One field's value checked (type, then :data:`VALUES`, :data:`KEYS` and :data:`AMONG`) and converted."""
    problem = type_problem(field.name, value, annotation)
    if problem is None and VALUES in field.metadata:
        problem = choice_problem(field.name, value, field.metadata[VALUES])
    if problem:
        raise UsageError(f"{what}: {problem}")
    if KEYS in field.metadata:
        same_keys(value, field.metadata[KEYS], f"{what}: {field.name}")
    if AMONG in field.metadata:
        assert isinstance(value, Mapping)  # checked above
        _refuse_keys(f"{what}: {field.name}", missing=[], unknown=sorted(set(value) - set(field.metadata[AMONG])))
    item = _item_type(annotation)
    if isinstance(item, type) and dataclasses.is_dataclass(item) and (CALL in field.metadata or OMIT in field.metadata):
        call: ItemCall = field.metadata.get(CALL, lambda _read, index, _raw: f"{what}: {field.name}[{index}]")
        omit = field.metadata.get(OMIT, ())
        assert isinstance(value, list)  # checked above
        return tuple(read_object(item, entry, call(read, index, entry), omit=omit) for index, entry in enumerate(value))
    return _converted(annotation, value, f"{what}: {field.name}")


def _base(annotation: Any) -> Any:
    """``annotation`` without a ``NewType`` (``NormalizedName`` is a ``str`` in JSON)."""
    while hasattr(annotation, "__supertype__"):
        annotation = annotation.__supertype__
    return annotation


def _optional(annotation: Any) -> Any | None:
    """``X`` of ``X | None``; None for any other annotation."""
    if typing.get_origin(annotation) is typing.Union:  # X | None is read as typing.Union (_field_types)
        others = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(others) == 1:
            return others[0]
    return None


def _item_type(annotation: Any) -> Any | None:
    """The items' type of a ``Sequence[X]`` or ``tuple[X, ...]``; None for any other annotation."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is Sequence or (origin is tuple and len(args) == 2 and args[1] is Ellipsis):
        return args[0]
    return None


def _accepts(annotation: Any, value: object) -> bool:
    """Whether the decoded JSON ``value`` is of ``annotation`` (an object's own fields are checked when it is read)."""
    annotation = _base(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if (inner := _optional(annotation)) is not None:
        return value is None or _accepts(inner, value)
    if (item := _item_type(annotation)) is not None:
        return isinstance(value, list) and all(_accepts(item, entry) for entry in value)
    if origin is tuple:
        return isinstance(value, list) and len(value) == len(args) and all(map(_accepts, args, value))
    if origin is frozenset:
        return isinstance(value, list) and all(_accepts(args[0], entry) for entry in value)
    if origin is Mapping:
        return isinstance(value, dict) and all(_accepts(args[1], entry) for entry in value.values())
    if dataclasses.is_dataclass(annotation):
        return True  # read by read_object, which names the object at fault
    if annotation is object:
        return True  # any JSON value: its own reader checks it
    if annotation is Path:
        return isinstance(value, str) and bool(value)
    if annotation in (int, bool):  # exactly: JSON's true is no integer, 1 no boolean
        return type(value) is annotation
    if annotation is str:
        return isinstance(value, str)
    raise TypeError(f"no JSON reading of the annotation {annotation!r}")


def _described(annotation: Any, *, plural: bool = False) -> str:
    """``annotation`` as an error names the value it expects: "a list of strings", "a path or null"."""
    annotation = _base(annotation)
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if (inner := _optional(annotation)) is not None:
        return f"{_described(inner, plural=plural)} or null{'s' if plural else ''}"
    if (item := _item_type(annotation)) is not None:
        return f"{'lists' if plural else 'a list'} of {_described(item, plural=True)}"
    if origin is tuple:
        return f"{'lists' if plural else 'a list'} of {len(args)} {_described(args[0], plural=True)}"
    if origin is frozenset:
        return f"{'lists' if plural else 'a list'} of {_described(args[0], plural=True)}"
    if origin is Mapping:
        return f"{'dicts' if plural else 'a dict'} of {_described(args[1], plural=True)}"
    singular, many = {
        str: ("a string", "strings"),
        int: ("an integer", "integers"),
        bool: ("true or false", "booleans"),
        Path: ("a path", "paths"),
    }.get(annotation, ("an object", "objects"))
    return many if plural else singular


def _converted(annotation: Any, value: Any, where: str) -> Any:
    """The checked JSON ``value`` as ``annotation`` holds it: objects read by :func:`read_object` (its errors
    starting with ``where``, and the object's key or index), paths as :class:`Path`, lists as tuples or sets."""
    annotation = _base(annotation)
    if value is None:
        return None
    if isinstance(annotation, type) and dataclasses.is_dataclass(annotation):
        return read_object(annotation, value, where)
    if (inner := _optional(annotation)) is not None:
        return _converted(inner, value, where)
    if (item := _item_type(annotation)) is not None:
        return tuple(_converted(item, entry, f"{where}[{index}]") for index, entry in enumerate(value))
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is tuple:
        return tuple(
            _converted(kind, entry, f"{where}[{index}]") for index, (kind, entry) in enumerate(zip(args, value))
        )
    if origin is frozenset:
        return frozenset(_converted(args[0], entry, where) for entry in value)
    if origin is Mapping:
        return {key: _converted(args[1], entry, f"{where}[{json.dumps(key)}]") for key, entry in value.items()}
    return Path(value) if annotation is Path else value
