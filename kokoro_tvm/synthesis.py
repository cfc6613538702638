"""Text to speech through a chosen backend: chunks in, one waveform out.

A backend turns one chunk (padded token ids, a style row, speed, noise) into audio. Long text is split by the
text front-end; the chunks' audio is concatenated in order, every sample kept.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field

import numpy as np

from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.g2p import g2p_name
from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, Chunk, foreign_letters, phonemize, prepare
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of, load_voice
from kokoro_tvm.reference.noise import NoiseSource, noise_source
from kokoro_tvm.runtime.buckets import parse_buckets

log = logging.getLogger(__name__)

BACKENDS = ("torch", "tvm")
MIN_SPEED, MAX_SPEED = 0.25, 4.0


@dataclass
class Speech:
    audio: np.ndarray  # float32 [samples] at SAMPLE_RATE
    chunks: list[Chunk]
    durations: list[np.ndarray]  # frames per token, per chunk
    metadata: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / SAMPLE_RATE


class TorchBackend:
    """PyTorch pt.dynamic (kokoro_tvm.reference.pt_dynamic) on the resolved weights."""

    name = "torch"

    def __init__(self, model, weights):
        self.model, self.weights = model, weights  # a KModel and its WeightsInfo

    @classmethod
    def load(cls, weights=None) -> TorchBackend:
        from kokoro_tvm.weights.resolve import load_kmodel

        return cls(*load_kmodel(weights))

    def speak(self, chunk: Chunk, style: np.ndarray, speed: float, noise: NoiseSource, stream: int):
        from kokoro_tvm.reference.pt_dynamic import run_stages

        stages = run_stages(self.model, chunk.padded_ids, style, speed=speed, noise=noise, stream=stream)
        return stages.audio, stages.durations


class TVMBackend:
    """The compiled model (kokoro_tvm.runtime.kokoro) with the shapes of `buckets` (kokoro_tvm.runtime.buckets:
    default, the five symbolic-length builds; a bucket set; or exact lengths, `buckets="exact"`); each artifact
    is built on first use into the cache and reused."""

    name = "tvm"

    def __init__(self, compiled, weights):
        self.compiled, self.weights = compiled, weights  # a runtime.TVMKokoro and the WeightsInfo
        self.shapes: list[tuple[int, int]] = []  # (token, frame) bucket of each chunk spoken

    @classmethod
    def load(cls, weights=None, precision: str = "fp32", buckets: str = "default", device: str = "cpu") -> TVMBackend:
        """`precision`: a kokoro_tvm.components.PRECISIONS name (fp32, fp64, bf16, int8)."""
        import torch

        from kokoro_tvm.compiled import check_device, check_precision, compiled_kokoro
        from kokoro_tvm.weights.resolve import load_kmodel

        dtype = check_precision(precision, device).dtype  # so does a CPU without bf16 for a bf16 build
        bucket_set = None if buckets == "exact" else parse_buckets(buckets)  # bad specs fail before any load
        check_device(device, dtype)  # and a missing device
        model, info = load_kmodel(weights, dtype=getattr(torch, dtype))
        compiled = compiled_kokoro(
            model, info.fingerprint, precision, buckets=bucket_set, device=device
        )
        return cls(compiled, info)

    def describe(self, last_chunks: int) -> dict:
        """The bucket policy and the (token, frame) shapes the last `last_chunks` chunks ran in."""
        buckets = self.compiled.buckets
        return {
            "buckets": buckets.describe() if buckets else "exact",
            "shapes": self.shapes[-last_chunks:],
            "device": self.compiled.device,
        }

    def speak(self, chunk: Chunk, style: np.ndarray, speed: float, noise: NoiseSource, stream: int):
        stages = self.compiled.run_stages(chunk.padded_ids, style, speed=speed, noise=noise, stream=stream)
        self.shapes.append(stages.buckets)
        return stages.audio, stages.durations


def make_backend(name: str, weights=None, buckets: str = "default", device: str = "cpu", precision: str = "fp32"):
    if name != "tvm" and device != "cpu":
        raise InputError(f"--device {device} applies to the tvm backend only (the {name} backend runs on the CPU)")
    if name != "tvm" and precision != "fp32":
        raise InputError(f"--precision {precision} applies to the tvm backend only (the {name} backend is fp32)")
    if name == "torch":
        return TorchBackend.load(weights)
    if name == "tvm":
        return TVMBackend.load(weights, precision=precision, buckets=buckets, device=device)
    raise InputError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")


def check_speed(speed: float) -> float:
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise InputError(f"speed must be a number in [{MIN_SPEED}, {MAX_SPEED}], got {speed!r}")
    return float(speed)


def synthesize(
    text: str | None = None,
    *,
    phonemes: str | None = None,
    voice: str = DEFAULT_VOICE,
    speed: float = 1.0,
    noise: str | int | NoiseSource = 0,
    backend="torch",
    weights=None,
    buckets: str = "default",
    device: str = "cpu",
    precision: str = "fp32",
    language: str | None = None,
) -> Speech:
    """Speak `text` (or a raw phoneme string).

    `language`: a Kokoro language code for the G2P (default: the one the voice's name starts with, as KPipeline
    does; American English for a voice file). `noise`: 'zero', 'seeded:N', an int seed or a NoiseSource;
    `backend`: a name (built after the input is validated) or a backend object; `buckets` (TVM by name): a
    kokoro_tvm.runtime.buckets spec or 'exact'; `device` (TVM): "cpu", "metal" or "cuda", where one exists."""
    speed = check_speed(speed)
    noise = noise_source(noise)
    language = language or language_of(voice) or DEFAULT_LANGUAGE
    unspoken: tuple[str, ...] = ()
    if text is not None:
        phonemized = phonemize(text, language)
        phonemes, unspoken = phonemized.phonemes, phonemized.unspoken
    chunks = prepare(phonemes=phonemes)
    pack = load_voice(voice)
    if isinstance(backend, str):
        backend = make_backend(backend, weights=weights, buckets=buckets, device=device, precision=precision)
    pieces, durations = [], []
    for i, chunk in enumerate(chunks):
        audio, dur = backend.speak(chunk, pack.style(len(chunk.phonemes)), speed, noise, stream=i)
        pieces.append(np.asarray(audio, dtype=np.float32).reshape(-1))
        durations.append(np.asarray(dur))
    metadata = {
        "text": text,
        "phonemes": [c.phonemes for c in chunks],
        "language": language if text is not None else None,
        "g2p": g2p_name(language) if text is not None else "phonemes given",
        "foreign_letters": "".join(foreign_letters(text)) if text else "",  # named, not read: see the phonemes
        "unspoken": list(unspoken),  # words no G2P could read (warned about)
        "voice": pack.name,
        "voice_source": pack.source,
        "speed": speed,
        "noise": noise.description,
        "backend": backend.name,
        "weights": backend.weights.as_dict(),
        "sample_rate": SAMPLE_RATE,
    }
    if hasattr(backend, "describe"):
        metadata["tvm"] = backend.describe(len(chunks))
    return Speech(np.concatenate(pieces), chunks, durations, metadata)
