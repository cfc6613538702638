"""`kokoro-tvm` command line: say, compile, gpu-build, gpu-check, compare, bench, pipeline, lab, voices, weights.

Bad input (empty text, unknown voice or symbols, a missing or corrupt weights file) ends with one clear
`kokoro-tvm: error: ...` line on stderr and exit status 2, never a traceback.
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from pathlib import Path

from kokoro_tvm import __version__, paths
from kokoro_tvm._packages import MissingPackageError
from kokoro_tvm.artifacts import ArtifactError
from kokoro_tvm.compiler.gpu_sources import build_components
from kokoro_tvm.components import NAMES, lengths_for
from kokoro_tvm.frontend.g2p import G2PUnavailableError
from kokoro_tvm.frontend.text import TextError
from kokoro_tvm.frontend.voices import (
    DEFAULT_VOICE,
    UnknownVoiceError,
    VoicePackError,
    fetch_official_voices,
    voice_table,
)
from kokoro_tvm.report.lab import lab_command
from kokoro_tvm.report.notebook_runner import PipelineError, run
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.runtime.bundle_runner import BundleError
from kokoro_tvm.runtime.devices import DEVICES, require_device
from kokoro_tvm.synthesis import BACKENDS, synthesize
from kokoro_tvm.tools import gpu_check
from kokoro_tvm.tools.bench import DEFAULT_TEXT, bench
from kokoro_tvm.weights.onnx_int8 import CorruptModelError

log = logging.getLogger("kokoro_tvm.cli")

EXIT_USAGE = 2
LANG_HELP = (
    "the text's language as a Kokoro code (a: American English, b: British, e, f, h, i, p, j, z); default: the "
    "voice name's first letter, as kokoro's KPipeline does"
)


def _user_errors() -> tuple[type[BaseException], ...]:
    from kokoro_tvm.weights.resolve import WeightsError

    return (
        TextError,
        UnknownVoiceError,
        VoicePackError,
        G2PUnavailableError,
        WeightsError,
        CorruptModelError,
        MissingPackageError,
        ArtifactError,
        PipelineError,
        BundleError,
        ValueError,
        OSError,
    )


def cmd_say(args: argparse.Namespace) -> int:
    from kokoro_tvm.runtime.audio_io import write_wav

    start = time.perf_counter()
    noise = "zero" if args.zero_noise else args.seed
    kwargs = {"phonemes": args.text} if args.phonemes else {"text": args.text}
    speech = synthesize(
        **kwargs,
        voice=args.voice,
        speed=args.speed,
        noise=noise,
        backend=args.backend,
        weights=args.weights,
        buckets=args.buckets,
        device=args.device,
        precision=args.precision,
        language=args.lang,
    )
    path = write_wav(
        args.output,
        speech.audio,
        speech.metadata["sample_rate"],
        fmt=args.format,
        metadata=dict(speech.metadata, wav_format=args.format, kokoro_tvm=__version__),
    )
    log.info(
        "wrote %s: %.2f s of audio, %d chunk(s), voice %s, backend %s, weights %s (%.1f s)",
        path,
        speech.seconds,
        len(speech.chunks),
        speech.metadata["voice"],
        speech.metadata["backend"],
        speech.metadata["weights"]["source"],
        time.perf_counter() - start,
    )
    print(path)
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    import torch

    from kokoro_tvm.compiled import check_precision, resolve_precision
    from kokoro_tvm.compiler.build import precompile
    from kokoro_tvm.weights.resolve import load_kmodel

    buckets = parse_buckets(args.buckets)  # a bad spec fails before the weights load
    dtype, arithmetic = resolve_precision(args.precision)
    check_precision(arithmetic)  # so does a CPU without bf16
    log.info("precompiling %s (%d artifacts, %s)", buckets.describe(), buckets.artifacts, args.precision)
    model, info = load_kmodel(args.weights, dtype=getattr(torch, dtype))
    records = precompile(model, info.fingerprint, buckets, dtype, progress=not args.quiet, precision=arithmetic)
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


def cmd_gpu_build(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    chosen = list(NAMES) if not args.components else [c.strip() for c in args.components.split(",") if c.strip()]
    unknown = sorted(set(chosen) - set(NAMES))
    if unknown or not chosen:
        raise ValueError(f"unknown component(s) {unknown}; choose from {', '.join(NAMES)}")
    lengths = lengths_for(chosen, args.tokens, args.frames)
    model, _info = load_kmodel(args.weights)
    manifest = build_components(model, args.target, lengths, Path(args.out), export=args.export)
    failed = 0
    for entry in manifest["components"]:
        summary = {k: entry[k] for k in ("component", "length", "kernel_count", "threadgroup_sizes", "source_bytes")}
        summary.update({k: entry[k] for k in ("nvcc", "export") if k in entry}, problems=entry["problems"])
        print(json.dumps(summary))
        failed += bool(entry["problems"]) or entry.get("nvcc", {}).get("status") == "failed"
    log.info("%d component(s) built for %s into %s; %d with problems", len(lengths), args.target, args.out, failed)
    return 1 if failed else 0


def cmd_gpu_check(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    gpu_check.check_device(args.target)
    out = Path(args.out or f"outputs/gpu_check/{args.target}")
    if args.score:  # results of run_bundle.py from another machine, scored here
        print(json.dumps(gpu_check.score(out / "bundle", args.score)))
        return 0
    if args.target != "cpu" and not args.bundle_only:

        require_device(args.target)  # before any weights load or build
    model, info = load_kmodel(args.weights)
    utterances = gpu_check.default_utterances(quick=args.quick)
    if args.bundle_only:
        bundle = gpu_check.make_bundle(model, info.fingerprint, args.target, out / "bundle", utterances,
                                       with_runtime=args.runtime_kit)  # fmt: skip
        print(json.dumps({"bundle": str(out / "bundle"), "bytes": bundle["bytes"], "parts": len(bundle["parts"]),
                          "run": bundle["run"]}))  # fmt: skip
        return 0
    report = gpu_check.gpu_check(model, info.fingerprint, args.target, out, utterances, runs=args.runs)
    print(json.dumps(report))
    passed = report["all_within_tolerance"] and all(u["durations_equal_cpu"] for u in report["utterances"])
    return 0 if passed else 1


def cmd_voices(args: argparse.Namespace) -> int:

    if args.fetch:
        log.info("official voice packs in %s", fetch_official_voices())
    rows = voice_table()
    if args.json:
        for row in rows:
            print(json.dumps(row))
    else:
        for row in rows:
            print(f"{row['name']:<14} {row['language']:<21} {row['gender']:<7} {row['source']:<36} {row['sha256']}")
    return 0


def cmd_weights(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_weights

    info, _ = load_weights(args.weights)
    print(json.dumps(info.as_dict()))
    return 0


def cmd_compare(args: argparse.Namespace) -> int:
    from kokoro_tvm.evaluation.parity import compare_text

    record = compare_text(
        args.text,
        voice=args.voice,
        precision=args.precision,
        seed=args.seed,
        weights=args.weights,
        bucket=args.bucket,
        device=args.device,
        buckets=args.buckets,
        asr=not args.no_asr,
        language=args.lang,
    )
    print(json.dumps(record) if args.json else json.dumps(record, indent=1))
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    from kokoro_tvm.tools.peers import parse_peers

    record = bench(
        args.text,
        voice=args.voice,
        threads=args.threads,
        runs=args.runs,
        warmup=args.warmup,
        weights=args.weights,
        components=not args.no_components,
        buckets=args.buckets,
        peers=parse_peers(args.peers),
        precisions=args.precision,
        language=args.lang,
    )
    print(json.dumps(record) if args.json else json.dumps(record, indent=1))
    return 0


def cmd_pipeline(args: argparse.Namespace) -> int:

    only = [s.strip() for s in args.only.split(",")] if args.only else None
    for path in run(only=only, fast=args.fast):
        print(path)
    print(paths.outputs_dir() / "index.html")
    return 0


def cmd_lab(args: argparse.Namespace) -> int:


    return subprocess.call(lab_command(*args.jupyter_args))


def _positive_int(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {value}")
    return number


def build_parser() -> argparse.ArgumentParser:
    from kokoro_tvm.runtime.audio_io import WAV_FORMATS

    parser = argparse.ArgumentParser(prog="kokoro-tvm", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action="version", version=f"kokoro-tvm {__version__}")
    parser.add_argument("-q", "--quiet", action="store_true", help="log warnings and errors only")
    sub = parser.add_subparsers(dest="command", required=True)

    say = sub.add_parser("say", help="synthesize speech into a WAV file")
    say.add_argument("text", help="English text (or phonemes with --phonemes)")
    say.add_argument("-o", "--output", required=True, help="WAV file to write")
    say.add_argument(
        "--voice",
        default=DEFAULT_VOICE,
        help=f"a voice name (`kokoro-tvm voices`; default {DEFAULT_VOICE}) or a .bin/.npz/.pt pack file",
    )
    say.add_argument("--lang", help=LANG_HELP)
    say.add_argument("--speed", type=float, default=1.0)
    say.add_argument("--backend", choices=BACKENDS, default="torch")
    say.add_argument(
        "--buckets",
        default="default",
        help="TVM shapes: 'default' (= dynamic: one symbolic-length build per component), 'bucketed' (the chosen "
        "bucket set, geo1.25), a named set (pow2, geo1.5, geo1.25, earlier, align32), 'tokens=..;frames=..' or "
        "'exact' (one build per length)",
    )
    say.add_argument("--phonemes", action="store_true", help="TEXT is a Kokoro phoneme string")
    say.add_argument("--seed", type=int, default=0, help="seed of SineGen's noise (default 0)")
    say.add_argument("--zero-noise", action="store_true", help="no SineGen noise at all")
    say.add_argument("--format", choices=WAV_FORMATS, default="float32", help="WAV sample format")
    say.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    say.add_argument("--device", choices=DEVICES, default="cpu", help="where TVM runs (metal/cuda: where one exists)")
    say.add_argument(
        "--precision",
        choices=("fp32", "bf16", "int8"),
        default="fp32",
        help="TVM's arithmetic (bf16: AVX512_BF16 CPUs; int8: the generator's resblocks in int8, AVX512_VNNI)",
    )
    say.set_defaults(func=cmd_say)

    gpu = sub.add_parser("gpu-build", help="build every component for Metal or CUDA; save and check the sources")
    gpu.add_argument("--target", choices=("metal", "cuda"), default="metal")
    gpu.add_argument("--tokens", type=_positive_int, default=32, help="token-axis length (default 32)")
    gpu.add_argument("--frames", type=_positive_int, default=64, help="frame-axis length (default 64)")
    gpu.add_argument("--components", help="comma-separated subset (default: all five)")
    gpu.add_argument("--out", default="outputs/06_metal_builds/sources", help="folder for sources + manifest")
    gpu.add_argument("--export", action="store_true", help="also export a Metal library (macOS only)")
    gpu.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    gpu.set_defaults(func=cmd_gpu_build)

    check = sub.add_parser(
        "gpu-check", help="run every component on a device against the CPU build's outputs (a check bundle)"
    )
    check.add_argument("--target", choices=("cuda", "metal", "cpu"), default="cuda", help="cpu: the check of the check")
    check.add_argument("--out", help="folder for bundle/, results/ and report.json (default outputs/gpu_check/TARGET)")
    check.add_argument("--quick", action="store_true", help="one short utterance instead of three")
    check.add_argument("--runs", type=_positive_int, default=10, help="timed calls per component (default 10)")
    check.add_argument("--bundle-only", action="store_true", help="only write the bundle (to run elsewhere)")
    check.add_argument("--runtime-kit", action="store_true", help="with --bundle-only: carry TVM's runtime too")
    check.add_argument("--score", metavar="RESULTS", help="score run_bundle.py's results folder against OUT/bundle")
    check.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    check.set_defaults(func=cmd_gpu_check)

    compile_ = sub.add_parser("compile", help="precompile every artifact of a bucket set into the cache")
    compile_.add_argument(
        "--buckets",
        default="default",
        help="as for say: 'default' (= dynamic, 5 symbolic builds), 'bucketed', a set name or 'tokens=..;frames=..'",
    )
    compile_.add_argument("--precision", choices=("fp32", "fp64", "bf16", "int8"), default="fp32")
    compile_.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    compile_.set_defaults(func=cmd_compile)

    compare = sub.add_parser("compare", help="TVM against PyTorch pt.dynamic on one utterance, same noise")
    compare.add_argument("--text", required=True)
    compare.add_argument("--voice", default=DEFAULT_VOICE)
    compare.add_argument("--lang", help=LANG_HELP)
    compare.add_argument(
        "--precision",
        choices=("fp32", "fp64", "bf16", "int8"),
        default="fp32",
        help="bf16, int8: against pt.dynamic in fp32",
    )
    compare.add_argument("--seed", type=int, default=0, help="seed of the SineGen noise both backends get")
    compare.add_argument("--bucket", type=int, help="pad the aligned-frame axis to N frames (default: exact)")
    compare.add_argument(
        "--buckets", default="exact", help="TVM's shapes: 'exact' (default), a bucket set, or 'dynamic' (as for say)"
    )
    compare.add_argument("--json", action="store_true", help="one JSON line")
    compare.add_argument("--no-asr", action="store_true", help="skip Whisper's word error rate on both audios")
    compare.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    compare.add_argument("--device", choices=DEVICES, default="cpu", help="where TVM runs (where one exists)")
    compare.set_defaults(func=cmd_compare)


    bench = sub.add_parser("bench", help="TVM and its peers (PyTorch, torch.compile, ONNX Runtime) on one utterance")
    bench.add_argument("--text", default=DEFAULT_TEXT, help="one utterance (default: an 11-12 s sentence)")
    bench.add_argument("--voice", default=DEFAULT_VOICE)
    bench.add_argument("--lang", help=LANG_HELP)
    bench.add_argument("--threads", type=_positive_int, default=2, help="threads for every backend (default 2)")
    bench.add_argument("--runs", type=_positive_int, default=5, help="timed rounds; the median is reported")
    bench.add_argument(
        "--warmup", type=int, default=3, help="untimed rounds first (default 3: PyTorch eager needs more than one)"
    )
    bench.add_argument("--no-components", action="store_true", help="skip the per-component timings")
    bench.add_argument(
        "--buckets",
        default="default",
        help="TVM's shapes, as for say (default: dynamic); several, comma-separated, are timed in the "
        "same rounds (e.g. dynamic,bucketed,exact)",
    )
    bench.add_argument(
        "--precision",
        default="fp32",
        help="TVM's arithmetic, comma-separated for several in the same rounds (fp32, bf16, int8; default fp32)",
    )
    bench.add_argument(
        "--peers",
        default="all",
        help="peers timed in the same rounds, comma-separated from torch, torch_compile, ort_fp32, ort_int8 "
        "(default all; none: TVM only)",
    )
    bench.add_argument("--json", action="store_true", help="one JSON line")
    bench.add_argument("--weights", help="a kokoro-v1_0.pth-style weights file (default: resolved)")
    bench.set_defaults(func=cmd_bench)

    pipeline = sub.add_parser("pipeline", help="run the numbered notebooks in order with papermill")
    pipeline.add_argument("--fast", action="store_true", help="FAST=True in every notebook")
    pipeline.add_argument("--only", help="comma-separated notebook numbers, e.g. 01,02")
    pipeline.set_defaults(func=cmd_pipeline)

    lab = sub.add_parser("lab", help="JupyterLab on notebooks/ (this environment's kernel; saved without outputs)")
    lab.add_argument("jupyter_args", nargs=argparse.REMAINDER, help="passed to jupyter lab, e.g. --no-browser")
    lab.set_defaults(func=cmd_lab)

    voices = sub.add_parser("voices", help="list every voice: language, gender, source and sha256")
    voices.add_argument("--fetch", action="store_true", help="fetch and check the official packs first (npm)")
    voices.add_argument("--json", action="store_true", help="one JSON line per voice")
    voices.set_defaults(func=cmd_voices)

    weights = sub.add_parser("weights", help="resolve the weights and print one JSON line about them")
    weights.add_argument("--weights", help="an explicit weights file")
    weights.set_defaults(func=cmd_weights)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.WARNING if args.quiet else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        datefmt="%H:%M:%S",
    )
    try:
        return args.func(args)
    except _user_errors() as exc:
        print(f"kokoro-tvm: error: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
