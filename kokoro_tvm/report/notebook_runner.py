"""Run the numbered notebooks in order with papermill into outputs/<notebook>/, then the shared report.

Unknown parameter names are rejected (papermill only warns), and a failing notebook stops the run with a
message naming the notebook and the cell. After the notebooks, outputs/index.html and outputs/summary.json are
rewritten over everything in outputs/ (kokoro_tvm.report.index_page).
"""

from __future__ import annotations

import ast
import json
import logging
import time
from pathlib import Path

from kokoro_tvm.errors import KokoroTVMError
from kokoro_tvm.paths import REPO_ROOT, notebook_output_dir
from kokoro_tvm.report.index_page import write_index

log = logging.getLogger(__name__)

NOTEBOOK_DIR = REPO_ROOT / "notebooks"


class PipelineError(KokoroTVMError, RuntimeError):
    """A notebook of the pipeline failed; the message names it and its executed copy."""


def notebooks(only: list[str] | None = None) -> list[Path]:
    """Numbered notebooks in order; `only` selects by number prefix ('01') or stem."""
    found = sorted(NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))
    if only:
        wanted = set(only)
        found = [p for p in found if p.stem in wanted or p.stem[:2] in wanted]
        missing = wanted - {p.stem for p in found} - {p.stem[:2] for p in found}
        if missing:
            raise PipelineError(f"no notebook matches {sorted(missing)}")
    return found


def declared_parameters(notebook: Path) -> dict:
    """Names and literal values of the notebook's one cell tagged 'parameters'."""
    cells = json.loads(notebook.read_text())["cells"]
    tagged = [c for c in cells if "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(tagged) != 1:
        raise PipelineError(f"{notebook.name} must have exactly one cell tagged 'parameters', has {len(tagged)}")
    values = {}
    for node in ast.parse("".join(tagged[0]["source"])).body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)):
            raise PipelineError(f"{notebook.name}: the parameters cell may only assign literals")
        values[node.targets[0].id] = ast.literal_eval(node.value)
    return values


def run(only: list[str] | None = None, fast: bool = False, parameters: dict | None = None) -> list[Path]:
    """Execute notebooks in order; returns the executed copies."""
    import papermill

    executed, chosen, started = [], notebooks(only), time.perf_counter()
    for number, notebook in enumerate(chosen, 1):
        declared = declared_parameters(notebook)
        given = dict(parameters or {})
        if fast:
            given["FAST"] = True
        unknown = sorted(set(given) - set(declared))
        if unknown:
            raise PipelineError(f"{notebook.name} declares no parameter(s) {unknown}; it has {sorted(declared)}")
        out = notebook_output_dir(notebook.stem) / notebook.name
        log.info("[%d/%d] running %s%s -> %s", number, len(chosen), notebook.name, " (FAST)" if fast else "", out)
        start = time.perf_counter()
        try:
            papermill.execute_notebook(
                str(notebook),
                str(out),
                parameters=given,
                cwd=str(NOTEBOOK_DIR),
                progress_bar=False,
                kernel_name="python3",
            )
        except papermill.PapermillExecutionError as exc:
            raise PipelineError(
                f"{notebook.name} failed in cell {exc.exec_count}: {exc.ename}: {exc.evalue} (executed copy: {out})"
            ) from exc
        executed.append(out)
        log.info(
            "[%d/%d] %s done in %s (%s so far)",
            number,
            len(chosen),
            notebook.stem,
            _minutes(time.perf_counter() - start),
            _minutes(time.perf_counter() - started),
        )
    write_report()
    return executed


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:.0f} s"


def write_report() -> tuple[Path, Path]:
    """outputs/index.html and outputs/summary.json, stating the weights the notebooks resolve by default."""
    from kokoro_tvm.weights.resolve import load_weights

    info, _ = load_weights()
    return write_index(weights=info.as_dict())
