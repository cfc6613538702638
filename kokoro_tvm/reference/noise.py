"""SineGen's randomness as explicit arrays, so two backends can receive the very same noise.

Kokoro's SineGen draws a random initial phase per harmonic (`torch.rand`, the fundamental's is 0) and additive
Gaussian noise per sample and harmonic (`torch.randn_like`). Here both are inputs: a `NoiseSource` makes them
zero, seeded, or given as arrays, and every result records which (`description`). numpy only: the TVM runtime
uses this module too and never imports torch.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from kokoro_tvm.config import N_HARMONICS
from kokoro_tvm.errors import InputError


@dataclass(frozen=True)
class SineNoise:
    """initial_phase [B, 9] in [0, 1) with column 0 = 0; additive [B, n_samples, 9], standard normal
    (SineGen scales it by 0.003 in voiced and 0.1/3 in unvoiced samples)."""

    initial_phase: np.ndarray
    additive: np.ndarray

    def __post_init__(self):
        b, h = self.initial_phase.shape
        if h != N_HARMONICS or self.additive.ndim != 3 or self.additive.shape[::2] != (b, N_HARMONICS):
            raise ValueError(
                f"noise shapes {self.initial_phase.shape} and {self.additive.shape} do not fit "
                f"[B, {N_HARMONICS}] and [B, n_samples, {N_HARMONICS}]"
            )

    @property
    def n_samples(self) -> int:
        return self.additive.shape[1]


class NoiseSource:
    """Makes the SineNoise for one utterance; `stream` tells utterances (text chunks) apart."""

    description = "abstract"

    def sine_noise(self, n_samples: int, batch: int = 1, stream: int = 0) -> SineNoise:
        raise NotImplementedError


class ZeroNoise(NoiseSource):
    """No randomness at all: phase 0, no additive noise (an explicit choice, never a silent default)."""

    description = "zero"

    def sine_noise(self, n_samples, batch=1, stream=0):
        return SineNoise(np.zeros((batch, N_HARMONICS)), np.zeros((batch, n_samples, N_HARMONICS)))


class SeededNoise(NoiseSource):
    """Stock-like random noise, reproducible: numpy's generator seeded with (seed, stream)."""

    def __init__(self, seed: int):
        self.seed = int(seed)
        self.description = f"seeded:{self.seed}"

    def sine_noise(self, n_samples, batch=1, stream=0):
        rng = np.random.default_rng([self.seed, int(stream)])
        phase = rng.random((batch, N_HARMONICS))
        phase[:, 0] = 0.0  # SineGen keeps the fundamental's initial phase at 0
        return SineNoise(phase, rng.standard_normal((batch, n_samples, N_HARMONICS)))


class GivenNoise(NoiseSource):
    """Noise arrays supplied by the caller (e.g. drawn by torch to reproduce stock kokoro exactly)."""

    description = "given"

    def __init__(self, noise: SineNoise):
        self.noise = noise

    def sine_noise(self, n_samples, batch=1, stream=0):
        if self.noise.n_samples != n_samples or self.noise.initial_phase.shape[0] != batch:
            raise ValueError(
                f"given noise is for batch {self.noise.initial_phase.shape[0]} x {self.noise.n_samples} samples; "
                f"this utterance needs batch {batch} x {n_samples}"
            )
        return self.noise


def noise_source(spec: str | int | NoiseSource | None) -> NoiseSource:
    """'zero', 'seeded:N' or an int seed, or a NoiseSource -> NoiseSource."""
    if isinstance(spec, NoiseSource):
        return spec
    if isinstance(spec, int) and not isinstance(spec, bool):
        return SeededNoise(spec)
    if spec == "zero":
        return ZeroNoise()
    if isinstance(spec, str) and spec.startswith("seeded:") and spec[len("seeded:") :].lstrip("-").isdigit():
        return SeededNoise(int(spec[len("seeded:") :]))
    raise InputError(f"noise must be 'zero', 'seeded:N', an int seed or a NoiseSource, got {spec!r}")
