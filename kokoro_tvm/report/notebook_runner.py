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

# The FAST tier: the parameters `pipeline --fast` (and the notebook tests) pass in, per notebook, beside FAST=True,
# so that the parameters cell plus what was injected is exactly what ran. Each makes a notebook's story short
# enough for `make test` (every notebook in about 10 minutes on 2 cores): fewer lengths, sentences and rounds, the
# shapes other runs build anyway, no peer that compiles for minutes. FAST itself marks the tier: timings are
# recorded, not held to their bars (kokoro_tvm.report.claims, `full_run`).
FAST_PARAMETERS = {
    "01_export_debugging": {"TOKENS": 8, "FRAMES": 6},
    "02_converter_patching": {"TOKENS": 8, "FRAMES": 6},
    "03_masked_lstm": {"PAD_FRACTIONS": [0.0, 0.5, 0.9], "IR_STEPS": [64, 256]},
    "04_masked_adain": {"FRAMES": 6, "BUCKETS": [6, 8, 24]},
    "05_bucketing": {
        "CORPUS_STRIDE": 30,
        "LATENCY_SENTENCES": 1,
        "LATENCY_PICK": "shortest",
        "LATENCY_RUNS": 1,
        "PROFILE_TOKENS": [32],
        "PROFILE_FRAMES": [64],
        "PROFILE_RUNS": 1,
        "DYNAMIC_COMPONENTS": ["text_encoder"],
        "FLOP_TOKENS": [16, 32, 64],
        "FLOP_FRAMES": [16, 32, 64],
    },
    "06_metal_builds": {
        "TOKENS": 16,
        "FRAMES": 32,
        "CUDA_COMPONENTS": ["text_encoder"],
        "SYMBOLIC_CUDA": False,
        "QUICK_UTTERANCES": True,
    },
    "07_audio_comparison": {
        "N_SENTENCES": 2,
        "SENTENCE_PICK": "shortest",
        "N_EXACT": 0,
        "PLOT_SENTENCES": [0, 1],
        "SCHEDULER": "in-process",  # starting workers costs more than two tasks
    },
    "08_performance": {
        "TEXT": "Hello world.",
        "RUNS": 1,
        "WARMUP": 1,
        "OTHER_TEXT": None,
        "SHORT_TEXTS": [],
        "KERNEL_PROFILE": "text_encoder:32",
        "PEERS": "torch,ort_fp32,ort_int8",  # no compiling peer (1-2 min)
        "STREAM_PEERS": "kpipeline",  # not kokoro-onnx (about 5 s a call)
        "PARAGRAPH": "The boy was there when the sun rose. A rod is used to catch pink salmon.",
        "PRECISION_TEXTS": ["Hello world."],
        "PEAK_STEPS": 4_800,
        "BUDGET_GROUPS": "together",  # the budget's machinery, not its per-group answer (seven PyTorch runs)
        "BUDGET_TEXT": "Hello world.",
    },
}


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


def injected(notebook: Path, fast: bool = False, parameters: dict | None = None) -> dict:
    """What papermill passes `notebook`: with `fast`, FAST=True and the notebook's FAST set, then `parameters`
    over them; a name the notebook does not declare is refused (papermill only warns)."""
    given = {"FAST": True, **FAST_PARAMETERS.get(notebook.stem, {})} if fast else {}
    given.update(parameters or {})
    declared = declared_parameters(notebook)
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise PipelineError(f"{notebook.name} declares no parameter(s) {unknown}; it has {sorted(declared)}")
    return given


def run(only: list[str] | None = None, fast: bool = False, parameters: dict | None = None) -> list[Path]:
    """Execute notebooks in order; returns the executed copies."""
    import papermill

    from kokoro_tvm.report.kernel import KERNEL_MANAGER  # (jupyter_client, as papermill)

    executed, chosen, started = [], notebooks(only), time.perf_counter()
    for number, notebook in enumerate(chosen, 1):
        given = injected(notebook, fast, parameters)
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
                kernel_manager_class=KERNEL_MANAGER,
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
