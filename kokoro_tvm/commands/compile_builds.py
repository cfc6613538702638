"""`kokoro-tvm compile`: every artifact of a bucket set, or the symbolic-length builds, built ahead of time into
the cache (kokoro_tvm.compiler.precompile)."""

from __future__ import annotations

import argparse
import json
import logging

from kokoro_tvm.artifacts import build_source_digest, prune_artifacts
from kokoro_tvm.compiled import check_precision
from kokoro_tvm.paths import cache_dir
from kokoro_tvm.runtime import ready
from kokoro_tvm.runtime.buckets import parse_buckets

log = logging.getLogger("kokoro_tvm.cli")


def run(args: argparse.Namespace) -> int:
    import torch  # (deferred: torch loads only for the commands that build)

    from kokoro_tvm.compiler.precompile import precompile
    from kokoro_tvm.weights.resolve import load_kmodel

    buckets = parse_buckets(args.buckets)  # a bad spec fails before the weights load
    chosen = check_precision(args.precision)  # so does a CPU without bf16
    if args.prune:
        prune()
    log.info("precompiling %s (%d artifacts, %s)", buckets.describe(), buckets.artifacts, args.precision)
    model, info = load_kmodel(args.weights, dtype=getattr(torch, chosen.dtype))
    records = precompile(model, info.fingerprint, buckets, chosen.dtype, not args.quiet, chosen.arithmetic)
    for record in records:
        print(json.dumps(record))
    built = [r for r in records if not r["cached"]]
    log.info(
        "%d artifacts: %d built in %.0f s, %d already cached; %.1f MB of libraries",
        len(records),
        len(built),
        sum(r["seconds"] for r in built),
        len(records) - len(built),
        sum(r["library_bytes"] for r in records) / 1e6,
    )
    return 0


def prune() -> None:
    """Remove the cache's stale artifacts (kokoro_tvm.artifacts.prune_artifacts) and say how many, in one line."""
    import tvm

    folder = cache_dir() / "artifacts"
    removed, freed = prune_artifacts(folder, build_source_digest(), tvm.__version__)
    entries = ready.prune_entries()
    log.info(
        "pruned %d artifacts of other build sources or TVM versions from %s (%.1f GB freed) and %d ready-index "
        "entries naming removed builds",
        removed,
        folder,
        freed / 1e9,
        entries,
    )
