"""`kokoro-tvm sweep NOTEBOOK -p NAME v1,v2 [-p ...]`: one papermill run of a notebook per point of a parameter
grid, each a Dask task (kokoro_tvm.scale.cluster), each into its own folder `outputs/sweeps/<notebook>/<point>/`
(the executed notebook, metrics.json, figures: $KOKORO_TVM_RUN_DIR points the notebook's outputs there), so no
point overwrites another or the pipeline's own `outputs/<notebook>/`.

- Grid (`grid`): the product of every `-p` list; a value is read as a Python literal where it is one (`1`,
  `True`, `None`), else kept as a string. A name the notebook's parameters cell does not declare is one line before
  any run.
- A point that fails (a cell raises) is recorded with its error line; the others go on. Dask does not retry it: the
  error is the notebook's, not the worker's.
- The sweep table (`outputs/sweeps/<notebook>/sweep.json`): one row per point, its parameters, status, error,
  seconds and each of its findings (metrics.json's claims); the report lists it (kokoro_tvm.report.index_page).
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import logging
import os
import re
import time
from pathlib import Path

from kokoro_tvm.errors import InputError
from kokoro_tvm.paths import RUN_DIR_ENV, outputs_dir
from kokoro_tvm.report.index_page import write_index
from kokoro_tvm.report.notebook_runner import NOTEBOOK_DIR, declared_parameters, injected, notebooks
from kokoro_tvm.scale.cluster import IN_PROCESS, LOCAL, ClusterError, check_workers, completed, dask_client

log = logging.getLogger(__name__)

SWEEPS = "sweeps"


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def grid(parameters: list[tuple[str, str]], declared: dict) -> list[dict]:
    """Every point of the grid of `parameters` ([(NAME, "v1,v2"), ...]), checked against the notebook's
    `declared` parameters."""
    names = [name for name, _values in parameters]
    unknown = sorted(set(names) - set(declared))
    if unknown or len(set(names)) != len(names):
        raise InputError(
            f"sweep parameters must be distinct names the notebook declares ({', '.join(declared)}); "
            f"got {', '.join(names)}"
        )
    values = [[_literal(v.strip()) for v in spec.split(",") if v.strip()] for _name, spec in parameters]
    if any(not v for v in values):
        raise InputError("every -p NAME takes at least one value")
    return [dict(zip(names, combo, strict=True)) for combo in itertools.product(*values)]


def point_name(point: dict) -> str:
    """A folder name for a grid point: NAME=value pairs joined by __, anything but letters, digits and . - _ =
    made `_`."""
    return "__".join(re.sub(r"[^A-Za-z0-9._=-]", "_", f"{name}={value}") for name, value in point.items())


def run_point(notebook: str, point: dict, folder: str, fast: bool = False) -> dict:
    """One papermill run of `notebook` with `point` (over the notebook's FAST set with `fast`) into `folder` (runs
    on a worker, one task at a time there): the point's row of the sweep table."""
    import papermill

    from kokoro_tvm.report.kernel import KERNEL_MANAGER  # (jupyter_client, as papermill)

    path, out = NOTEBOOK_DIR / notebook, Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    previous, start = os.environ.get(RUN_DIR_ENV), time.perf_counter()
    os.environ[RUN_DIR_ENV] = str(out)  # the kernel papermill starts inherits it
    row = {"point": point_name(point), "parameters": point, "folder": str(out), "status": "ok", "error": None}
    try:
        papermill.execute_notebook(
            str(path),
            str(out / path.name),
            parameters=injected(path, fast, point),
            cwd=str(NOTEBOOK_DIR),
            progress_bar=False,
            kernel_name="python3",
            kernel_manager_class=KERNEL_MANAGER,
        )
    except papermill.PapermillExecutionError as exc:
        row.update(status="failed", error=f"{exc.ename}: {str(exc.evalue).splitlines()[0] if exc.evalue else ''}")
    finally:
        if previous is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = previous
    metrics = out / "metrics.json"
    row["claims"] = json.loads(metrics.read_text()).get("claims", []) if metrics.exists() else []
    row["seconds"] = time.perf_counter() - start
    return row


def sweep(
    notebook: str,
    parameters: list[tuple[str, str]],
    scheduler: str | None = None,
    workers: int | None = None,
    fast: bool = False,
    out: Path | None = None,
) -> dict:
    """Run every grid point (module docstring); returns the sweep record, also written as sweep.json."""
    if scheduler == IN_PROCESS:
        raise ClusterError(f"sweep runs its points on Dask: --scheduler is an address or {LOCAL!r}, not {IN_PROCESS!r}")
    (path,) = notebooks([notebook])
    points = grid(parameters, declared_parameters(path))
    root = Path(out) if out else outputs_dir() / SWEEPS / path.stem
    start, rows = time.perf_counter(), []
    with dask_client(scheduler, workers) as client:
        check_workers(client)
        futures = [
            client.submit(run_point, path.name, point, str(root / point_name(point)), fast, pure=False, retries=0)
            for point in points
        ]
        for future in completed(client, futures):
            if future.status == "finished":
                rows.append(future.result())
            else:  # the worker died: the notebook never reported
                error = future.exception()
                point = points[futures.index(future)]
                rows.append(
                    {
                        "point": point_name(point),
                        "parameters": point,
                        "status": "failed",
                        "claims": [],
                        "error": f"{type(error).__name__}: {error}".splitlines()[0],
                    }
                )
            log.info("sweep %s: %s %s", path.stem, rows[-1]["point"], rows[-1]["status"])
    order = {point_name(point): index for index, point in enumerate(points)}
    rows.sort(key=lambda row: order[row["point"]])
    record = {"notebook": path.stem, "points": rows, "seconds": time.perf_counter() - start}
    root.mkdir(parents=True, exist_ok=True)
    (root / "sweep.json").write_text(json.dumps(record, indent=1, default=str) + "\n")
    if out is None:
        write_index()  # the report's sweep table
    return record


def run(args: argparse.Namespace) -> int:
    record = sweep(args.notebook, [tuple(p) for p in args.parameter], args.scheduler, args.workers, args.fast)
    for row in record["points"]:
        held = sum(1 for c in row["claims"] if c.get("passed"))
        print(
            f"{row['point']}: {row['status']}, {held}/{len(row['claims'])} findings hold"
            + (f"; {row['error']}" if row["error"] else "")
        )
    return 0 if all(row["status"] == "ok" for row in record["points"]) else 1
