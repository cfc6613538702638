"""`kokoro-tvm say`, `compare` and `bench`: text in, audio or numbers out."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from kokoro_tvm import __version__
from kokoro_tvm.cli.options import (
    BUCKETS_HELP,
    add_device,
    add_precision,
    add_voice,
    add_weights,
    positive_int,
    precision_help,
)
from kokoro_tvm.components import TIMED_PRECISIONS
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import writing
from kokoro_tvm.runtime.audio_io import WAV_FORMATS, WavStream, encode, write_wav
from kokoro_tvm.synthesis import BACKENDS, synthesize, synthesize_stream

log = logging.getLogger("kokoro_tvm.cli")

STDOUT = "-"  # `-o -`: raw samples to standard output, for a player (e.g. `ffplay -f f32le -ar 24000 -`)


def _speech_options(args: argparse.Namespace) -> dict:
    return dict(
        **({"phonemes": args.text} if args.phonemes else {"text": args.text}),
        voice=args.voice,
        speed=args.speed,
        noise="zero" if args.zero_noise else args.seed,
        backend=args.backend,
        weights=args.weights,
        buckets=args.buckets,
        device=args.device,
        precision=args.precision,
        language=args.lang,
    )


def say(args: argparse.Namespace) -> int:
    if args.stream:
        return say_stream(args)
    start = time.perf_counter()
    speech = synthesize(**_speech_options(args))
    metadata = dict(speech.metadata, wav_format=args.format, kokoro_tvm=__version__)
    if args.output == STDOUT:
        sys.stdout.buffer.write(encode(speech.audio, args.format).tobytes())
        sys.stdout.buffer.flush()
        return 0
    with writing(args.output):
        path = write_wav(args.output, speech.audio, speech.metadata["sample_rate"], fmt=args.format, metadata=metadata)
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


def say_stream(args: argparse.Namespace) -> int:
    """`say --stream`: each piece written as soon as it is spoken: raw samples to stdout (`-o -`), or into a WAV
    whose header gets its sizes when the stream ends."""
    start = time.perf_counter()
    stream = synthesize_stream(**_speech_options(args))  # bad input fails here, before anything is written
    first = None
    if args.output == STDOUT:
        for piece in stream:
            sys.stdout.buffer.write(encode(piece, args.format).tobytes())
            sys.stdout.buffer.flush()
            first = first or time.perf_counter() - start
    else:
        with writing(args.output), WavStream(args.output, SAMPLE_RATE, args.format) as wav:
            for piece in stream:
                wav.write(piece)
                first = first or time.perf_counter() - start
            metadata = dict(stream.metadata(), wav_format=args.format, kokoro_tvm=__version__)
            wav.path.with_suffix(".json").write_text(json.dumps(metadata, indent=1, ensure_ascii=False) + "\n")
        print(wav.path)
    log.info(
        "streamed %d piece(s) to %s: first after %.2f s, all after %.2f s",
        len(stream.pieces),
        args.output,
        first,
        time.perf_counter() - start,
    )
    return 0


def compare(args: argparse.Namespace) -> int:
    from kokoro_tvm.evaluation.parity import compare_text  # (deferred: Whisper and the reference model)

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
    return _print_record(record, args.json)


def first_audio_record(args: argparse.Namespace) -> dict:
    from kokoro_tvm.tools import latency  # (deferred: scipy.signal and .stats, 0.8 s of every `say`'s start)

    peers = {"all": latency.STREAM_PEERS, "none": ()}.get(args.peers.strip())
    if peers is None:
        peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    return latency.first_audio(
        args.text or latency.DEFAULT_PARAGRAPH,
        voice=args.voice,
        threads=args.threads,
        runs=args.runs,
        warmup=args.warmup,
        precisions=args.precision,
        peers=peers,
        weights=args.weights,
    )


def _print_record(record: dict, one_line: bool) -> int:
    print(json.dumps(record) if one_line else json.dumps(record, indent=1))
    return 0


def run_bench(args: argparse.Namespace) -> int:
    from kokoro_tvm.tools.bench import DEFAULT_TEXT, bench  # (deferred: scipy.signal and .stats, as above)
    from kokoro_tvm.tools.peers import parse_peers  # (deferred: torch, which the other commands may not need)

    if args.first_audio:
        return _print_record(first_audio_record(args), args.json)
    record = bench(
        args.text or DEFAULT_TEXT,
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
    return _print_record(record, args.json)


def _add_say(sub) -> None:
    parser = sub.add_parser("say", help="synthesize speech into a WAV file")
    parser.add_argument("text", help="English text (or phonemes with --phonemes)")
    parser.add_argument("-o", "--output", required=True, help="WAV file to write; '-': raw --format samples to stdout")
    parser.add_argument(
        "--stream",
        action="store_true",
        help="write each piece as soon as it is spoken (the first ends at the first clause or sentence end)",
    )
    add_voice(parser)
    parser.add_argument("--speed", type=float, default=1.0)
    parser.add_argument("--backend", choices=BACKENDS, default="torch")
    parser.add_argument("--buckets", default="default", help=BUCKETS_HELP)
    parser.add_argument("--phonemes", action="store_true", help="TEXT is a Kokoro phoneme string")
    parser.add_argument("--seed", type=int, default=0, help="seed of SineGen's noise (default 0)")
    parser.add_argument("--zero-noise", action="store_true", help="no SineGen noise at all")
    parser.add_argument("--format", choices=WAV_FORMATS, default="float32", help="WAV sample format")
    add_weights(parser)
    add_device(parser)
    add_precision(parser)
    parser.set_defaults(func=say)


def _add_compare(sub) -> None:
    parser = sub.add_parser("compare", help="TVM against PyTorch pt.dynamic on one utterance, same noise")
    parser.add_argument("--text", required=True)
    add_voice(parser)
    add_precision(parser, "TVM's arithmetic, always against pt.dynamic in fp32 (fp64: in fp64)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the SineGen noise both backends get")
    parser.add_argument("--bucket", type=int, help="pad the aligned-frame axis to N frames (default: exact)")
    parser.add_argument(
        "--buckets", default="exact", help="TVM's shapes: 'exact' (default), a bucket set, or 'dynamic' (as for say)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--no-asr", action="store_true", help="skip Whisper's word error rate on both audios")
    add_weights(parser)
    add_device(parser)
    parser.set_defaults(func=compare)


def _add_bench(sub) -> None:
    parser = sub.add_parser("bench", help="TVM and its peers (PyTorch, torch.compile, ONNX Runtime) on one utterance")
    parser.add_argument("--text", help="one utterance (default: an 11-12 s sentence; --first-audio: four sentences)")
    parser.add_argument(
        "--first-audio",
        action="store_true",
        help="time to the first streamed piece and to the last, and underruns, of TVM's streams (and, with "
        "--peers, KPipeline's generator) against TVM speaking the whole text",
    )
    add_voice(parser)
    parser.add_argument("--threads", type=positive_int, default=2, help="threads for every backend (default 2)")
    parser.add_argument("--runs", type=positive_int, default=5, help="timed rounds; the median is reported")
    parser.add_argument(
        "--warmup", type=int, default=3, help="untimed rounds first (default 3: PyTorch eager needs more than one)"
    )
    parser.add_argument("--no-components", action="store_true", help="skip the per-component timings")
    parser.add_argument(
        "--buckets",
        default="default",
        help="TVM's shapes, as for say (default: dynamic); several, comma-separated, are timed in the same rounds "
        "(e.g. dynamic,bucketed,exact)",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        help="TVM's arithmetic, comma-separated for several in the same rounds (default fp32): "
        + precision_help(TIMED_PRECISIONS),
    )
    parser.add_argument(
        "--peers",
        default="all",
        help="peers timed in the same rounds, comma-separated from torch, torch_compile, ort_fp32, ort_int8 "
        "(kokoro_tvm.tools.peers.PEERS; default all; none: TVM only); with --first-audio: kpipeline",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    add_weights(parser)
    parser.set_defaults(func=run_bench)


COMMANDS = (_add_say, _add_compare, _add_bench)  # each adds its subcommand to `kokoro-tvm`
