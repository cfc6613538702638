"""`kokoro-tvm compile`, `gpu-build` and `gpu-check`: artifacts into the cache, GPU sources, device checks."""

from __future__ import annotations

import logging

from kokoro_tvm.cli.options import (
    BUCKETS_HELP,
    add_precision,
    add_weights,
    batch_sizes,
    command,
    positive_int,
    positive_seconds,
    python_version,
)
from kokoro_tvm.commands import bundle_transfer
from kokoro_tvm.runtime.devices import DEVICES

log = logging.getLogger("kokoro_tvm.cli")


def _add_compile(sub) -> None:
    parser = sub.add_parser("compile", help="precompile every artifact of a bucket set into the cache")
    parser.add_argument("--buckets", default="default", help=BUCKETS_HELP.split(" or 'exact'")[0])
    add_precision(parser)
    add_weights(parser)
    parser.add_argument(
        "--prune",
        action="store_true",
        help="first remove the cache's artifacts built from other build sources or by another TVM (what an update "
        "or an edit leaves behind; another checkout sharing the cache rebuilds its own)",
    )
    parser.set_defaults(func=command("compile_builds"))


def _add_tune(sub) -> None:
    parser = sub.add_parser("tune", help="measure this CPU's schedules once and write its tuning record")
    parser.add_argument(
        "--precision", default="fp32,bf16,int8", help="comma-separated precisions (those this CPU runs; default all)"
    )
    parser.add_argument("--budget", type=positive_seconds, default=360.0, help="seconds of measuring (default 360)")
    parser.add_argument("--threads", type=positive_int, default=2, help="threads to time with (default 2)")
    parser.add_argument("--out", help="folder for the record (default: the cache; kokoro_tvm/data/tuning to commit)")
    parser.add_argument(
        "--gain",
        metavar="PRECISION",
        help="instead: time the model at PRECISION built with this CPU's record against the heuristics' builds",
    )
    parser.add_argument("--text", help="with --gain: the text (default: bench's sentence)")
    parser.add_argument("--runs", type=positive_int, default=5, help="with --gain: interleaved rounds (default 5)")
    add_weights(parser)
    parser.set_defaults(func=command("tune"))


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
    parser.set_defaults(func=command("gpu_build"))


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
        default=bundle_transfer.PART_BYTES // 2**20,
        help="with --bundle-only: the most one copy to the device's machine carries (bundle.json 'parts')",
    )
    parser.add_argument(
        "--archive",
        action="store_true",
        help="with --bundle-only: also an xz archive of the bundle in parts of --part-mib (transfer/)",
    )
    parser.add_argument(
        "--batches",
        type=batch_sizes,
        metavar="B,B",
        help="batch sizes whose throughput the check measures (run_batches.py), or 'none' "
        "(default: 8,64 on a GPU, none on the CPU)",
    )
    parser.add_argument("--score", metavar="RESULTS", help="score run_bundle.py's results folder against OUT/bundle")
    add_weights(parser)
    parser.set_defaults(func=command("gpu_check"))


COMMANDS = (_add_compile, _add_tune, _add_gpu_build, _add_gpu_check)  # each adds its subcommand to `kokoro-tvm`
