"""What a notebook found, stated and checked: each claim is a measured value, a comparison and a threshold.

A notebook declares its claims in one place, at its end, from its own metrics (never a hand-typed number):

    findings = [claims.claim("fp64 audio SNR at the largest bucket (dB)", snr, ">=", 100, note="masking.md"), ...]
    display(Markdown(claims.findings_markdown(findings)))
    records.write_metrics(..., claims=findings)

`records.write_metrics` stores them in metrics.json; the shared report (index_page) shows each notebook's claims
with pass/fail at the top of its section and the `headline` ones in one table at the top of the page; the FAST
pipeline test fails on any assessed claim that does not hold. A claim that needs the full run (`full_run=True`)
is recorded in a FAST run as not assessed, with its value, never as passed.
"""

from __future__ import annotations

import math
import operator
from dataclasses import asdict, dataclass

from kokoro_tvm.errors import InputError
from kokoro_tvm.paths import REPO_ROOT

OPERATORS = {"<=": operator.le, "<": operator.lt, ">=": operator.ge, ">": operator.gt, "==": operator.eq}
NOTES_DIR = REPO_ROOT / "NOTES"


class ClaimError(InputError):
    """A claim that cannot be checked: unknown comparison, missing note, or a value that is not a number."""


@dataclass(frozen=True)
class Claim:
    name: str
    value: float | bool | str
    op: str
    threshold: float | bool | str
    note: str  # the NOTES/ file that explains it
    headline: bool = False
    assessed: bool = True  # False: needs the full run and this was a FAST run, or this machine cannot assess it
    reason: str = ""  # why it is not assessed ("" with assessed=True)

    @property
    def passed(self) -> bool | None:
        """Whether the value meets the threshold; None when not assessed."""
        return OPERATORS[self.op](self.value, self.threshold) if self.assessed else None

    def as_dict(self) -> dict:
        return dict(asdict(self), passed=self.passed)


def claim(
    name: str,
    value,
    op: str,
    threshold,
    *,
    note: str,
    headline: bool = False,
    full_run: bool = False,
    fast: bool = False,
    unavailable: str | None = None,
) -> Claim:
    """A claim on `value` (`op` one of <=, <, >=, >, ==). `note`: the NOTES file (name in NOTES/) behind it.
    `full_run=True` with `fast=True` (the notebook's FAST): recorded, not assessed. `unavailable`: why this
    machine cannot assess it (a tool or device it lacks): recorded as not assessed with that reason, never as a
    pass."""
    if op not in OPERATORS:
        raise ClaimError(f"{name}: comparison {op!r} is not one of {', '.join(OPERATORS)}")
    if not (NOTES_DIR / note).is_file():
        raise ClaimError(f"{name}: NOTES/{note} does not exist")
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        raise ClaimError(f"{name}: the value {value} is not a finite number")
    if not isinstance(value, (bool, int, float, str)) or value is None:
        raise ClaimError(f"{name}: the value {value!r} is not a number, flag or label")
    if unavailable:
        return Claim(name, value, op, threshold, note, headline, assessed=False, reason=unavailable)
    if full_run and fast:
        return Claim(name, value, op, threshold, note, headline, assessed=False, reason="full run only")
    return Claim(name, value, op, threshold, note, headline)


def checker(**defaults):
    """`claim` with keyword arguments fixed for one Findings cell (e.g. `fast=FAST, note="performance.md"`); a
    call may still give any of them."""

    def check(name: str, value, op: str, threshold, **given) -> Claim:
        return claim(name, value, op, threshold, **(defaults | given))

    return check


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def status(entry: dict) -> str:
    """'pass', 'FAIL' or 'not assessed (why)' for a claim as recorded (Claim.as_dict)."""
    if entry["passed"] is None:
        return f"not assessed ({entry.get('reason') or 'full run only'})"
    return "pass" if entry["passed"] else "FAIL"


def findings_markdown(claims: list[Claim], notes_prefix: str = "../NOTES/") -> str:
    """The notebook's Findings: one row per claim (value, comparison, threshold, status, its NOTES file)."""
    if not claims:
        raise ClaimError("a notebook states at least one finding")
    lines = ["| finding | value | must be | status | notes |", "|---|---|---|---|---|"]
    for c in claims:
        entry = c.as_dict()
        lines.append(
            f"| {c.name} | {_format(c.value)} | {c.op} {_format(c.threshold)} | **{status(entry)}** "
            f"| [{c.note}]({notes_prefix}{c.note}) |"
        )
    return "\n".join(lines)


def conclusion(claims: list[Claim], held: str, failed: str) -> str:
    """The notebook's closing words, drawn from its claims: how many hold (and how many could not be assessed,
    and why), what the headline findings measured, and what that means: `held` when none fails, else `failed`
    (each one sentence, written by the notebook for its own story)."""
    failing = [c.name for c in claims if c.passed is False]
    skipped = [c for c in claims if c.passed is None]
    reasons = "; ".join(sorted({c.reason or "full run only" for c in skipped}))
    aside = f" ({len(skipped)} more not assessed in this run: {reasons})" if skipped else ""
    if failing:
        sentences = [f"**{len(failing)} of {len(claims)} findings do not hold: {', '.join(failing)}**{aside}."]
    else:
        sentences = [f"All {len(claims) - len(skipped)} assessed findings hold{aside}."]
    headline = [c for c in claims if c.passed and c.headline]
    if headline:
        values = "; ".join(f"{c.name} {_format(c.value)} ({c.op} {_format(c.threshold)})" for c in headline)
        sentences.append(f"Headline: {values}.")
    sentences.append(failed if failing else held)
    return " ".join(sentences)
