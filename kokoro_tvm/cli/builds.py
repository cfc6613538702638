"""`kokoro-tvm compile`, `gpu-build` and `gpu-check`: artifacts into the cache, GPU sources, device checks."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from kokoro_tvm.cli.options import BUCKETS_HELP, add_precision, add_weights, positive_int, python_version
from kokoro_tvm.compiler.gpu_sources import build_components
from kokoro_tvm.components import NAMES, UnknownComponentError, lengths_for
from kokoro_tvm.errors import writing
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.runtime.devices import DEVICES, require_device
from kokoro_tvm.tools import bundle_transfer, gpu_bundle, gpu_check

log = logging.getLogger("kokoro_tvm.cli")


def compile_artifacts(args: argparse.Namespace) -> int:
    import torch  # (deferred: torch loads only for the commands that build)

    from kokoro_tvm.compiled import check_precision
    from kokoro_tvm.compiler.precompile import precompile
    from kokoro_tvm.weights.resolve import load_kmodel

    buckets = parse_buckets(args.buckets)  # a bad spec fails before the weights load
    chosen = check_precision(args.precision)  # so does a CPU without bf16
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


def _output_folder(path: str) -> Path:
    with writing(path) as folder:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def gpu_build(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    chosen = list(NAMES) if not args.components else [c.strip() for c in args.components.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(NAMES))
    if unknown or not chosen:
        raise UnknownComponentError(f"unknown component(s) {unknown}; choose from {', '.join(NAMES)}")
    lengths = lengths_for(chosen, args.tokens, args.frames)
    out = _output_folder(args.out)
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


def check_gpu(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    gpu_bundle.check_device(args.target)
    out = Path(args.out or f"outputs/gpu_check/{args.target}")
    if args.score:  # results of run_bundle.py from another machine, scored and reported here
        report = gpu_check.report(out / "bundle", args.score)
        log.info("report written to %s", gpu_check.write_report(report))
        print(json.dumps(report))
        return 0 if _passed(report) else 1
    if args.target != "cpu" and not args.bundle_only:
        require_device(args.target)  # before any weights load or build
    out = _output_folder(out)
    model, info = load_kmodel(args.weights)
    utterances = gpu_bundle.default_utterances(quick=args.quick)
    if args.bundle_only:
        bundle = gpu_bundle.make_bundle(
            model,
            info.fingerprint,
            args.target,
            out / "bundle",
            utterances,
            with_runtime=args.runtime_kit,
            part_bytes=args.part_mib * 2**20,
            kit_python=args.kit_python,
        )
        summary = {
            "bundle": str(out / "bundle"),
            "bytes": bundle["bytes"],
            "parts": len(bundle["parts"]),
            "run": bundle["run"],
        }
        if args.archive:  # one xz archive in parts of --part-mib, with the command that unpacks it there
            summary["transfer"] = {
                "folder": str(out / "transfer"),
                **bundle_transfer.archive(out / "bundle", out / "transfer", args.part_mib * 2**20),
            }
        print(json.dumps(summary))
        return 0
    report = gpu_check.gpu_check(model, info.fingerprint, args.target, out, utterances, runs=args.runs)
    print(json.dumps(report))
    return 0 if _passed(report) else 1


def _passed(report: dict) -> bool:
    return report["all_within_tolerance"] and all(u["durations_equal_cpu"] for u in report["utterances"])


def _add_compile(sub) -> None:
    parser = sub.add_parser("compile", help="precompile every artifact of a bucket set into the cache")
    parser.add_argument("--buckets", default="default", help=BUCKETS_HELP.split(" or 'exact'")[0])
    add_precision(parser)
    add_weights(parser)
    parser.set_defaults(func=compile_artifacts)


def _add_gpu_build(sub) -> None:
    parser = sub.add_parser("gpu-build", help="build every component for Metal or CUDA; save and check the sources")
    parser.add_argument("--target", choices=("metal", "cuda"), default="metal")
    parser.add_argument("--tokens", type=positive_int, default=32, help="token-axis length (default 32)")
    parser.add_argument("--frames", type=positive_int, default=64, help="frame-axis length (default 64)")
    parser.add_argument("--components", help="comma-separated subset (default: all five)")
    parser.add_argument("--out", default="outputs/06_metal_builds/sources", help="folder for sources + manifest")
    parser.add_argument(
        "--symbolic",
        action="store_true",
        help="the symbolic-length builds the runtime uses (every length; --tokens/--frames unused)",
    )
    parser.add_argument("--export", action="store_true", help="also export a Metal library (macOS only)")
    add_weights(parser)
    parser.set_defaults(func=gpu_build)


def _add_gpu_check(sub) -> None:
    parser = sub.add_parser(
        "gpu-check", help="run every component on a device against the CPU build's outputs (a check bundle)"
    )
    parser.add_argument("--target", choices=DEVICES, default="cuda", help="cpu: the check of the check")
    parser.add_argument("--out", help="folder for bundle/, results/ and report.json (default outputs/gpu_check/TARGET)")
    parser.add_argument("--quick", action="store_true", help="one short utterance instead of three")
    parser.add_argument("--runs", type=positive_int, default=10, help="timed calls per component (default 10)")
    parser.add_argument("--bundle-only", action="store_true", help="only write the bundle (to run elsewhere)")
    parser.add_argument("--runtime-kit", action="store_true", help="with --bundle-only: carry TVM's runtime too")
    parser.add_argument(
        "--kit-python",
        metavar="X.Y",
        type=python_version,
        help="with --runtime-kit: the Python that runs it there (default: this one)",
    )
    parser.add_argument(
        "--part-mib",
        type=positive_int,
        default=gpu_bundle.PART_BYTES // 2**20,
        help="with --bundle-only: the most one copy to the device's machine carries (bundle.json 'parts')",
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="with --bundle-only: also an xz archive of the bundle in parts of --part-mib (transfer/)",
    )
    parser.add_argument("--score", metavar="RESULTS", help="score run_bundle.py's results folder against OUT/bundle")
    add_weights(parser)
    parser.set_defaults(func=check_gpu)


COMMANDS = (_add_compile, _add_gpu_build, _add_gpu_check)  # each adds its subcommand to `kokoro-tvm`
