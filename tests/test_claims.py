"""Findings (kokoro_tvm.report.claims) and how the shared report shows them: unit tier, no notebook run."""

import json

import pytest

from kokoro_tvm.report import claims
from kokoro_tvm.report.index_page import build_summary, render_html


@pytest.mark.parametrize(
    "value, op, threshold, passed",
    [(4.6, ">=", 4.4, True), (4.3, ">=", 4.4, False), (0.0, "<=", 1e-12, True), (3, "==", 3, True), (2, "<", 2, False)],
)
def test_a_claim_compares_its_value_with_its_threshold(value, op, threshold, passed):
    assert claims.claim("x", value, op, threshold, note="masking.md").passed is passed


def test_a_full_run_claim_is_not_assessed_in_a_fast_run():
    fast = claims.claim("speed-up", 0.5, ">=", 1.2, note="performance.md", full_run=True, fast=True)
    full = claims.claim("speed-up", 0.5, ">=", 1.2, note="performance.md", full_run=True, fast=False)
    assert fast.passed is None and not fast.assessed and full.passed is False
    assert claims.status(fast.as_dict()) == "not assessed (full run only)"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"value": 1.0, "op": "~=", "note": "masking.md"}, "comparison"),
        ({"value": 1.0, "op": ">=", "note": "nowhere.md"}, "does not exist"),
        ({"value": float("nan"), "op": ">=", "note": "masking.md"}, "not a finite number"),
        ({"value": [1.0], "op": ">=", "note": "masking.md"}, "not a number"),
    ],
)
def test_a_claim_that_cannot_be_checked_is_refused(kwargs, message):
    with pytest.raises(claims.ClaimError, match=message):
        claims.claim("x", threshold=1.0, **kwargs)


def test_findings_say_which_do_not_hold():
    snr = claims.claim("snr", 240.0, ">=", 100, note="masking.md")
    text = claims.findings_markdown([snr, claims.claim("pesq", 4.1, ">=", 4.4, note="masking.md")])
    assert "| snr | 240 | >= 100 | **pass** |" in text and "**FAIL**" in text
    assert "1 of 2 findings do not hold: pesq" in text
    with pytest.raises(claims.ClaimError):
        claims.findings_markdown([])


def _notebook(root, name, findings, metrics=None):
    folder = root / name
    folder.mkdir()
    record = {
        "notebook": name,
        "parameters": {"FAST": True},
        "metrics": metrics or {},
        "git_sha": "abc",
        "time_utc": "2026-01-01T00:00:00+00:00",
        "claims": [c.as_dict() for c in findings],
    }
    (folder / "metrics.json").write_text(json.dumps(record))


def test_the_report_opens_with_the_headline_findings_and_each_section_with_its_own(tmp_path):
    _notebook(tmp_path, "01_a", [claims.claim("snr (dB)", 240.0, ">=", 100, note="masking.md", headline=True)])
    speed = claims.claim("speed", 1.5, ">=", 1.2, note="performance.md", full_run=True, fast=True)
    pesq = claims.claim("pesq", 4.1, ">=", 4.4, note="masking.md")
    _notebook(tmp_path, "02_b", [pesq, speed], metrics={f"m{i}": i for i in range(12)})
    page = render_html(build_summary(tmp_path, weights={"source": "embedded", "fingerprint": "f00"}))
    headline = page[page.index("id='headline'") : page.index("<h2>Run</h2>")]
    assert "snr (dB)" in headline and 'href="#01_a"' in headline and "pesq" not in headline
    assert page.count("class='findings'") == 3  # the headline table and one per section
    assert "Findings: 2 findings, 1 failed" in page and "class='fail'>FAIL" in page
    assert "not assessed (full run only)" in page
    assert "<details><summary>Key metrics (12)</summary>" in page  # a long list is folded
    assert "<th>weights fingerprint</th><td>f00</td>" in page and "{" not in page.split("<ul>")[0].split("Run")[1]


def test_a_claim_this_machine_cannot_assess_is_never_a_pass():
    """nvcc missing, no GPU: the claim keeps its value, says why it was not assessed, and the conclusion says so."""
    absent = claims.claim(
        "CUDA sources nvcc rejects", 0, "==", 0, note="metal.md", unavailable="nvcc is not installed here"
    )
    held = claims.claim("worst PESQ-WB", 4.5, ">=", 4.3, note="metal.md", headline=True)
    assert absent.passed is None and claims.status(absent.as_dict()) == "not assessed (nvcc is not installed here)"
    text = claims.conclusion([absent, held])
    assert text.startswith("All 1 assessed findings hold.") and "worst PESQ-WB 4.5 (>= 4.3)" in text
    assert "1 of 2 could not be assessed in this run (nvcc is not installed here)" in text
    failing = claims.conclusion([claims.claim("worst PESQ-WB", 4.1, ">=", 4.3, note="metal.md"), absent])
    assert failing.startswith("**1 of 2 findings do not hold: worst PESQ-WB.**")


def test_checker_fixes_defaults_that_a_call_may_override():
    check = claims.checker(fast=True, note="performance.md")
    kept = check("speed", 2.0, ">=", 1.0, full_run=True)
    assert kept.note == "performance.md" and kept.passed is None  # full_run under fast: recorded, not assessed
    own = check("quality", 4.5, ">=", 4.3, note="audio_comparison.md", fast=False)
    assert own.note == "audio_comparison.md" and own.passed is True
