"""Render a :class:`~patched_wheels.lock.plan.LockPlan` as a pip requirements lock.

For a requirements file the plan is applied to the user's text: a pin edited in place keeps its
layout (the version text and the ``--hash`` options are replaced where they are written), a pin
rewritten is written in pip-compile's layout over exactly its own lines, and everything else -
comments, blank lines, markers, continuation lines, other projects' hashes, line endings, a UTF-8 byte
order mark - is kept byte for byte, so the diff against the input shows exactly the patch.
A lock of another format (uv.lock, pylock.toml) is planned on its own pins and written out as a
requirements file by :func:`render_exported`, one pin per project.
"""

from __future__ import annotations

import re
from typing import Iterator, Mapping, Sequence

from packaging.version import Version

from patched_wheels.errors import InvalidLockError
from patched_wheels.lock.formats.requirements import EOL, RequirementsText, hash_options, split_comment
from patched_wheels.lock.model import Lock, Pin
from patched_wheels.lock.plan import LockPlan, NewPin, PinEdit

# A physical line holding one --hash option and nothing else (pip-compile's layout).
_HASH_ONLY_LINE = re.compile(
    r"^(?P<indent>[ \t]*)--hash(?:=|[ \t]+)[^\s\\]+(?P<cont>[ \t]*\\)?[ \t]*(?P<eol>\r\n|\n|\r)?$"
)


def render_requirements(requirements: RequirementsText, plan: LockPlan) -> str:
    """The text of ``requirements`` with ``plan`` applied."""
    lines, eol = requirements.lines, requirements.eol
    edits: dict[int, tuple[int, list[str]]] = {}  # first physical line -> (end, new lines)
    for edit in plan.edits:
        span = edit.pin.span
        if edit.lines:
            new = [line for pin in edit.lines for line in pin_block(pin, eol)]
        else:
            new = list(lines[span.start : span.end])
            if edit.version != edit.pin.version:
                new = _replace_version(new, edit.pin, str(edit.version))
            if edit.hashes is not None:
                new = _replace_hashes(new, edit.hashes)
        edits[span.start] = (span.end, new)
    for option in plan.dropped:
        edits[option.span.start] = (option.span.end, [])
    option_at = _option_position(requirements, plan)
    output: list[str] = []
    number = 0
    while number <= len(lines):
        if number == len(lines):
            if option_at == number:
                _end_input(output, eol)
                output.append(f"{plan.option}{eol}")
            break
        if number == option_at:
            output.append(f"{plan.option}{eol}")
        end, replacement = edits.get(number, (number + 1, [lines[number]]))
        output.extend(replacement)
        number = end
    for pin in plan.added:
        _end_input(output, eol)
        output.extend(pin_block(pin, eol))
    return requirements.bom + "".join(output)


def render_exported(lock: Lock, plan: LockPlan) -> Iterator[str]:
    """A requirements lock with the pins of ``lock`` (read from another format), one per project in the
    lock's order, and ``plan`` applied: written as :func:`render_requirements` writes a plan onto such a
    file, from the model (the pins' names, extras and URLs were checked by their reader). Each pin is
    checked first (one error, nothing written), then its lines are given one pin at a time: a big lock's
    export is never held whole."""
    edits = {id(edit.pin): edit for edit in plan.edits}
    versions = [
        edit.version if edit is not None else pin.version if pin.url else pin.pinned_version()
        for pin, edit in ((pin, edits.get(id(pin))) for pin in lock.pins)
    ]
    return _exported(lock, plan, edits, versions)


def _exported(
    lock: Lock, plan: LockPlan, edits: Mapping[int, PinEdit], versions: Sequence[Version | None]
) -> Iterator[str]:
    yield f"# from {lock.source}\n"
    yield from [f"{plan.option}\n"] if plan.option else []
    for pin, version in zip(lock.pins, versions):
        edit = edits.get(id(pin))
        if edit is not None and edit.lines:
            yield "".join(line for new in edit.lines for line in pin_block(new, "\n"))
            continue
        hashes = edit.hashes if edit is not None and edit.hashes is not None else tuple(sorted(pin.hashes))
        yield "".join(pin_block(NewPin(pin.head, version, pin.url, pin.marker, hashes), "\n"))
    for added in plan.added:
        yield from pin_block(added, "\n")


def pin_block(pin: NewPin, eol: str) -> list[str]:
    """A pin in pip-compile's layout: one ``--hash`` per continuation line, then ``# via`` if known."""
    head = pin.requirement
    if not pin.hashes:
        block = [head + eol]
    else:
        last = len(pin.hashes) - 1
        block = [head + " \\" + eol] + [
            f"    --hash={value}" + (" \\" if number < last else "") + eol for number, value in enumerate(pin.hashes)
        ]
    if pin.via:
        block.append(f"    # via {', '.join(pin.via)}{eol}")
    return block


def _option_position(requirements: RequirementsText, plan: LockPlan) -> int | None:
    """Where the option line goes: in place of the first dropped option, else before the first
    non-comment line (after pip-compile's header), else at the end."""
    if plan.option is None:
        return None
    if plan.dropped:
        return min(option.span.start for option in plan.dropped)
    first = next((line.span.start for line in requirements.logical if line.content), None)
    if first is not None:
        return first
    return requirements.logical[-1].span.end if requirements.logical else 0


def _end_input(output: list[str], eol: str) -> None:
    """Before lines are added after the input: end its last line if it lacked a newline, and
    its last logical line if that ended in a dangling continuation (pip would join them)."""
    if output and not EOL.search(output[-1]):
        output[-1] += eol
    if output and EOL.sub("", output[-1]).endswith("\\"):
        output.append(eol)


def _replace_version(physical: list[str], pin: Pin, version: str) -> list[str]:
    """Replace the version text of the ``==`` pin where it is written, leaving the rest alone."""
    written = pin.version_text or str(pin.version)
    pattern = re.compile(r"(===?[ \t]*)" + re.escape(written) + r"(?![\w.!+*-])")
    for offset, line in enumerate(physical):
        new_line, count = pattern.subn(lambda m: m.group(1) + version, line, count=1)
        if count:
            return physical[:offset] + [new_line] + physical[offset + 1 :]
    raise InvalidLockError(f"{pin.span.where}: cannot find =={written} of {pin.name} on one line")


def _replace_hashes(physical: list[str], hashes: Sequence[str]) -> list[str]:
    """Swap the ``--hash`` options for ``hashes``, keeping the layout.

    pip-compile's layout - one ``--hash`` per continuation line - is kept line for line with
    the same indentation and continuation marks; hashes written inline are replaced inline.
    """
    tokens = [f"--hash={value}" for value in hashes]
    with_hash = [i for i, line in enumerate(physical) if hash_options(split_comment(line)[0])]
    if not with_hash:
        return physical
    block = range(with_hash[0], with_hash[-1] + 1)
    matches = [_HASH_ONLY_LINE.match(physical[i]) for i in block]
    own_lines = [match for match in matches if match is not None]
    if len(own_lines) == len(matches):  # every line of the block holds hash options only
        first, last = own_lines[0], own_lines[-1]
        continuation = first.group("cont") or " \\"
        new_block = []
        for position, token in enumerate(tokens):
            is_last = position == len(tokens) - 1
            cont = (last.group("cont") or "") if is_last else continuation
            eol = (last.group("eol") or "") if is_last else (first.group("eol") or "\n")
            new_block.append(f"{first.group('indent')}{token}{cont}{eol}")
        return physical[: block.start] + new_block + physical[block.stop :]
    pending = [" ".join(tokens)]  # the first old token becomes all new ones, the rest go
    return [_replace_inline(line, pending) for line in physical]


def _replace_inline(line: str, pending: list[str]) -> str:
    """``line`` with its ``--hash`` options (outside the comment) replaced by what ``pending`` holds
    (taken by the first one met) or removed."""
    code, comment = split_comment(line)
    pieces, position = [], 0
    for lead, end, _value in hash_options(code):
        pieces.append(code[position:lead])
        if pending:
            pieces.append(code[lead : lead + _blank_length(code, lead)] + pending.pop())
        position = end
    pieces.append(code[position:])
    return "".join(pieces) + comment


def _blank_length(code: str, start: int) -> int:
    end = start
    while end < len(code) and code[end] in " \t":
        end += 1
    return end - start
