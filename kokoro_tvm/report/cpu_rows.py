"""The per-CPU table of notebook 08: one committed row per CPU family measured (`kokoro-tvm bench --cpu-row
FOLDER`), beside the tuning records: the CPU, when, on which commit, the text, every backend's median and PESQ-WB."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

from kokoro_tvm.machine import Machine, cpu_identity, record_name
from kokoro_tvm.paths import TUNING_RECORDS, repository_commit

# The per-CPU table (notebook 08): one row per CPU family measured, committed beside the tuning records.
FOLDER = TUNING_RECORDS.parent / "benchmarks"


def row(record: dict, rows: list[dict], date: str | None = None) -> dict:
    """A bench record as one row of the per-CPU table: the CPU, when, on which commit, the text, and every
    backend's median seconds and PESQ-WB (TVM's fastest build named); `rows`: its backend rows (bench's
    `backend_rows`)."""
    m = record["machine"]
    medians = {r["backend"]: r for r in rows}
    tvm = {name: r for name, r in medians.items() if name.startswith("tvm")}
    identity = cpu_identity(Machine.from_dict(m))
    return {
        "cpu": f"{m['cpu']} (family {m['family']}, model {m['model']})",
        "record": record_name(identity),
        "date": date or datetime.date.today().isoformat(),
        "commit": repository_commit(),
        "text": record["text"],
        "utterance_s": record["utterance_s"],
        "threads": record["threads"],
        "runs": record["runs"],
        "tvm_fastest": min(tvm, key=lambda name: tvm[name]["median_s"]),
        "backends": {
            name: {"median_s": r["median_s"], "spread_s": r["spread_s"], "pesq_wb": r.get("pesq_wb")}
            for name, r in medians.items()
        },
    }


def save(row: dict, folder: Path = FOLDER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / row["record"]
    path.write_text(json.dumps(row, indent=1, sort_keys=True) + "\n")
    return path


def table(folder: Path = FOLDER) -> list[dict]:
    """The committed rows, flattened for a table: CPU, date, commit, TVM's fastest build and every backend's
    median seconds (PESQ-WB beside the reduced-precision ones)."""
    rows = []
    for path in sorted(folder.glob("*.json")):
        row = json.loads(path.read_text())
        flat = {"cpu": row["cpu"], "date": row["date"], "commit": row["commit"], "tvm_fastest": row["tvm_fastest"]}
        for name, values in sorted(row["backends"].items(), key=lambda item: item[1]["median_s"]):
            flat[f"{name}_s"] = round(values["median_s"], 2)
        rows.append(flat)
    return rows
