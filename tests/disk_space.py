"""The free disk `make test` needs, checked once before any test runs (tests/conftest.py): a full disk midway
through the run shows as dozens of unrelated build errors and pytest-xdist internal errors, not as its cause."""

import shutil
from pathlib import Path

# What one fresh-clone run writes besides the venv, measured on the 2-core Zen 4 on 2026-11-29: the real-weights
# builds in the artifact cache, 3.9 GB, and pytest's temporary folders (the unit cache, copies), 2.4 GB; with
# room for the notebooks' outputs and the compilers' own temporaries.
NEEDED_BYTES = 8 * 2**30


def _existing(path: Path) -> Path:
    """`path`, or its nearest parent that exists (the cache folder may not be made yet)."""
    path = Path(path).expanduser().absolute()
    while not path.exists():
        path = path.parent
    return path


def shortfall(folders, needed: int = NEEDED_BYTES) -> str | None:
    """One line naming the first of `folders` whose file system has less than `needed` bytes free, else None."""
    for folder in folders:
        free = shutil.disk_usage(_existing(folder)).free
        if free < needed:
            return (
                f"only {free / 2**30:.1f} GiB free under {folder}; the test run writes about {needed / 2**30:.0f} GiB "
                "there (builds, temporary folders): free some space first (`kokoro-tvm compile --prune` removes the "
                "cache's artifacts of other build sources)"
            )
    return None
