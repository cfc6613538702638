"""`kokoro-tvm gpu-build`: the GPU (CUDA or Metal) sources of the components, generated and checked here
(kokoro_tvm.compiler.gpu_sources); the device itself is `gpu-check`'s."""

from __future__ import annotations

import argparse
import json
import logging

from kokoro_tvm.compiler.gpu_sources import build_components
from kokoro_tvm.components import NAMES, UnknownComponentError, lengths_for
from kokoro_tvm.errors import writable_folder

log = logging.getLogger("kokoro_tvm.cli")


def run(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    chosen = list(NAMES) if not args.components else [c.strip() for c in args.components.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(NAMES))
    if unknown or not chosen:
        raise UnknownComponentError(f"unknown component(s) {unknown}; choose from {', '.join(NAMES)}")
    lengths = lengths_for(chosen, args.tokens, args.frames)
    out = writable_folder(args.out)
    model, _info = load_kmodel(args.weights)
    manifest = build_components(model, args.target, lengths, out, export=args.export, symbolic=args.symbolic)
    failed = 0
    for entry in manifest["components"]:
        summary = {
            k: entry[k]
            for k in ("component", "length", "symbolic", "kernel_count", "threadgroup_sizes", "source_bytes")
        }
        summary.update({k: entry[k] for k in ("nvcc", "export") if k in entry}, problems=entry["problems"])
        print(json.dumps(summary))
        failed += bool(entry["problems"]) or entry.get("nvcc", {}).get("status") == "failed"
    log.info("%d component(s) built for %s into %s; %d with problems", len(lengths), args.target, out, failed)
    return 1 if failed else 0
