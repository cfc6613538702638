"""`kokoro-tvm tune`: measure this machine's schedules once (kokoro_tvm.compiler.tuning) and write its record
into the cache, or with `--out` into a folder (kokoro_tvm/data/tuning/ to commit it for a CPU family)."""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
from pathlib import Path

from kokoro_tvm import __version__
from kokoro_tvm.errors import InputError

log = logging.getLogger("kokoro_tvm.cli")


def commit() -> str | None:
    """The repository's commit where the package runs from a checkout (a record says what it was tuned on)."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


def run(args: argparse.Namespace) -> int:
    import torch  # (deferred: torch loads only for the commands that build)
    import tvm
    from tqdm.auto import tqdm

    from kokoro_tvm.compiled import runs_here
    from kokoro_tvm.compiler.targets import host_target
    from kokoro_tvm.compiler.tuning import record as tuning
    from kokoro_tvm.compiler.tuning import tuner
    from kokoro_tvm.timing import set_threads
    from kokoro_tvm.weights.resolve import load_kmodel

    requested = [p.strip() for p in args.precision.split(",") if p.strip()]
    precisions = [p for p in requested if runs_here(p)]
    if not precisions:
        raise InputError(f"this CPU runs none of {', '.join(requested)}: tune --precision fp32")
    skipped = sorted(set(requested) - set(precisions))
    if skipped:
        log.info("this CPU does not run %s: not tuned", ", ".join(skipped))
    set_threads(args.threads)
    model, _ = load_kmodel(args.weights, dtype=torch.float32)
    log.info("tuning %s on %s within %.0f s of measuring", ", ".join(precisions), tuning.cpu_identity(), args.budget)

    def progress(items):
        return tqdm(list(items), desc="tune", unit="class", disable=args.quiet)

    record = tuner.tune(model, host_target(), precisions, args.budget, progress)
    record.tuned.update(kokoro_tvm=__version__, tvm=tvm.__version__, commit=commit(), threads=args.threads)
    path = record.save(Path(args.out) if args.out else tuning.user_folder())
    fastest = record.fastest_precision(precisions)
    log.info(
        "%d of %d classes measured in %.0f s (export %.0f s), %d tiles changed, %d packed classes kept float32; "
        "fastest here: %s; wrote %s",
        record.tuned["measured"],
        record.tuned["classes"],
        record.tuned["measure_s"],
        record.tuned["export_s"],
        len(record.choices),
        sum(not keep for keep in record.packed.values()),
        fastest,
        path,
    )
    print(json.dumps({"record": str(path), "fastest": fastest, **record.tuned}))
    return 0
