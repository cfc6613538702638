"""Time to first audio (`kokoro-tvm bench --first-audio`): how soon a streaming backend's first piece arrives
after the call, when its last one does, and whether the stream ever runs dry while it plays.

A stream plays from the moment its first piece arrives; piece k starts when piece k-1 has finished playing, or
when it arrives if that is later: then the listener hears a gap (an underrun). Every backend speaks the same
paragraph with the model loaded and warm, in one process, interleaved round by round like `bench`; the
record gives each backend's medians and the worst underrun of any round.

Backends:
- `tvm[PRECISION]`: `synthesize_stream` on the symbolic-length builds (the rule of kokoro_tvm.frontend.text.
  stream_pieces, each later piece sized by kokoro_tvm.synthesis.StreamPace as it is about to be spoken);
- `tvm_whole[PRECISION]`: `synthesize` on the same builds: the first audio is the whole text's;
- `kpipeline`: kokoro's own `KPipeline` generator on PyTorch eager (its pieces: KPipeline's chunks of up to 510
  phonemes, one per paragraph of this length);
- `kokoro_onnx`: the `kokoro-onnx` package's `Kokoro.create_stream` as its users run it (its own espeak-ng G2P,
  en-us; its batches of up to 510 phonemes, trimmed and joined with its pauses) on the embedded int8 export, the
  official voice, ONNX Runtime with `threads` workers; `kokoro_onnx_fp32`: the same on our fp32 export of the
  loaded weights (its inputs are named as the int8 export's).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable, Iterable

import numpy as np

from kokoro_tvm.compiled import check_precision, compiled_kokoro
from kokoro_tvm.components import TIMED_PRECISIONS, precision_list
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.g2p import spacy_model_from_package
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.runtime.buckets import DynamicLengths
from kokoro_tvm.synthesis import synthesize, synthesize_stream
from kokoro_tvm.synthesis.backends import TVMBackend
from kokoro_tvm.timing import SETTLE_SECONDS, set_threads

# Four held-out sentences (Harvard lists; not the text any schedule was tuned on), about 10 s of speech.
DEFAULT_PARAGRAPH = (
    "The boy was there when the sun rose. A rod is used to catch pink salmon. The source of the huge river is "
    "the clear spring. Kick the ball straight and follow through."
)
STREAM_PEERS = ("kpipeline", "kokoro_onnx", "kokoro_onnx_fp32")


def playback(arrivals: list[float], seconds: list[float]) -> dict:
    """A stream's timeline from each piece's arrival (seconds after the call) and length: first and last
    arrival, and the gaps a listener hears (a piece arriving after the one before has finished playing)."""
    if not arrivals:
        raise InputError("a stream gave no audio")
    end, gaps = arrivals[0], []
    for arrival, length in zip(arrivals, seconds, strict=True):
        gaps.append(max(0.0, arrival - end))
        end = max(end, arrival) + length
    return {
        "first_s": arrivals[0],
        "total_s": arrivals[-1],
        "audio_s": sum(seconds),
        "pieces": len(arrivals),
        "underruns": sum(g > 0 for g in gaps),
        "gap_s": sum(gaps),
    }


def time_stream(start: Callable[[], Iterable[np.ndarray]]) -> dict:
    """Call `start` and drain what it returns, timing each piece's arrival: `playback` of it."""
    arrivals, seconds = [], []
    t0 = time.perf_counter()
    for piece in start():
        arrivals.append(time.perf_counter() - t0)
        seconds.append(np.asarray(piece).size / SAMPLE_RATE)
    return playback(arrivals, seconds)


class KPipelineStream:
    """kokoro's `KPipeline(lang_code=...)` generator on the KModel (PyTorch eager), as its users stream with it."""

    def __init__(self, model, voice_pack: np.ndarray, language: str = "a"):
        import torch
        from kokoro import KPipeline

        with spacy_model_from_package():
            self.pipeline = KPipeline(lang_code=language, repo_id="hexgrad/Kokoro-82M", model=model)
        self.pack, self.torch = torch.from_numpy(np.asarray(voice_pack, dtype=np.float32)), torch

    def stream(self, text: str) -> Iterable[np.ndarray]:
        with self.torch.no_grad():
            for result in self.pipeline(text, voice=self.pack, speed=1):
                yield result.audio.numpy()


class KokoroOnnxStream:
    """kokoro-onnx's `Kokoro.create_stream` (an async generator) on an ONNX export (default: the embedded int8
    one), drained piece by piece so each piece's arrival is timed as it comes."""

    def __init__(self, voice, threads: int, onnx_path=None):
        from kokoro_tvm.peers.catalog import kokoro_onnx

        self.kokoro, self.voice = kokoro_onnx(voice, threads, onnx_path), voice.name

    def stream(self, text: str) -> Iterable[np.ndarray]:
        loop = asyncio.new_event_loop()
        pieces = self.kokoro.create_stream(text, self.voice, lang="en-us")
        try:
            while True:
                try:
                    audio, _rate = loop.run_until_complete(anext(pieces))
                except StopAsyncIteration:
                    return
                yield audio
        finally:
            loop.run_until_complete(pieces.aclose())
            loop.close()


def first_audio(
    text: str = DEFAULT_PARAGRAPH,
    voice: str | None = None,
    threads: int = 2,
    runs: int = 5,
    warmup: int = 2,
    precisions: str = "fp32,bf16,int8",
    peers: tuple[str, ...] = STREAM_PEERS,
    whole: bool = True,
    weights=None,
) -> dict:
    """The first-audio record of `text` (module docstring): per backend the median first-piece and last-piece
    seconds over `runs` interleaved rounds with their spread, the pieces, and the worst underrun of any round."""
    import torch

    from kokoro_tvm.peers.catalog import onnx_fp32_export
    from kokoro_tvm.weights.resolve import load_kmodel

    if runs < 1 or warmup < 0 or threads < 1:
        raise InputError("runs and threads must be >= 1 and warmup >= 0")
    unknown = sorted(set(peers) - set(STREAM_PEERS))
    if unknown:
        raise InputError(f"streaming peers are {', '.join(STREAM_PEERS)}; got {', '.join(unknown)}")
    chosen = [check_precision(p.name).name for p in precision_list(precisions, TIMED_PRECISIONS)]
    voice = voice or DEFAULT_VOICE
    pack = load_voice(voice)
    set_threads(threads)
    model, info = load_kmodel(weights, dtype=torch.float32)
    starts: dict[str, Callable[[], Iterable[np.ndarray]]] = {}
    for name in chosen:
        backend = TVMBackend(compiled_kokoro(model, info.fingerprint, name, buckets=DynamicLengths()), info)
        options = {"voice": voice, "noise": "zero", "backend": backend}
        starts[f"tvm[{name}]"] = lambda o=options: synthesize_stream(text, **o)
        if whole:  # one piece: the whole text's audio
            starts[f"tvm_whole[{name}]"] = lambda o=options: [synthesize(text, **o).audio]
    if "kpipeline" in peers:
        kpipeline = KPipelineStream(model, pack.pack)
        starts["kpipeline"] = lambda: kpipeline.stream(text)
    for name in ("kokoro_onnx", "kokoro_onnx_fp32"):
        if name in peers:
            export = onnx_fp32_export(model, info.fingerprint) if name == "kokoro_onnx_fp32" else None
            peer = KokoroOnnxStream(pack, threads, export)
            starts[name] = lambda p=peer: p.stream(text)
    for _ in range(warmup):  # builds load, torch warms up
        for start in starts.values():
            time_stream(start)
    rounds: dict[str, list[dict]] = {name: [] for name in starts}
    for _ in range(runs):
        for name, start in starts.items():
            time.sleep(SETTLE_SECONDS)
            rounds[name].append(time_stream(start))
    return {
        "text": text,
        "voice": pack.name,
        "threads": threads,
        "runs": runs,
        "weights_fingerprint": info.fingerprint,
        "backends": {name: _summary(found) for name, found in rounds.items()},
    }


def _summary(rounds: list[dict]) -> dict:
    firsts, totals = [r["first_s"] for r in rounds], [r["total_s"] for r in rounds]
    return {
        "first_s": statistics.median(firsts),
        "first_spread_s": [min(firsts), max(firsts)],
        "total_s": statistics.median(totals),
        "total_spread_s": [min(totals), max(totals)],
        "audio_s": rounds[0]["audio_s"],
        "pieces": rounds[0]["pieces"],
        "underruns_worst": max(r["underruns"] for r in rounds),
        "gap_s_worst": max(r["gap_s"] for r in rounds),
    }


def first_audio_record(args: argparse.Namespace) -> dict:
    peers = {"all": STREAM_PEERS, "none": ()}.get(args.peers.strip())
    if peers is None:
        peers = tuple(p.strip() for p in args.peers.split(",") if p.strip())
    return first_audio(
        DEFAULT_PARAGRAPH if args.text is None else args.text,
        voice=args.voice,
        threads=args.threads,
        runs=args.runs,
        warmup=args.warmup,
        precisions=args.precision,
        peers=peers,
        weights=args.weights,
    )
