"""WAV files: 24 kHz float32 by default (no PCM16 clipping), with a JSON sidecar saying how they were made."""

from __future__ import annotations

import json
import logging
import struct
from pathlib import Path

import numpy as np

from kokoro_tvm.errors import InputError

log = logging.getLogger(__name__)

WAV_FORMATS = ("float32", "pcm16")


def encode(audio: np.ndarray, fmt: str = "float32") -> np.ndarray:
    """Mono audio as the samples a WAV (or raw PCM) of `fmt` holds: float32, or pcm16 (clipped, with a warning)."""
    audio = np.asarray(audio).reshape(-1)
    if fmt == "float32":
        return audio.astype(np.float32)
    if fmt == "pcm16":
        clipped = int(np.count_nonzero(np.abs(audio) > 1.0))
        if clipped:
            log.warning("pcm16: %d samples beyond full scale were clipped (use float32 to keep them)", clipped)
        return np.round(np.clip(audio, -1.0, 1.0) * 32767).astype(np.int16)
    raise InputError(f"unknown WAV format {fmt!r}; choose one of {WAV_FORMATS}")


def write_wav(
    path: str | Path, audio: np.ndarray, sample_rate: int, fmt: str = "float32", metadata: dict | None = None
) -> Path:
    """Write mono audio; `metadata` goes to <path without .wav>.json beside it."""
    path = Path(path)
    with WavStream(path, sample_rate, fmt) as stream:  # our header: scipy.io's import was 0.2 s of a cached `say`
        stream.write(audio)
    if metadata is not None:
        path.with_suffix(".json").write_text(json.dumps(metadata, indent=1, ensure_ascii=False) + "\n")
    return path


class WavStream:
    """A WAV file written while its audio is still coming: a header with placeholder sizes first, each piece
    appended as it arrives (`write`), the sizes fixed when the stream closes. Until then the file is a valid
    WAV header followed by the samples so far (players that read to the end of the file play them).
    float32 is IEEE-float WAV (format 3), pcm16 is PCM (format 1)."""

    def __init__(self, path: str | Path, sample_rate: int, fmt: str = "float32"):
        encode(np.zeros(0), fmt)  # an unknown format fails before the file is created
        self.path, self.fmt, self.sample_rate, self.data_bytes = Path(path), fmt, sample_rate, 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.file = open(self.path, "wb")  # closed by close(): the stream outlives any one block
        self.file.write(self._header())
        self.file.flush()

    def _header(self) -> bytes:
        width = 4 if self.fmt == "float32" else 2
        tag = 3 if self.fmt == "float32" else 1
        fmt_chunk = struct.pack("<HHIIHH", tag, 1, self.sample_rate, self.sample_rate * width, width, 8 * width)
        return (
            b"RIFF"
            + struct.pack("<I", 36 + self.data_bytes)
            + b"WAVE"
            + b"fmt "
            + struct.pack("<I", 16)
            + fmt_chunk
            + b"data"
            + struct.pack("<I", self.data_bytes)
        )

    def write(self, audio: np.ndarray) -> None:
        data = encode(audio, self.fmt).astype("<f4" if self.fmt == "float32" else "<i2").tobytes()
        self.file.write(data)
        self.file.flush()
        self.data_bytes += len(data)

    def close(self) -> Path:
        self.file.seek(0)
        self.file.write(self._header())
        self.file.close()
        return self.path

    def __enter__(self) -> WavStream:
        return self

    def __exit__(self, *exc) -> None:
        if not self.file.closed:
            self.close()


def read_wav(path: str | Path) -> tuple[np.ndarray, int]:
    """(float32 audio in [-1, 1] scale, sample rate)."""
    from scipy.io import wavfile

    sample_rate, data = wavfile.read(path)
    if data.dtype == np.int16:
        return data.astype(np.float32) / 32767, sample_rate
    return data.astype(np.float32), sample_rate
