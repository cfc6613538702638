"""Where things are written: the on-disk cache and the per-notebook output folders; and how cache files are
written safely when several processes share the cache (two notebook runs, parallel test workers).

- `temporary_sibling(path)`: a unique temporary name beside `path`: write it whole, then `os.replace` it onto
  `path`, so a reader sees the old file or the new one, never half of one.
- `cache_lock(path)`: an exclusive lock on `path`'s lock file for one process at a time: the second process waits
  for the first to finish building, then finds the result in the cache instead of building it again.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
import uuid
from pathlib import Path

CACHE_ENV = "KOKORO_TVM_CACHE"
OUTPUTS_ENV = "KOKORO_TVM_OUTPUTS"
RUN_DIR_ENV = "KOKORO_TVM_RUN_DIR"  # one sweep point's folder: every notebook output of that run goes there
WEIGHTS_ENV = "KOKORO_TVM_WEIGHTS"  # a weights file (kokoro_tvm.weights.resolve)
# "off": heuristic CPU schedules; a path: that tuning record; unset: this CPU's (kokoro_tvm.compiler.tuning.record)
TUNING_ENV = "KOKORO_TVM_TUNING"
TUNING_RECORDS = Path(__file__).resolve().parent / "data" / "tuning"  # the committed records, one per CPU family
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
    """outputs/<notebook>/ for one notebook's executed copy, metrics.json, figures and WAVs ($KOKORO_TVM_RUN_DIR
    instead when set: a sweep point's own folder, kokoro_tvm.commands.sweep)."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    path = Path(run_dir).expanduser() if run_dir else outputs_dir() / Path(notebook).stem
    path.mkdir(parents=True, exist_ok=True)
    return path


def temporary_sibling(path: Path) -> Path:
    """A fresh temporary path in `path`'s folder (same file system, so `os.replace` onto `path` is atomic)."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.partial")


@contextlib.contextmanager
def cache_lock(path: Path):
    """Hold an exclusive advisory lock on `<path>.lock` (created if missing) while the block runs."""
    lock = Path(f"{path}.lock")
    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def repository_commit() -> str | None:
    """The short commit of the checkout the package runs from (a tuning record or a bench row says what it was
    measured on); None outside a git checkout."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
