"""WAV files: 24 kHz float32 by default (no PCM16 clipping), with a JSON sidecar saying how they were made."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
from scipy.io import wavfile

from kokoro_tvm.errors import InputError

log = logging.getLogger(__name__)

WAV_FORMATS = ("float32", "pcm16")


def write_wav(
    path: str | Path, audio: np.ndarray, sample_rate: int, fmt: str = "float32", metadata: dict | None = None
) -> Path:
    """Write mono audio; `metadata` goes to <path without .wav>.json beside it."""
    path = Path(path)
    audio = np.asarray(audio).reshape(-1)
    if fmt == "float32":
        data = audio.astype(np.float32)
    elif fmt == "pcm16":
        clipped = int(np.count_nonzero(np.abs(audio) > 1.0))
        if clipped:
            log.warning("pcm16: %d samples beyond full scale were clipped (use float32 to keep them)", clipped)
        data = np.round(np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)
    else:
        raise InputError(f"unknown WAV format {fmt!r}; choose one of {WAV_FORMATS}")
    path.parent.mkdir(parents=True, exist_ok=True)
    wavfile.write(path, sample_rate, data)
    if metadata is not None:
        path.with_suffix(".json").write_text(json.dumps(metadata, indent=1, ensure_ascii=False) + "\n")
    return path


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(float32 audio in [-1, 1] scale, sample rate)."""
    sample_rate, data = wavfile.read(path)
    if data.dtype == np.int16:
        return data.astype(np.float32) / 32767, sample_rate
    return data.astype(np.float32), sample_rate
