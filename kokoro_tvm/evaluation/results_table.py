"""The results table of a corpus evaluation: `<out>/rows/` holds one Parquet file per finished task (one row per
sentence x voice x backend), written whole (a temporary file renamed into place), so a task's rows are there
exactly once or not at all; reading the folder gives the one table. A rerun with the same folder skips every task
whose file is there.

Columns (`COLUMNS`): the task's key (`voice`, `sentence` index, `text`), the `backend`, then every metric of
kokoro_tvm.evaluation.backends.compare_backends; a metric a row lacks (the reference has no metric against
itself; a backend whose length differs has none) is null.

`summarize(rows)`: notebook 07's summary of such rows, per backend (the report reads it from the table too).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from kokoro_tvm.errors import InputError, ResourceError
from kokoro_tvm.paths import temporary_sibling

STRINGS = ("voice", "text", "backend", "transcript")
INTEGERS = ("sentence", "samples_vs_reference")
BOOLEANS = ("finite",)
FLOATS = (
    "seconds",
    "wer",
    "wer_pocketsphinx",
    "snr_db",
    "correlation",
    "log_mel_l1",
    "mcd_db",
    "f0_rmse_hz",
    "f0_rmse_cents",
    "voicing_agreement",
    "pesq_wb",
    "stoi",
    "task_s",
)
COLUMNS = (*STRINGS[:2], INTEGERS[0], STRINGS[2], *INTEGERS[1:], *BOOLEANS, *FLOATS, STRINGS[3])


class TableError(ResourceError):
    """A results folder that cannot be read (a corrupt or foreign part file)."""


def task_key(voice: str, sentence: int) -> str:
    """The file name stem (and Dask key) of one task: voice and sentence index."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", voice):
        raise InputError(f"voice names are letters, digits, _ . -; got {voice!r}")
    return f"{voice}-{sentence:06d}"


def _schema():
    import pyarrow as pa

    types = {
        **dict.fromkeys(STRINGS, pa.string()),
        **dict.fromkeys(INTEGERS, pa.int64()),
        **dict.fromkeys(BOOLEANS, pa.bool_()),
        **dict.fromkeys(FLOATS, pa.float64()),
    }
    return pa.schema([(name, types[name]) for name in COLUMNS])


def _cell(value):
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None  # Parquet keeps NaN, but a metric that could not be computed is null like a missing one
    return value


class ResultTable:
    """The results folder `out` (created on first write)."""

    def __init__(self, out: Path):
        self.out = Path(out)
        self.rows_dir = self.out / "rows"

    def done(self) -> set[str]:
        """The task keys whose rows are written."""
        return {p.stem for p in self.rows_dir.glob("*.parquet")} if self.rows_dir.is_dir() else set()

    def clear(self) -> None:
        """Delete every task's rows (a fresh run into the same folder)."""
        for path in self.rows_dir.glob("*.parquet") if self.rows_dir.is_dir() else ():
            path.unlink()

    def write(self, key: str, rows: list[dict]) -> Path:
        """One task's rows as `rows/<key>.parquet`, whole or not at all."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        unknown = sorted({name for row in rows for name in row} - set(COLUMNS))
        if unknown:
            raise ValueError(f"rows carry columns the table does not have: {unknown}")
        table = pa.Table.from_pylist([{name: _cell(row.get(name)) for name in COLUMNS} for row in rows], _schema())
        self.rows_dir.mkdir(parents=True, exist_ok=True)
        path = self.rows_dir / f"{key}.parquet"
        partial = temporary_sibling(path)
        pq.write_table(table, partial)
        partial.replace(path)
        return path

    def read(self) -> list[dict]:
        """Every row written so far, ordered by voice, sentence and backend order within a task."""
        import pyarrow.parquet as pq

        rows = []
        for path in sorted(self.rows_dir.glob("*.parquet")) if self.rows_dir.is_dir() else []:
            try:
                rows.extend(pq.read_table(path, schema=_schema()).to_pylist())
            except Exception as exc:  # pyarrow's errors name no common base: any unreadable part is one line
                raise TableError(
                    f"{path} is not a results file of this project ({type(exc).__name__}); delete it "
                    "to recompute that task"
                ) from None
        return rows


SUMMARY_METRICS = (
    "snr_db",
    "correlation",
    "log_mel_l1",
    "mcd_db",
    "f0_rmse_cents",
    "voicing_agreement",
    "pesq_wb",
    "stoi",
    "wer",
    "wer_pocketsphinx",
)


WORST_OF = ("pesq_wb", "stoi")  # higher is better for both


def summarize(rows: list[dict]) -> list[dict]:
    """Per backend (in the rows' order): the median of each metric over the sentences where it was computable, and
    how many; the worst PESQ-WB and STOI; the mean WER."""
    table = []
    for backend in dict.fromkeys(r["backend"] for r in rows):
        mine = [r for r in rows if r["backend"] == backend]
        entry = {"backend": backend, "sentences": len(mine)}
        entry["same_length"] = sum(r["samples_vs_reference"] == 0 for r in mine)
        entry["non_finite"] = sum(not r.get("finite", True) for r in mine)
        for metric in SUMMARY_METRICS:
            values = [r[metric] for r in mine if r.get(metric) is not None and np.isfinite(r[metric])]
            entry[metric] = float(np.median(values)) if values else None
        for metric in WORST_OF:  # the bars of NOTES/performance.md hold on every sentence, not on the median
            values = [r[metric] for r in mine if r.get(metric) is not None and np.isfinite(r[metric])]
            entry[f"{metric}_worst"] = float(min(values)) if values else None
        wers = [r["wer"] for r in mine if r.get("wer") is not None]
        entry["wer_mean"] = float(np.mean(wers)) if wers else None  # WER's median hides the few errors
        table.append(entry)
    return table
