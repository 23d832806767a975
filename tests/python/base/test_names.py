"""Name normalization: ours is PEP 503's, the one ``packaging.utils.canonicalize_name`` (the judge) computes; and the
one rule of the characters no name, glob, RPATH entry or path holds."""

from __future__ import annotations

import random
import re
import sys
import unicodedata

import pytest
from packaging.utils import canonicalize_name as packaging_canonicalize_name

from patched_wheels.base.names import CONTROL_CHARACTER, canonicalize_name, character_problem, glob_problem
from patched_wheels.errors import UsageError
from patched_wheels.hub.spec import path_problem
from patched_wheels.patch.request import rpath_edit
from support.fuzzing import SEED

# Separators alone and in runs, letters whose lower case is not ASCII (or longer: "İ"), digits, and what is no
# name at all: every character the name rules single out, and some they do not.
_ALPHABET = "aZ09-_.  İſKẞÅ\u0130\u212a\n\t/+!~é"


@pytest.mark.parametrize(
    ("name", "normalized"),
    [
        ("Django", "django"),
        ("oslo.concurrency", "oslo-concurrency"),
        ("Foo__Bar", "foo-bar"),
        ("a-_.-b", "a-b"),
        ("nvidia_cuda_runtime_cu12", "nvidia-cuda-runtime-cu12"),
        ("-._", "-"),
    ],
)
def test_a_name_is_normalized_as_pep_503_says(name: str, normalized: str) -> None:
    assert canonicalize_name(name) == normalized == packaging_canonicalize_name(name)


def test_every_name_is_normalized_as_packaging_normalizes_it() -> None:
    generator = random.Random(f"{SEED}-names")
    for _ in range(5000):
        name = "".join(generator.choice(_ALPHABET) for _ in range(generator.randrange(0, 12)))
        assert canonicalize_name(name) == packaging_canonicalize_name(name), f"RPW_FUZZ_SEED={SEED}: {name!r}"


def test_the_character_no_name_or_path_holds_is_unicodes_control_characters_and_lone_surrogates() -> None:
    """One rule (:data:`CONTROL_CHARACTER`) for names, globs, RPATH entries and paths: categories Cc and Cs."""
    for code in range(sys.maxunicode + 1):
        character = chr(code)
        refused = unicodedata.category(character) in ("Cc", "Cs")
        assert bool(CONTROL_CHARACTER.fullmatch(character)) == refused, hex(code)
        assert (character_problem(f"a{character}b") is not None) == refused, hex(code)


# What the rule of names and globs (C0 and DEL) let through before it was the paths' too (Cc and Cs).
_WIDER = [
    ("\x85", r"'\x85', a control character"),
    ("\x9b", r"'\x9b', a control character"),
    ("\ud800", r"'\ud800', a surrogate"),
    ("\udce9", r"'\udce9', a surrogate"),
]


@pytest.mark.parametrize(("character", "held"), _WIDER)
def test_a_glob_holding_a_c1_control_or_a_lone_surrogate_is_refused(character: str, held: str) -> None:
    assert glob_problem(f"pkg/*{character}.so") == f"holds {held}"


@pytest.mark.parametrize(("character", "held"), _WIDER)
def test_an_rpath_entry_holding_a_c1_control_or_a_lone_surrogate_is_refused(character: str, held: str) -> None:
    with pytest.raises(UsageError, match=re.escape(f": holds {held}")):
        rpath_edit("pkg/*.so", f"$ORIGIN/a{character}b")


@pytest.mark.parametrize(("character", "held"), _WIDER)
def test_a_path_holding_a_c1_control_or_a_lone_surrogate_is_refused(character: str, held: str) -> None:
    assert path_problem(f"fix{character}.patch") == f"holds {held}, which no file's path holds"
    assert path_problem("fix.patch") is None
