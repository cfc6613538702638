"""Intelligibility check: transcribe 24 kHz speech with pocketsphinx (its wheel bundles an en-US model)."""

from __future__ import annotations

import functools
import re

import numpy as np
from scipy.signal import resample_poly

from kokoro_tvm.config import SAMPLE_RATE

ASR_SAMPLE_RATE = 16_000


@functools.cache
def _decoder():
    from pocketsphinx import Decoder

    return Decoder(samprate=ASR_SAMPLE_RATE, loglevel="FATAL")


def transcribe(audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str:
    """Lower-case transcript of mono float audio (resampled to 16 kHz, peak-normalized to int16)."""
    audio = np.asarray(audio, dtype=np.float64).reshape(-1)
    if sample_rate != ASR_SAMPLE_RATE:
        g = np.gcd(sample_rate, ASR_SAMPLE_RATE)
        audio = resample_poly(audio, ASR_SAMPLE_RATE // g, sample_rate // g)
    peak = np.abs(audio).max()
    pcm = (audio / peak * 0.9 * 32767 if peak > 0 else audio).astype(np.int16)
    decoder = _decoder()
    decoder.start_utt()
    decoder.process_raw(pcm.tobytes(), no_search=False, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr.lower() if hyp is not None else ""


def words(text: str) -> list[str]:
    """Lower-case words of a reference text, punctuation removed."""
    return re.findall(r"[a-z']+", text.lower())
