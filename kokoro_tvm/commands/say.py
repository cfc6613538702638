"""`kokoro-tvm say`: text in, speech out: a WAV file with its JSON sidecar, raw samples to stdout, or a stream of
pieces as each is spoken."""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path

from kokoro_tvm import __version__
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError, writable_folder, writing
from kokoro_tvm.runtime import ready
from kokoro_tvm.runtime.audio_io import WavStream, encode, write_wav
from kokoro_tvm.synthesis import synthesize, synthesize_stream
from kokoro_tvm.synthesis.batch import synthesize_batch

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


def run(args: argparse.Namespace) -> int:
    if (args.text is None) == (args.batch is None):
        raise InputError("say takes a TEXT or --batch FILE (one text per line), not both and not neither")
    if args.batch is not None:
        return say_batch(args)
    if args.backend == "tvm" and args.buckets == "default" and args.device == "cpu":
        ready.start_without_torch(args.weights, args.precision)  # cached builds: TVM without torch
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


def batch_lines(path: str) -> list[tuple[int, str]]:
    """(line number, text) of each line of `path` with something on it; a missing or unreadable file, or one with
    nothing to say, is one InputError."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read the batch file {path}: {getattr(exc, 'strerror', None) or exc}") from None
    found = [(number, line.strip()) for number, line in enumerate(lines, start=1) if line.strip()]
    if not found:
        raise InputError(f"the batch file {path} has no text (one utterance per line)")
    skipped = len(lines) - len(found)
    if skipped:
        log.info("%s: %d blank line(s) skipped; files are named by line number", path, skipped)
    return found


def say_batch(args: argparse.Namespace) -> int:
    """`say --batch FILE -o DIR`: one WAV and sidecar per line of FILE, named by its line number (`0003.wav`)."""
    if args.stream or args.output == STDOUT or args.phonemes:
        raise InputError("--batch writes WAV files into a folder: not with --stream, --phonemes or -o -")
    start = time.perf_counter()
    lines = batch_lines(args.batch)
    options = {k: v for k, v in _speech_options(args).items() if k not in ("text", "phonemes", "voice")}
    texts = [text for _, text in lines]
    speeches = synthesize_batch(texts, voices=args.voice, batch=args.batch_size, **options)
    folder = writable_folder(args.output)
    width = max(4, len(str(lines[-1][0])))
    for (number, _), speech in zip(lines, speeches, strict=True):
        metadata = dict(speech.metadata, wav_format=args.format, kokoro_tvm=__version__, line=number)
        with writing(folder):
            path = write_wav(folder / f"{number:0{width}d}.wav", speech.audio, SAMPLE_RATE, args.format, metadata)
        print(path)
    seconds = sum(s.seconds for s in speeches)
    wall = time.perf_counter() - start
    log.info(
        "wrote %d file(s) to %s: %.1f s of audio in %.1f s, batch %d",
        len(speeches),
        folder,
        seconds,
        wall,
        args.batch_size,
    )
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
