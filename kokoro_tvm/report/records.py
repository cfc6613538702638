"""What every notebook records: outputs/<notebook>/metrics.json with parameters, provenance and values."""

from __future__ import annotations

import datetime
import json
import math
import platform
import subprocess
from importlib import metadata
from pathlib import Path

from kokoro_tvm.machine import machine
from kokoro_tvm.paths import REPO_ROOT, notebook_output_dir
from kokoro_tvm.report.notebook_runner import NOTEBOOK_DIR, declared_parameters
from kokoro_tvm.runtime.bundle_runner import cpu_model
from kokoro_tvm.runtime.devices import usable_cpus

VERSIONED = ("torch", "apache-tvm", "apache-tvm-ffi", "kokoro", "kokoro-tvm", "numpy")


def git_sha() -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def provenance() -> dict:
    versions = {}
    for name in VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {
        "git_sha": git_sha(),
        "versions": versions,
        "machine": {"platform": platform.platform(), "processor": cpu_model(), "cpus": usable_cpus()}
        | {"cpu": machine().as_dict()},
        "time_utc": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def _jsonable(value):
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and callable(value.item):  # numpy scalars
        return _jsonable(value.item())
    return value


def write_metrics(
    notebook: str, namespace: dict, values: dict, claims: list | None = None, conclusion: str | None = None
) -> Path:
    """Write outputs/<notebook>/metrics.json: the notebook's parameters (read from `namespace`, its globals(), by
    the names its parameters cell declares: what ran, as the runner injected them or as the cell set them), the
    values, its findings (kokoro_tvm.report.claims.Claim objects, stored with their pass/fail) and its conclusion;
    returns its path."""
    declared = declared_parameters(NOTEBOOK_DIR / f"{notebook}.ipynb")
    path = notebook_output_dir(notebook) / "metrics.json"
    record = {
        "notebook": notebook,
        "parameters": {name: namespace[name] for name in declared},
        **provenance(),
        "metrics": values,
        "claims": [c.as_dict() for c in claims or []],
        "conclusion": conclusion,
    }
    path.write_text(json.dumps(_jsonable(record), indent=1) + "\n")
    return path


def markdown_table(rows: list[dict], columns: list[str] | None = None) -> str:
    """A Markdown table for IPython.display.Markdown (no pandas needed)."""
    if not rows:
        return "_(no rows)_"
    columns = columns or list(rows[0])

    def cell(v):
        if isinstance(v, float):
            return f"{v:.3g}"
        return str(v).replace("|", "\\|").replace("\n", " ")

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r.get(c, "")) for c in columns) + " |" for r in rows]
    return "\n".join(lines)
