"""JupyterLab the way users explore the notebooks: `make lab` (or `kokoro-tvm lab`).

JupyterLab starts at the repository root with this environment's Python as the notebooks' kernel ("python3",
the same kernel papermill uses), so `import kokoro_tvm` works in every notebook. Saving a notebook under
notebooks/ strips its outputs and execution counts (`strip_outputs`, JupyterLab's pre-save hook): the open
session keeps showing them, the committed file stays output-free (tests/test_notebooks.py checks that), and the
shareable executed copies come from `kokoro-tvm pipeline` under outputs/.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

from kokoro_tvm.paths import REPO_ROOT

STRIPPED_FOLDER = "notebooks"


def strip_outputs(model: dict, path: str = "", contents_manager=None, **kwargs) -> None:
    """JupyterLab pre-save hook: a notebook under notebooks/ is saved without outputs or execution counts."""
    if model.get("type") != "notebook" or not str(path).lstrip("/").startswith(f"{STRIPPED_FOLDER}/"):
        return
    for cell in model["content"]["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"] = []
            cell["execution_count"] = None


def lab_command(*extra: str, root=REPO_ROOT) -> list[str]:
    """The JupyterLab command line `make lab` runs (extra arguments appended, e.g. --no-browser, --port)."""
    return [
        sys.executable,
        "-m",
        "jupyterlab",
        f"--ServerApp.root_dir={root}",
        f"--FileContentsManager.pre_save_hook={__name__}.strip_outputs",
        "--ServerApp.default_url=/lab/tree/notebooks",
        # kernels on Unix sockets in Jupyter's runtime folder (mode 0700), as `pipeline` runs them: over TCP
        # ipykernel warns at each start that their traffic "is susceptible to eavesdropping"
        "--KernelManager.transport=ipc",
        *extra,
    ]


def run(args: argparse.Namespace) -> int:
    return subprocess.call(lab_command(*args.jupyter_args))
