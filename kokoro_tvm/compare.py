"""Tensor and audio metrics, always with a named reference (the first argument).

Waveform SNR and relative L2 are exact-match measures: the right test in float64. In float32 Kokoro's decoder
is ill-conditioned (PyTorch fp32 vs fp64 is only ~19 dB), so audio is judged perceptually: PESQ wide-band
(`pesq`, 16 kHz) and STOI (`pystoi`). No lag search anywhere: samples are compared where they stand.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.signal import resample_poly

from kokoro_tvm.config import SAMPLE_RATE

PESQ_RATE = 16_000


def rel_l2(reference: np.ndarray, other: np.ndarray) -> float:
    """||other - reference|| / ||reference|| (0 if both are all zeros)."""
    reference, other = np.asarray(reference, np.float64), np.asarray(other, np.float64)
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {other.shape}")
    norm = np.linalg.norm(reference)
    err = np.linalg.norm(other - reference)
    return float(err / norm) if norm > 0 else (0.0 if err == 0 else math.inf)


def snr_db(reference: np.ndarray, other: np.ndarray) -> float:
    """10 log10(signal energy / error energy); inf when identical."""
    reference, other = np.asarray(reference, np.float64), np.asarray(other, np.float64)
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {other.shape}")
    err = np.sum((other - reference) ** 2)
    return math.inf if err == 0 else float(10 * np.log10(np.sum(reference**2) / err))


def _to_16k(audio: np.ndarray, rate: int) -> np.ndarray:
    g = math.gcd(rate, PESQ_RATE)
    return resample_poly(np.asarray(audio, np.float64), PESQ_RATE // g, rate // g)


def pesq_wb(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """PESQ wide-band MOS-LQO (1.04 .. 4.64) of `other` against `reference`, both resampled to 16 kHz."""
    from pesq import pesq

    return float(pesq(PESQ_RATE, _to_16k(reference, rate), _to_16k(other, rate), "wb"))


def stoi(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """Short-time objective intelligibility (0 .. 1) of `other` against `reference`."""
    from pystoi import stoi as _stoi

    return float(_stoi(np.asarray(reference, np.float64), np.asarray(other, np.float64), rate, extended=False))


def json_number(x: float) -> float | str:
    """JSON has no inf/nan: write them as strings."""
    return x if math.isfinite(x) else str(x)
