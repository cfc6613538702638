"""Streamed against whole: does speaking a paragraph piece by piece (kokoro_tvm.synthesis.synthesize_stream)
sound like speaking it at once (notebook 07)?

Per paragraph: both audios from the same backend, voice and noise seed; Whisper's word error rate of each
against the text; PESQ-WB of the streamed audio against the whole one (the shorter padded with silence at the
end, scored over the whole paragraph: P.862 aligns each utterance's delay itself, so a join's pause that is a
little longer or shorter is not counted as distortion, a changed voice or intonation is); the largest sample
within 5 ms of any join (the joins fall in the model's own silence: a click would show here); both lengths.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import numpy as np

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.evaluation.backends import pick_sentences
from kokoro_tvm.evaluation.metrics import pesq_wb, word_error_rate
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.voices import DEFAULT_VOICE
from kokoro_tvm.runtime.buckets import DynamicLengths
from kokoro_tvm.synthesis import synthesize, synthesize_stream
from kokoro_tvm.synthesis.backends import TVMBackend

JOIN_WINDOW_SECONDS = 0.005


def paragraphs(sentences: list[str], size: int = 4) -> list[str]:
    """Consecutive sentences joined `size` at a time (the last paragraph may be shorter)."""
    return [" ".join(sentences[i : i + size]) for i in range(0, len(sentences), size)]


def join_peak(pieces: list[np.ndarray]) -> float | None:
    """The largest |sample| within JOIN_WINDOW_SECONDS either side of any join; None for one piece."""
    if len(pieces) < 2:
        return None
    edges = np.cumsum([p.size for p in pieces[:-1]])
    audio, half = np.concatenate(pieces), int(JOIN_WINDOW_SECONDS * SAMPLE_RATE)
    return float(max(np.abs(audio[max(0, e - half) : e + half]).max() for e in edges))


def stream_vs_whole(backend, texts: list[str], voice: str, seed: int = 0, asr: bool = True) -> list[dict]:
    """One row per text (module docstring). `backend`: a synthesis backend object (loaded once)."""
    rows = []
    for text in texts:
        whole = synthesize(text, voice=voice, backend=backend, noise=seed).audio
        stream = synthesize_stream(text, voice=voice, backend=backend, noise=seed)
        pieces = list(stream)
        streamed = np.concatenate(pieces)
        length = max(whole.size, streamed.size)
        padded = [np.pad(audio, (0, length - audio.size)) for audio in (whole, streamed)]
        row = {
            "text": text,
            "pieces": len(pieces),
            "first_piece_s": pieces[0].size / SAMPLE_RATE,
            "whole_s": whole.size / SAMPLE_RATE,
            "streamed_s": streamed.size / SAMPLE_RATE,
            "pesq_wb_vs_whole": pesq_wb(*padded),
            "join_peak": join_peak(pieces),
        }
        if asr:
            row["wer_whole"], row["transcript_whole"] = word_error_rate(text, whole)
            row["wer_streamed"], row["transcript_streamed"] = word_error_rate(text, streamed)
        rows.append(row)
    return rows


def main(argv=None) -> int:
    """`python -m kokoro_tvm.studies.streaming [--sentences N] [--precision P]`: notebook 07's pick of N corpus
    sentences as paragraphs of four, streamed against whole on TVM's symbolic-length build; one JSON record."""

    from kokoro_tvm.weights.resolve import load_kmodel

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sentences", type=int, default=20, help="notebook 07's pick of the corpus (default 20)")
    parser.add_argument("--precision", default="fp32", help="the TVM build (fp32, bf16, int8)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    model, info = load_kmodel()
    backend = TVMBackend(compiled_kokoro(model, info.fingerprint, args.precision, buckets=DynamicLengths()), info)
    texts = paragraphs(pick_sentences(load_sentences(), args.sentences))
    rows = stream_vs_whole(backend, texts, DEFAULT_VOICE, seed=args.seed)
    json.dump({"precision": args.precision, "voice": DEFAULT_VOICE, "rows": rows}, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
