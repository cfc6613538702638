"""The README says what the NOTES record: each headline number is one its NOTES file's current state gives, the
README stays short, and "Two commands" lists two. Unit tier: reads files only."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
MAX_README_BYTES = 8 * 1024  # what it is, the two commands, one table of numbers, links: history lives in git
MAX_STATE_LINES = 45  # one screen: each NOTES file opens with its current state
NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)?(?![\w.]*\d)")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    end = text.find("\n## ", start)
    return text[start : end if end >= 0 else len(text)]


def _headline_rows() -> list[dict]:
    lines = [line for line in _section(README, "## Headline numbers").splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    return [dict(zip(header, (cell.strip() for cell in line.strip("|").split("|")), strict=True)) for line in lines[2:]]


def _current_state(note: str) -> str:
    return _section((ROOT / "NOTES" / note).read_text(), "## Current state")


def test_the_readme_is_short_and_its_two_commands_are_two():
    assert len(README.encode()) <= MAX_README_BYTES
    commands = _section(README, "## Two commands")
    assert re.findall(r"^make \w+", commands, flags=re.M) == ["make run", "make test"]


ROWS = _headline_rows()


def _unrecorded(row: dict) -> list[str]:
    """The numbers of the row's `number` cell that the current state of the NOTES file it links does not give
    (as written there: a rounding or a stale copy is not found), and its machine if that state does not name it."""
    (note,) = re.findall(r"\(NOTES/([\w.]+\.md)\)", row["notes"])
    state = _current_state(note)
    found = set(NUMBER.findall(state))
    missing = [n for n in NUMBER.findall(row["number"]) if n not in found]
    machine = row["machine"].replace("2-core ", "").replace("AMD EPYC ", "")
    return missing + ([machine] if machine != "any" and machine not in state else [])


@pytest.mark.parametrize("row", ROWS, ids=[f"{i}:{r['what'][:30]}" for i, r in enumerate(ROWS)])
def test_every_headline_number_is_the_one_its_notes_record(row):
    assert NUMBER.findall(row["number"]), row
    assert _unrecorded(row) == []


def test_the_check_catches_a_number_or_machine_the_notes_do_not_give():
    """Not vacuous: a row with one number its note lacks, one its note gives only to fewer digits, and a machine it
    does not name is caught on all three counts."""
    state = set(NUMBER.findall(_current_state("performance.md")))
    recorded = sorted(n for n in state if "." in n)[0]  # one the note gives
    longer = next(recorded + d for d in "123456789" if recorded + d not in state)  # a digit more: not given
    absent = next(n for n in ("9.876", "98.76", "987.6") if n not in state)
    row = {
        "number": f"int8 {recorded} s, {absent} s, RTF {longer}",
        "machine": "2-core Apple M4",
        "notes": "(NOTES/performance.md)",
    }
    assert _unrecorded(row) == [absent, longer, "Apple M4"]


def _state_lines(text: str) -> int | None:
    """Lines from a note's "## Current state" heading to its next "## " heading (blank lines counted), or None
    when the note has no current state (NOTES/README.md, the index)."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line == "## Current state"), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    return end - start - 1


@pytest.mark.parametrize("note", sorted(p.name for p in (ROOT / "NOTES").glob("*.md")))
def test_every_note_opens_with_one_screen_of_current_state(note):
    lines = _state_lines((ROOT / "NOTES" / note).read_text())
    assert lines is not None or note == "README.md", f"{note} has no '## Current state'"
    assert lines is None or lines <= MAX_STATE_LINES, f"{note}: {lines} lines of current state"


def test_the_state_length_check_counts_every_line_to_the_next_heading():
    """Not vacuous: a state of 46 lines (45 of text, the blank line before the next heading) is over the limit,
    and one line fewer is not."""
    body = "\n".join(f"line {i}" for i in range(MAX_STATE_LINES))
    assert _state_lines(f"# Note\n\n## Current state\n{body}\n\n## History\nold\n") == MAX_STATE_LINES + 1
    assert _state_lines(f"# Note\n\n## Current state\n{body}\n## History\n") == MAX_STATE_LINES
