"""Where things are written: the on-disk cache and the per-notebook output folders."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "KOKORO_TVM_CACHE"
OUTPUTS_ENV = "KOKORO_TVM_OUTPUTS"
REPO_ROOT = Path(__file__).resolve().parent.parent


def cache_dir() -> Path:
    """Cache for recovered weights and compiled artifacts: $KOKORO_TVM_CACHE or ~/.cache/kokoro-tvm."""
    path = Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "kokoro-tvm").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def outputs_dir() -> Path:
    """Run products: $KOKORO_TVM_OUTPUTS or the repository's outputs/ folder."""
    path = Path(os.environ.get(OUTPUTS_ENV) or REPO_ROOT / "outputs").expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


def notebook_output_dir(notebook: str) -> Path:
    """outputs/<notebook>/ for one notebook's executed copy, metrics.json, figures and WAVs."""
    path = outputs_dir() / Path(notebook).stem
    path.mkdir(parents=True, exist_ok=True)
    return path
