"""The shared analysis report: outputs/index.html and outputs/summary.json over every executed notebook.

Built from what the notebooks wrote (outputs/<notebook>/metrics.json and the figures beside it), so it can be
regenerated at any time without rerunning anything. The page opens with the headline findings of every
notebook (kokoro_tvm.report.claims, `headline=True`), each with its status and a link to its section; each
section starts with all of its notebook's findings, then its parameters, key metrics (the scalar values of its
metrics.json, top level and one level into dicts; folded when long) and the PNGs it saved. Provenance (git SHA,
versions, machine, time) comes from each notebook's own record; the weights are stated once for the page.
"""

from __future__ import annotations

import datetime
import html
import json
import logging
from pathlib import Path

from kokoro_tvm.errors import ResourceError
from kokoro_tvm.paths import outputs_dir
from kokoro_tvm.report.claims import status

FOLD_METRICS_OVER = 8  # key-metric tables longer than this are folded (<details>)

log = logging.getLogger(__name__)

MAX_KEY_METRICS = 30
EVALUATION_DIR = "evaluate"  # a notebook folder's results table (kokoro_tvm.evaluation.results_table), if it has one
EVALUATION_COLUMNS = (
    "backend",
    "sentences",
    "same_length",
    "non_finite",
    "pesq_wb",
    "pesq_wb_worst",
    "stoi_worst",
    "mcd_db",
    "wer_mean",
)


def key_metrics(values: dict) -> dict:
    """Scalars at the top level of a notebook's metrics and one level into its dicts ('a.b'), in order."""
    found = {}
    for name, value in values.items():
        if isinstance(value, (bool, int, float, str)) or value is None:
            found[name] = value
        elif isinstance(value, dict):
            found.update({f"{name}.{k}": v for k, v in value.items() if isinstance(v, (bool, int, float, str))})
        if len(found) >= MAX_KEY_METRICS:
            break
    return dict(list(found.items())[:MAX_KEY_METRICS])


def _notebook_entry(folder: Path, root: Path) -> dict | None:
    path = folder / "metrics.json"
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        log.warning("skipping %s: %s", path, exc)
        return None
    executed = folder / f"{folder.name}.ipynb"
    return {
        "notebook": folder.name,
        "evaluation": _evaluation(folder / EVALUATION_DIR, root),
        "parameters": record.get("parameters", {}),
        "key_metrics": key_metrics(record.get("metrics", {})),
        "claims": record.get("claims", []),
        "conclusion": record.get("conclusion"),
        "figures": sorted(str(p.relative_to(root)) for p in folder.glob("*.png")),
        "executed_notebook": str(executed.relative_to(root)) if executed.exists() else None,
        "git_sha": record.get("git_sha"),
        "versions": record.get("versions", {}),
        "machine": record.get("machine", {}),
        "time_utc": record.get("time_utc"),
    }


def _evaluation(table_dir: Path, root: Path) -> dict | None:
    """A notebook's results table read back (one row per sentence x voice x backend): its size and the per-backend
    summary of kokoro_tvm.evaluation.results_table, from the table itself rather than the notebook's record."""
    from kokoro_tvm.evaluation.results_table import ResultTable, summarize  # (deferred: pyarrow)

    if not (table_dir / "rows").is_dir():
        return None
    try:
        rows = ResultTable(table_dir).read()
    except ResourceError as exc:  # a corrupt part file: the rest of the report still renders
        log.warning("skipping %s: %s", table_dir, exc)
        return None
    summary = [{k: entry[k] for k in EVALUATION_COLUMNS} for entry in summarize(rows)] if rows else []
    return {
        "table": str(table_dir.relative_to(root)),
        "rows": len(rows),
        "tasks": len({(r["voice"], r["sentence"]) for r in rows}),
        "voices": sorted({r["voice"] for r in rows}),
        "summary": summary,
    }


def _evaluation_html(evaluation: dict | None) -> str:
    if not evaluation:
        return ""
    head = "".join(f"<th>{html.escape(c)}</th>" for c in EVALUATION_COLUMNS)
    cells = [["n/a" if row[c] is None else _cell(row[c]) for c in EVALUATION_COLUMNS] for row in evaluation["summary"]]
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in cells)
    return (
        f"<h3>Results table: {evaluation['tasks']} sentences x voices ({', '.join(evaluation['voices'])}), "
        f"{evaluation['rows']} rows</h3><p>Read from <code>{html.escape(evaluation['table'])}</code>: medians over "
        f"sentences, the worst PESQ-WB and STOI, the mean Whisper WER.</p>"
        f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"
    )


def build_summary(root: Path | None = None, weights: dict | None = None) -> dict:
    root = Path(root or outputs_dir())
    entries = [e for folder in sorted(p for p in root.iterdir() if p.is_dir()) if (e := _notebook_entry(folder, root))]
    latest = max(entries, key=lambda e: e["time_utc"] or "", default={})
    return {
        "generated_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "git_sha": latest.get("git_sha"),
        "versions": latest.get("versions", {}),
        "machine": latest.get("machine", {}),
        "weights": weights,
        "notebooks": entries,
        "sweeps": [sweep for path in sorted(root.glob("sweeps/*/sweep.json")) if (sweep := _sweep_entry(path, root))],
    }


def _sweep_entry(path: Path, root: Path) -> dict | None:
    """One `kokoro-tvm sweep` (kokoro_tvm.commands.sweep): its notebook and one row per grid point."""
    try:
        record = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        log.warning("skipping %s: %s", path, exc)
        return None
    rows = []
    for point in record.get("points", []):
        claims = point.get("claims", [])
        executed = path.parent / point["point"] / f"{record['notebook']}.ipynb"
        rows.append(
            {
                "point": point["point"],
                "status": point["status"],
                "error": point.get("error"),
                "held": sum(1 for c in claims if c.get("passed")),
                "findings": len(claims),
                "failed": [c["name"] for c in claims if c.get("passed") is False],
                "executed_notebook": str(executed.relative_to(root)) if executed.exists() else None,
            }
        )
    return {"notebook": record["notebook"], "points": rows}


def _sweeps_html(sweeps: list[dict]) -> str:
    """The report's sweep table: one row per grid point, its status and how many of its findings hold."""
    if not sweeps:
        return ""
    parts = ["<section id='sweeps'><h2>Sweeps</h2>"]
    for sweep in sweeps:
        rows = "".join(
            f"<tr><td>{_link(p['executed_notebook'], p['point'])}</td><td>{html.escape(p['status'])}</td>"
            f"<td>{p['held']}/{p['findings']}</td><td>{html.escape('; '.join(p['failed']) or '')}</td>"
            f"<td>{html.escape(p['error'] or '')}</td></tr>"
            for p in sweep["points"]
        )
        parts.append(
            f"<h3>{html.escape(sweep['notebook'])}</h3><table><thead><tr><th>point</th><th>status</th>"
            f"<th>findings held</th><th>failed findings</th><th>error</th></tr></thead><tbody>{rows}"
            "</tbody></table>"
        )
    return "".join(parts) + "</section>"


def _link(target: str | None, text: str) -> str:
    return f'<a href="{html.escape(target)}">{html.escape(text)}</a>' if target else html.escape(text)


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return html.escape(str(value))


def _table(rows: dict, header: tuple[str, str]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{_cell(v)}</td></tr>" for k, v in rows.items())
    return f"<table><thead><tr><th>{header[0]}</th><th>{header[1]}</th></tr></thead><tbody>{body}</tbody></table>"


STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.2em 0.6em; text-align: left; vertical-align: top; }
thead th { background: #f0f0f0; }
section { border-top: 2px solid #ddd; margin-top: 2em; }
img { max-width: 100%; border: 1px solid #eee; margin: 0.3em 0; }
code { background: #f6f6f6; }
td.pass { color: #176317; font-weight: bold; }
td.fail { color: #b00020; font-weight: bold; }
td.na { color: #777; }
details { margin: 0.5em 0; }
"""


def _findings_table(claims: list[dict], with_notebook: bool = False) -> str:
    head = "<th>finding</th><th>value</th><th>must be</th><th>status</th>"
    head += "<th>notebook</th>" if with_notebook else ""
    rows = []
    for c in claims:
        state = status(c)
        css = {"pass": "pass", "FAIL": "fail"}.get(state, "na")
        where = html.escape(c["notebook"])
        link = f'<td><a href="#{where}">{where}</a></td>' if with_notebook else ""
        rows.append(
            f"<tr><td>{html.escape(c['name'])}</td><td>{_cell(c['value'])}</td>"
            f"<td>{html.escape(c['op'])} {_cell(c['threshold'])}</td>"
            f"<td class='{css}'>{html.escape(state)}</td>{link}</tr>"
        )
    return f"<table class='findings'><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>"


def _run_fields(summary: dict) -> dict:
    machine, weights = summary.get("machine") or {}, summary.get("weights") or {}
    fields = {
        "git SHA": summary.get("git_sha") or "unknown",
        "generated (UTC)": summary["generated_utc"],
        "machine": machine.get("platform", "unknown"),
        "processor": f"{machine.get('processor', 'unknown')}"
        + (f" ({machine['cpus']} CPUs for this run)" if machine.get("cpus") else ""),
        "weights": weights.get("source", "unknown"),
        "weights fingerprint": weights.get("fingerprint", "unknown"),
    }
    if weights.get("note"):
        fields["weights note"] = weights["note"]
    fields.update({f"version: {k}": v for k, v in summary.get("versions", {}).items()})
    return fields


def render_html(summary: dict) -> str:
    sha = summary.get("git_sha") or "unknown"
    headline = [
        dict(c, notebook=e["notebook"]) for e in summary["notebooks"] for c in e.get("claims", []) if c["headline"]
    ]
    sections = []
    for entry in summary["notebooks"]:
        name = html.escape(entry["notebook"])
        link = entry["executed_notebook"]
        figures = "".join(
            f'<figure><img src="{html.escape(f)}" alt="{html.escape(Path(f).stem)}"></figure>' for f in entry["figures"]
        )
        claims = [dict(c, notebook=entry["notebook"]) for c in entry.get("claims", [])]
        failed = sum(c["passed"] is False for c in claims)
        verdict = f"{len(claims)} findings, {failed} failed" if claims else "no findings recorded"
        metrics = entry["key_metrics"]
        metrics_html = ""
        if metrics:
            table = _table(metrics, ("metric", "value"))
            metrics_html = (
                f"<details><summary>Key metrics ({len(metrics)})</summary>{table}</details>"
                if len(metrics) > FOLD_METRICS_OVER
                else f"<h3>Key metrics</h3>{table}"
            )
        sections.append(
            f'<section id="{name}"><h2>{name}</h2>'
            + (f'<p>Executed notebook: <a href="{html.escape(link)}">{html.escape(link)}</a>' if link else "<p>")
            + f" · ran {html.escape(str(entry['time_utc']))} at <code>{html.escape(str(entry['git_sha']))}</code></p>"
            + f"<h3>Findings: {html.escape(verdict)}</h3>"
            + (_findings_table(claims) if claims else "")
            + (f"<p class='conclusion'>{html.escape(entry['conclusion'])}</p>" if entry.get("conclusion") else "")
            + _evaluation_html(entry.get("evaluation"))
            + "<details><summary>Parameters</summary>"
            + _table(entry["parameters"], ("parameter", "value"))
            + "</details>"
            + metrics_html
            + (f"<h3>Figures</h3>{figures}" if figures else "")
            + "</section>"
        )
    toc = "".join(
        f'<li><a href="#{html.escape(e["notebook"])}">{html.escape(e["notebook"])}</a></li>'
        for e in summary["notebooks"]
    )
    headline_html = (
        "<h2 id='headline'>Headline findings</h2>" + _findings_table(headline, with_notebook=True) if headline else ""
    )
    return (
        f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>kokoro-tvm report ({html.escape(sha[:10])})"
        f"</title><style>{STYLE}</style></head><body><h1>kokoro-tvm: notebook report</h1>"
        f"{headline_html}<h2>Run</h2>{_table(_run_fields(summary), ('run', 'value'))}<ul>{toc}</ul>{''.join(sections)}"
        f"{_sweeps_html(summary.get('sweeps', []))}</body></html>"
    )


def write_index(root: Path | None = None, weights: dict | None = None) -> tuple[Path, Path]:
    """Write outputs/index.html and outputs/summary.json; returns their paths."""
    root = Path(root or outputs_dir())
    summary = build_summary(root, weights)
    summary_path, index_path = root / "summary.json", root / "index.html"
    summary_path.write_text(json.dumps(summary, indent=1) + "\n")
    index_path.write_text(render_html(summary))
    log.info("report: %s (%d notebooks)", index_path, len(summary["notebooks"]))
    return index_path, summary_path
