"""Tensor and audio metrics, always with a named reference (the first argument).

Waveform SNR and relative L2 are exact-match measures: the right test in float64. In float32 even PyTorch's
own model is only about 48 dB from its float64 model (studies.audio_comparison.precision_floor), so float32
audio is judged perceptually: PESQ wide-band (`pesq`, 16 kHz) and STOI (`pystoi`). No lag search anywhere:
samples are compared where they stand.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
from scipy.fft import dct
from scipy.signal import stft as _stft

from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.evaluation.asr import ASR_SAMPLE_RATE, to_16k, transcribe, words
from kokoro_tvm.reference.stages import COMPARED_STAGES, Stages

PESQ_RATE = ASR_SAMPLE_RATE  # wide-band PESQ reads 16 kHz, as the ASR judges do


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


def windowed_snr_db(reference: np.ndarray, other: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Per consecutive window of `window` samples (a shorter tail dropped): the SNR of `other` against `reference`
    (inf where the window is identical) and the reference's level in dB (mean square; -inf where silent). Says
    whether an error is even or a local burst, which one whole-utterance SNR or PESQ score cannot."""
    reference, other = np.asarray(reference, np.float64), np.asarray(other, np.float64)
    if reference.shape != other.shape or reference.ndim != 1:
        raise ValueError(f"two 1-D signals of one length expected, got {reference.shape} vs {other.shape}")
    if window < 1 or window > reference.size:
        raise ValueError(f"window must be 1..{reference.size} samples, got {window}")
    n = reference.size // window
    signal = (reference[: n * window].reshape(n, window) ** 2).sum(axis=1)
    error = ((other[: n * window] - reference[: n * window]).reshape(n, window) ** 2).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        snr = np.where(error == 0, np.inf, 10 * np.log10(signal / error))
        level = 10 * np.log10(signal / window)
    return snr, level


# The `pesq` package's C code overflows a fixed buffer on long input and kills the process with signal 11 (no
# exception to catch): measured here on 128 s of speech (our longest utterance, 5120 frames) while 125 s passed.
# Longer audio is scored in equal windows of at most this many seconds, half that limit.
PESQ_WINDOW_SECONDS = 60.0


def pesq_windows(n_samples: int, rate: int = SAMPLE_RATE) -> list[slice]:
    """Equal consecutive windows covering `n_samples`, each at most PESQ_WINDOW_SECONDS (one if it fits)."""
    count = max(1, math.ceil(n_samples / (PESQ_WINDOW_SECONDS * rate)))
    edges = np.linspace(0, n_samples, count + 1).round().astype(int)
    return [slice(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:], strict=True)]


def pesq_wb(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """PESQ wide-band MOS-LQO (1.04 .. 4.64) of `other` against `reference`, both resampled to 16 kHz. Audio
    longer than PESQ_WINDOW_SECONDS is scored per window (`pesq_windows`) and the worst window is returned: our
    quality bars are lower bounds, so a bad stretch cannot hide behind good ones."""
    from pesq import pesq

    if len(reference) != len(other):
        raise ValueError(f"lengths differ: {len(reference)} vs {len(other)} samples")
    return min(
        float(pesq(PESQ_RATE, to_16k(reference[w], rate), to_16k(other[w], rate), "wb"))
        for w in pesq_windows(len(reference), rate)
    )


# pystoi scores 30-frame segments (384 ms at its 10 kHz) of the reference's speech: where fewer speech frames are
# left ("Hi.", 0.3 s of speech) it warns and returns 1e-5, a score that reads as unintelligible audio.
STOI_TOO_SHORT = "Not enough STFT frames"


def stoi(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float | None:
    """Short-time objective intelligibility (0 .. 1) of `other` against `reference`; None where the reference
    has too little speech to be scored (STOI_TOO_SHORT), never pystoi's stand-in 1e-5."""
    from pystoi import stoi as _stoi

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        score = _stoi(np.asarray(reference, np.float64), np.asarray(other, np.float64), rate, extended=False)
    if any(STOI_TOO_SHORT in str(w.message) for w in caught):
        return None
    for w in caught:  # any other warning is passed on as it came
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    return float(score)


def json_number(x: float) -> float | str:
    """JSON has no inf/nan: write them as strings."""
    return x if math.isfinite(x) else str(x)


def correlation(reference: np.ndarray, other: np.ndarray) -> float:
    """Pearson correlation of the two waveforms at zero lag (no lag search)."""
    reference, other = np.asarray(reference, np.float64), np.asarray(other, np.float64)
    if reference.shape != other.shape:
        raise ValueError(f"shapes differ: {reference.shape} vs {other.shape}")
    return float(np.corrcoef(reference, other)[0, 1])


N_FFT, HOP, N_MELS, N_CEPSTRA = 1024, 256, 80, 24
LOG_FLOOR = 1e-5


def mel_filterbank(rate: int = SAMPLE_RATE, n_fft: int = N_FFT, n_mels: int = N_MELS) -> np.ndarray:
    """Triangular filters equally spaced on the HTK mel scale from 0 Hz to Nyquist: [n_mels, n_fft // 2 + 1]."""
    mel = lambda hz: 2595.0 * np.log10(1.0 + hz / 700.0)  # noqa: E731
    hz = lambda m: 700.0 * (10.0 ** (m / 2595.0) - 1.0)  # noqa: E731
    edges = hz(np.linspace(0.0, mel(rate / 2), n_mels + 2))
    bins = np.linspace(0.0, rate / 2, n_fft // 2 + 1)
    lower, center, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    return np.maximum(0.0, np.minimum((bins - lower) / (center - lower), (upper - bins) / (upper - center)))


def log_mel(audio: np.ndarray, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Natural-log mel power spectrogram [frames, N_MELS] (Hann window N_FFT, hop HOP, floor LOG_FLOOR)."""

    _, _, spectrum = _stft(np.asarray(audio, np.float64), rate, "hann", N_FFT, N_FFT - HOP, boundary=None)
    power = np.abs(spectrum) ** 2  # [freq, frames]
    return np.log(np.maximum(mel_filterbank(rate) @ power, LOG_FLOOR)).T


def log_mel_l1(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """Mean absolute difference of the natural-log mel spectrograms (frame by frame, no alignment)."""
    return float(np.mean(np.abs(log_mel(reference, rate) - log_mel(other, rate))))


def mel_cepstral_distortion(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> float:
    """MCD in dB over cepstra 1..N_CEPSTRA (DCT-II of the log-mel frames; c0, the energy, excluded), frames
    paired where they stand (no DTW): (10 / ln 10) sqrt(2 sum (dc)^2), averaged over frames."""

    a = dct(log_mel(reference, rate), type=2, norm="ortho", axis=1)[:, 1 : N_CEPSTRA + 1]
    b = dct(log_mel(other, rate), type=2, norm="ortho", axis=1)[:, 1 : N_CEPSTRA + 1]
    return float(np.mean(10.0 / np.log(10.0) * np.sqrt(2.0 * np.sum((a - b) ** 2, axis=1))))


F0_MIN, F0_MAX, F0_FRAME_S, F0_HOP_S, YIN_THRESHOLD = 60.0, 500.0, 0.04, 0.01, 0.15


def f0_track(audio: np.ndarray, rate: int = SAMPLE_RATE) -> tuple[np.ndarray, np.ndarray]:
    """(f0 Hz, voiced) per 10 ms frame by YIN (de Cheveigne & Kawahara 2002): the first lag in [1/F0_MAX,
    1/F0_MIN] whose cumulative-mean-normalized difference dips below YIN_THRESHOLD, walked down to the dip's
    minimum and refined by a parabola; frames without such a dip are unvoiced (f0 0). Vectorized over frames:
    the difference function is E(0) + E(tau) - 2 ACF(tau), the ACF by FFT."""
    x = np.asarray(audio, np.float64)
    width, hop = int(F0_FRAME_S * rate), int(F0_HOP_S * rate)
    lo, hi = int(rate / F0_MAX), int(rate / F0_MIN)
    span = width + hi
    if len(x) < span:
        return np.zeros(0), np.zeros(0, dtype=bool)
    frames = np.lib.stride_tricks.sliding_window_view(x, span)[::hop]  # [n, width + hi]
    size = 1 << int(np.ceil(np.log2(span + width)))
    head = np.fft.rfft(frames[:, :width], size)
    acf = np.fft.irfft(np.conj(head) * np.fft.rfft(frames, size), size)[:, : hi + 1]
    energy = np.concatenate([np.zeros((len(frames), 1)), np.cumsum(frames**2, axis=1)], axis=1)
    e_tau = energy[:, width : width + hi + 1] - energy[:, : hi + 1]  # sum of x[j + tau]^2, j < width
    diff = np.maximum(e_tau[:, :1] + e_tau - 2 * acf, 0.0)[:, 1:]  # d(tau), tau = 1..hi
    cmnd = diff * np.arange(1, hi + 1) / np.maximum(np.cumsum(diff, axis=1), 1e-300)
    f0, voiced = np.zeros(len(frames)), np.zeros(len(frames), dtype=bool)
    for i in np.nonzero(e_tau[:, 0] > 0)[0]:
        below = np.nonzero(cmnd[i, lo - 1 :] < YIN_THRESHOLD)[0]
        if below.size == 0:
            continue
        k = lo - 1 + below[0]
        while k + 1 < hi and cmnd[i, k + 1] < cmnd[i, k]:
            k += 1
        a, b, c = (cmnd[i, k - 1], cmnd[i, k], cmnd[i, k + 1]) if 0 < k < hi - 1 else (0.0, 0.0, 0.0)
        shift = 0.5 * (a - c) / (a - 2 * b + c) if (a - 2 * b + c) != 0 else 0.0
        f0[i], voiced[i] = rate / (k + 1 + shift), True
    return f0, voiced


def f0_metrics(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> dict:
    """F0 RMSE in Hz and in cents over frames voiced in both, and the fraction of frames whose voicing agrees."""
    f_ref, v_ref = f0_track(reference, rate)
    f_oth, v_oth = f0_track(other, rate)
    n = min(len(f_ref), len(f_oth))
    f_ref, v_ref, f_oth, v_oth = f_ref[:n], v_ref[:n], f_oth[:n], v_oth[:n]
    both = v_ref & v_oth
    if not both.any():
        rmse_hz = rmse_cents = math.nan
    else:
        rmse_hz = float(np.sqrt(np.mean((f_ref[both] - f_oth[both]) ** 2)))
        rmse_cents = float(np.sqrt(np.mean((1200 * np.log2(f_oth[both] / f_ref[both])) ** 2)))
    return {"f0_rmse_hz": rmse_hz, "f0_rmse_cents": rmse_cents, "voicing_agreement": float(np.mean(v_ref == v_oth))}


def word_error_rate(text: str, audio: np.ndarray, rate: int = SAMPLE_RATE, judge: str = "whisper") -> tuple[float, str]:
    """(WER of `judge`'s transcript (kokoro_tvm.evaluation.asr) against the words of `text` (jiwer), the
    transcript)."""
    import jiwer

    hypothesis = transcribe(audio, rate, judge)
    return float(jiwer.wer(" ".join(words(text)), hypothesis or "<empty>")), hypothesis


def audio_metrics(reference: np.ndarray, other: np.ndarray, rate: int = SAMPLE_RATE) -> dict:
    """Every reference-based metric of `other` against `reference` (same length: the same durations)."""
    return {
        "snr_db": snr_db(reference, other),
        "correlation": correlation(reference, other),
        "log_mel_l1": log_mel_l1(reference, other, rate),
        "mcd_db": mel_cepstral_distortion(reference, other, rate),
        **f0_metrics(reference, other, rate),
        "pesq_wb": pesq_wb(reference, other, rate),
        "stoi": stoi(reference, other, rate),
    }


# Stages computed before the alignment: comparable even when the durations differ.
ENCODER_STAGES = ("d_en", "d", "duration_logits", "t_en")


def stage_errors(reference: Stages, other: Stages) -> dict[str, float]:
    """Relative L2 per stage; stages after the alignment only when the durations agree."""
    same = np.array_equal(reference.durations, other.durations)
    names = COMPARED_STAGES if same else ENCODER_STAGES
    return {name: rel_l2(getattr(reference, name), getattr(other, name)) for name in names}
