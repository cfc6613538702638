"""Every intermediate of one utterance, as numpy arrays: what pt.dynamic and the TVM runtime both return."""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

# Stages compared between backends, in data-path order (see DESIGN: albert, duration, f0n, text_encoder, decoder).
COMPARED_STAGES = ("d_en", "d", "duration_logits", "en", "F0", "N", "t_en", "asr", "audio")


@dataclass
class Stages:
    """One utterance, batch 1. T tokens incl. pads, F aligned frames."""

    token_ids: np.ndarray  # [T] int64, with the pad token at both ends
    style: np.ndarray  # [1, 256]: decoder half then prosody half
    d_en: np.ndarray  # [1, 512, T] ALBERT + bert_encoder
    d: np.ndarray  # [1, T, 640] duration encoder output
    duration_logits: np.ndarray  # [1, T, 50]
    durations: np.ndarray  # [T] int64 frames per token (pred_dur)
    alignment: np.ndarray  # [F] int64: the token index of each frame (the one-hot matrix as a gather)
    en: np.ndarray  # [1, 640, F]
    F0: np.ndarray  # [1, 2F]
    N: np.ndarray  # [1, 2F]
    t_en: np.ndarray  # [1, 512, T] text encoder
    asr: np.ndarray  # [1, 512, F]
    audio: np.ndarray  # [600 F] at 24 kHz
    noise: str  # which NoiseSource made the SineGen noise
    buckets: tuple[int, int] | None = None  # (token, frame) shapes the TVM runtime ran; None for PyTorch

    @property
    def n_frames(self) -> int:
        return int(self.alignment.shape[0])

    def arrays(self) -> dict[str, np.ndarray]:
        return {f.name: getattr(self, f.name) for f in fields(self) if isinstance(getattr(self, f.name), np.ndarray)}


def durations_from_logits(duration_logits: np.ndarray, speed: float) -> np.ndarray:
    """[1, T, 50] logits -> [T] int64 frames: round(sum(sigmoid) / speed), at least 1 (kokoro's rule), computed
    in the logits' dtype."""
    logits = np.asarray(duration_logits)
    one = logits.dtype.type(1)
    total = (one / (one + np.exp(-logits))).sum(axis=-1) / logits.dtype.type(speed)
    return np.maximum(np.round(total), 1).astype(np.int64).reshape(-1)


def alignment_from_durations(durations: np.ndarray) -> np.ndarray:
    """[T] frames per token -> [F] token index of each frame (kokoro's one-hot alignment, as a gather)."""
    return np.repeat(np.arange(durations.shape[0]), durations)
