"""Findings (kokoro_tvm.report.claims) and how the shared report shows them: unit tier, no notebook run."""

import json
from html.parser import HTMLParser

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
    assert "| snr | 240 | >= 100 | **pass** |" in text and "| pesq | 4.1 | >= 4.4 | **FAIL** |" in text
    ending = claims.conclusion([snr, claims.claim("pesq", 4.1, ">=", 4.4, note="masking.md")], "Held.", "Failed.")
    assert ending.startswith("**1 of 2 findings do not hold: pesq**") and ending.endswith(" Failed.")
    with pytest.raises(claims.ClaimError):
        claims.findings_markdown([])


def _notebook(root, name, findings, metrics=None, conclusion=None):
    folder = root / name
    folder.mkdir()
    record = {
        "notebook": name,
        "parameters": {"FAST": True},
        "metrics": metrics or {},
        "git_sha": "abc",
        "time_utc": "2026-01-01T00:00:00+00:00",
        "claims": [c.as_dict() for c in findings],
        "conclusion": conclusion,
    }
    (folder / "metrics.json").write_text(json.dumps(record))


class _Page(HTMLParser):
    """The report as the tests read it: each table with the headings it sits under and its rows of cell texts
    (links kept as `text -> href`), and the summaries of folded details."""

    def __init__(self, page: str):
        super().__init__()
        self.tables, self.summaries, self.headings, self.conclusions = [], [], [], []
        self._text, self._href, self._in, self._conclusion = "", None, [], False
        self.feed(page)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self._in.append(tag)
        if tag == "p":
            self._conclusion = attrs.get("class") == "conclusion"
        if tag == "table":
            self.tables.append({"class": attrs.get("class"), "under": list(self.headings), "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("td", "th", "h2", "h3", "summary") or (tag == "p" and attrs.get("class") == "conclusion"):
            self._text = ""
        elif tag == "a":
            self._href = attrs.get("href")

    def handle_endtag(self, tag):
        self._in.pop()
        if tag in ("td", "th"):
            self.tables[-1]["rows"][-1].append(self._text.strip())
        elif tag in ("h2", "h3"):
            self.headings.append(self._text.strip())
        elif tag == "summary":
            self.summaries.append(self._text.strip())
        elif tag == "p" and self._conclusion:
            self.conclusions.append((self.headings[-2], self._text.strip()))
        elif tag == "a" and self._href:
            self._text += f" -> {self._href}"
            self._href = None

    def handle_data(self, data):
        self._text += data

    def findings(self) -> list[dict]:
        return [t for t in self.tables if t["class"] == "findings"]


def test_the_report_opens_with_the_headline_findings_and_each_section_with_its_own(tmp_path):
    _notebook(tmp_path, "01_a", [claims.claim("snr (dB)", 240.0, ">=", 100, note="masking.md", headline=True)])
    speed = claims.claim("speed", 1.5, ">=", 1.2, note="performance.md", full_run=True, fast=True)
    pesq = claims.claim("pesq", 4.1, ">=", 4.4, note="masking.md")
    _notebook(tmp_path, "02_b", [pesq, speed], metrics={f"m{i}": i for i in range(12)}, conclusion="It fails.")
    page = _Page(render_html(build_summary(tmp_path, weights={"source": "embedded", "fingerprint": "f00"})))
    headline, first, second = page.findings()  # the headline table and one per section, in that order
    assert headline["under"] == ["Headline findings"]  # before the run's table, and only the headline claims
    assert headline["rows"][1:] == [["snr (dB)", "240", ">= 100", "pass", "01_a -> #01_a"]]
    assert first["under"][-2:] == ["01_a", "Findings: 1 findings, 0 failed"]
    assert second["under"][-2:] == ["02_b", "Findings: 2 findings, 1 failed"]
    assert [row[3] for row in second["rows"][1:]] == ["FAIL", "not assessed (full run only)"]
    assert "Key metrics (12)" in page.summaries  # a long list is folded
    assert page.conclusions == [("02_b", "It fails.")]  # under its own section's findings; 01_a recorded none
    run = next(t for t in page.tables if t["rows"][0] == ["run", "value"])
    assert ["weights fingerprint", "f00"] in run["rows"] and not any("{" in cell for row in run["rows"] for cell in row)


def test_a_claim_this_machine_cannot_assess_is_never_a_pass():
    """nvcc missing, no GPU: the claim keeps its value, says why it was not assessed, and the conclusion says so."""
    absent = claims.claim(
        "CUDA sources nvcc rejects", 0, "==", 0, note="metal.md", unavailable="nvcc is not installed here"
    )
    held = claims.claim("worst PESQ-WB", 4.5, ">=", 4.3, note="metal.md", headline=True)
    assert absent.passed is None and claims.status(absent.as_dict()) == "not assessed (nvcc is not installed here)"
    text = claims.conclusion([absent, held], "So it holds.", "So it fails.")
    assert text == (
        "All 1 assessed findings hold (1 more not assessed in this run: nvcc is not installed here). "
        "Headline: worst PESQ-WB 4.5 (>= 4.3). So it holds."
    )
    failing = claims.conclusion(
        [claims.claim("worst PESQ-WB", 4.1, ">=", 4.3, note="metal.md"), absent], "So it holds.", "So it fails."
    )
    assert failing.startswith("**1 of 2 findings do not hold: worst PESQ-WB** (1 more not assessed")
    assert failing.endswith("So it fails.") and "Headline" not in failing  # a failed headline is not a headline


def test_checker_fixes_defaults_that_a_call_may_override():
    check = claims.checker(fast=True, note="performance.md")
    kept = check("speed", 2.0, ">=", 1.0, full_run=True)
    assert kept.note == "performance.md" and kept.passed is None  # full_run under fast: recorded, not assessed
    own = check("quality", 4.5, ">=", 4.3, note="audio_comparison.md", fast=False)
    assert own.note == "audio_comparison.md" and own.passed is True
