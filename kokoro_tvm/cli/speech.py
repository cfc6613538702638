"""`kokoro-tvm say`, `compare` and `bench`: text in, audio or numbers out."""

from __future__ import annotations

import logging

from kokoro_tvm.cli.options import (
    BUCKETS_HELP,
    add_device,
    add_precision,
    add_voice,
    add_weights,
    command,
    non_negative_int,
    positive_int,
    precision_help,
)
from kokoro_tvm.components import TIMED_PRECISIONS
from kokoro_tvm.runtime.audio_io import WAV_FORMATS
from kokoro_tvm.synthesis import MAX_SPEED, MIN_SPEED
from kokoro_tvm.synthesis.backends import BACKENDS
from kokoro_tvm.synthesis.batch import DEFAULT_BATCH

log = logging.getLogger("kokoro_tvm.cli")


def _add_say(sub) -> None:
    parser = sub.add_parser("say", help="synthesize speech into a WAV file")
    parser.add_argument("text", nargs="?", help="English text (or phonemes with --phonemes)")
    parser.add_argument(
        "-o",
        "--output",
        required=True,
        help="WAV file to write ('-': raw --format samples to stdout); a folder with --batch",
    )
    parser.add_argument("--batch", metavar="FILE", help="one text per line: one WAV + sidecar each into -o DIR")
    parser.add_argument(
        "--batch-size",
        type=positive_int,
        default=DEFAULT_BATCH,
        help=f"with --batch: utterances per call of each compiled component (default {DEFAULT_BATCH})",
    )
    parser.add_argument(
        "--stream",
        action="store_true",
        help="write each piece as soon as it is spoken (the first ends at the first clause or sentence end)",
    )
    add_voice(parser)
    parser.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help=f"pace: 1 is the voice's own (default), 2 twice as fast; {MIN_SPEED} to {MAX_SPEED}",
    )
    parser.add_argument(
        "--backend", choices=BACKENDS, default="tvm", help="tvm (default: the compiled model) or torch (PyTorch eager)"
    )
    parser.add_argument("--buckets", default="default", help=BUCKETS_HELP)
    parser.add_argument("--phonemes", action="store_true", help="TEXT is a Kokoro phoneme string")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of SineGen's noise (default 0)")
    parser.add_argument("--zero-noise", action="store_true", help="no SineGen noise at all")
    parser.add_argument("--format", choices=WAV_FORMATS, default="float32", help="WAV sample format")
    add_weights(parser)
    add_device(parser)
    add_precision(parser, auto=True)
    parser.set_defaults(func=command("say"))


def _add_compare(sub) -> None:
    parser = sub.add_parser("compare", help="TVM against PyTorch pt.dynamic on one utterance, same noise")
    parser.add_argument("--text", required=True)
    add_voice(parser)
    add_precision(parser, "TVM's arithmetic, always against pt.dynamic in fp32 (fp64: in fp64)")
    parser.add_argument("--seed", type=non_negative_int, default=0, help="seed of the SineGen noise both backends get")
    parser.add_argument("--bucket", type=positive_int, help="pad the aligned-frame axis to N frames (default: exact)")
    parser.add_argument(
        "--buckets", default="exact", help="TVM's shapes: 'exact' (default), a bucket set, or 'dynamic' (as for say)"
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    parser.add_argument("--no-asr", action="store_true", help="skip Whisper's word error rate on both audios")
    add_weights(parser)
    add_device(parser)
    parser.set_defaults(func=command("compare"))


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
        "--cpu-row", metavar="FOLDER", help="also write this CPU's row of notebook 08's per-CPU table into FOLDER"
    )
    parser.add_argument(
        "--buckets",
        default="default",
        help="TVM's shapes, as for say (default: dynamic); several, comma-separated, are timed in the same rounds "
        "(e.g. dynamic,bucketed,exact)",
    )
    parser.add_argument(
        "--precision",
        help="TVM's arithmetic, comma-separated for several in the same rounds (default fp32; --kernel-split: "
        "fp32,bf16; --conv-rates: int8): " + precision_help(TIMED_PRECISIONS),
    )
    parser.add_argument(
        "--peers",
        default="all",
        help="peers timed in the same rounds, comma-separated from torch, torch_compile, ort_fp32, ort_int8 "
        "(kokoro_tvm.peers.catalog.PEERS; default all; none: TVM only); with --first-audio: kpipeline",
    )
    parser.add_argument("--json", action="store_true", help="one JSON line")
    add_weights(parser)
    _add_kernel_modes(parser)
    parser.set_defaults(func=command("bench"))


def _add_kernel_modes(parser) -> None:
    """`bench` on our kernels alone (kokoro_tvm.commands.bench_kernels) instead of on an utterance."""
    modes = parser.add_argument_group("kernels").add_mutually_exclusive_group()
    modes.add_argument("--conv-peak", action="store_true", help="the generator's main conv alone: ours and PyTorch's")
    modes.add_argument("--kernel-split", metavar="COMPONENT:LENGTH", help="a build's time by kernel group")
    modes.add_argument(
        "--conv-rates", metavar="COMPONENT:LENGTH", help="a bf16 / int8 build's packed convs against their instruction"
    )
    for name, default, what in (("steps", 48_000, "length"), ("channels", 128, "channels"), ("taps", 7, "taps")):
        parser.add_argument(f"--{name}", type=positive_int, default=default, help=f"--conv-peak's conv {what}")
    parser.add_argument("--dilation", type=positive_int, default=3, help="--conv-peak's conv dilation")


COMMANDS = (_add_say, _add_compare, _add_bench)  # each adds its subcommand to `kokoro-tvm`
