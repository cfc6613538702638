"""How far float32 audio is from float64 truth with zero and with seeded SineGen noise: why `bench` scores quality
with the seeded noise `compare` uses (NOTES/performance.md, "Tuning").

On one text (one chunk, af_heart, speed 1), for each noise: PyTorch fp32 and TVM's fp32 symbolic-length build
against each other and each against PyTorch float64 (pt.dynamic with the same noise): audio SNR, PESQ-WB, and the
SNR of each whole second, to show whether the error grows along the utterance.

    python -m kokoro_tvm.studies.noise_and_fp32 --text "..."
"""

from __future__ import annotations

import argparse
import json
import logging

import numpy as np
import torch

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.evaluation import metrics
from kokoro_tvm.frontend.text import one_chunk
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.reference.noise import NoiseSource, SeededNoise, ZeroNoise
from kokoro_tvm.reference.pt_dynamic import run_stages
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.timing import set_threads
from kokoro_tvm.weights.resolve import load_kmodel

log = logging.getLogger(__name__)


def per_second_snr(reference: np.ndarray, other: np.ndarray) -> list[float]:
    """The SNR (dB) of each whole second of `other` against `reference`, in order."""
    n = SAMPLE_RATE
    return [
        round(metrics.snr_db(reference[i : i + n], other[i : i + n]), 1) for i in range(0, len(reference) - n + 1, n)
    ]


def pairs(pt32: np.ndarray, tvm32: np.ndarray, pt64: np.ndarray) -> dict:
    """The three comparisons, each as {snr_db, pesq_wb, snr_per_second}."""
    result = {}
    for label, reference, other in (
        ("tvm32_vs_pt32", pt32, tvm32),
        ("pt32_vs_pt64", pt64, pt32),
        ("tvm32_vs_pt64", pt64, tvm32),
    ):
        result[label] = {
            "snr_db": round(metrics.snr_db(reference, other), 2),
            "pesq_wb": round(metrics.pesq_wb(reference, other), 3),
            "snr_per_second": per_second_snr(reference, other),
        }
    return result


def measure(text: str, voice: str = DEFAULT_VOICE, threads: int = 2, seed: int = 0) -> dict:
    """{tokens, voice, per noise: {seconds, the three comparisons}}; durations must agree across the three runs."""
    set_threads(threads)
    chunk = one_chunk(text, "a", "this study")
    style = load_voice(voice).style(len(chunk.phonemes))
    model32, info = load_kmodel(dtype=torch.float32)
    model64, _ = load_kmodel(dtype=torch.float64)
    tvm = compiled_kokoro(model32, info.fingerprint, "fp32", buckets=parse_buckets("dynamic"))
    result = {"text": text, "voice": voice, "tokens": len(chunk.padded_ids)}
    noises: tuple[NoiseSource, ...] = (ZeroNoise(), SeededNoise(seed))
    for noise in noises:
        runs = [
            run_stages(model32, chunk.padded_ids, style, 1.0, noise),
            tvm.run_stages(chunk.padded_ids, style, 1.0, noise),
            run_stages(model64, chunk.padded_ids, style, 1.0, noise),
        ]
        if not all(np.array_equal(runs[0].durations, r.durations) for r in runs[1:]):
            raise RuntimeError("durations differ between PyTorch fp32, TVM fp32 and PyTorch float64")
        audio = [np.asarray(r.audio, dtype=np.float64).reshape(-1) for r in runs]
        compared = pairs(*audio)
        result[noise.description] = {"seconds": round(len(audio[0]) / SAMPLE_RATE, 2), **compared}
        log.info("%s noise, PESQ-WB: %s", noise.description, {k: v["pesq_wb"] for k, v in compared.items()})
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--text", required=True)
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    print(json.dumps(measure(args.text, args.voice, args.threads), indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
