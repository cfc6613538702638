"""Run compiled components with the Relax VM, plus the host-side steps between them. Never imports torch.

`TVMKokoro` chains the five components exactly like pt.dynamic: ALBERT -> duration -> (host) durations and
alignment as a gather -> F0N and text encoder -> (host) gather -> decoder, with SineGen noise as inputs.
Artifacts come from a provider `(component, length) -> Artifact`, so building (which needs torch) stays in
kokoro_tvm.compile and this module only loads and runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from kokoro_tvm.artifacts import Artifact, ArtifactError
from kokoro_tvm.config import SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.noise import NoiseSource, ZeroNoise
from kokoro_tvm.stages import Stages, alignment_from_durations, durations_from_logits

log = logging.getLogger(__name__)

ArtifactProvider = Callable[[str, int], Artifact]


class ComponentRunner:
    """One loaded artifact: call it with numpy inputs, get a tuple of numpy outputs."""

    def __init__(self, artifact: Artifact):
        import tvm

        self.artifact = artifact
        try:
            self.vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(artifact.library)), tvm.cpu())
        except Exception as exc:  # TVM raises its own error types for unreadable libraries
            raise ArtifactError(f"cannot load compiled library {artifact.library}: {exc}") from exc
        self.params = [tvm.runtime.tensor(p) for p in artifact.load_params()]
        self._tensor = tvm.runtime.tensor

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        out = self.vm["main"](*(self._tensor(np.ascontiguousarray(x)) for x in inputs), *self.params)
        if hasattr(out, "numpy"):
            return (out.numpy(),)
        return tuple(out[i].numpy() for i in range(len(out)))


class TVMKokoro:
    """The compiled model for one dtype; components are loaded on first use of each shape and kept."""

    def __init__(self, provider: ArtifactProvider, dtype: str = "float32"):
        self.provider = provider
        self.dtype = np.dtype(dtype)
        self._runners: dict[tuple[str, int], ComponentRunner] = {}

    def runner(self, component: str, length: int) -> ComponentRunner:
        key = (component, length)
        if key not in self._runners:
            self._runners[key] = ComponentRunner(self.provider(component, length))
        return self._runners[key]

    def run_stages(
        self, padded_ids, style: np.ndarray, speed: float = 1.0, noise: NoiseSource | None = None, stream: int = 0
    ) -> Stages:
        """Same contract as kokoro_tvm.reference.run_stages (exact-length shapes, batch 1)."""
        noise = noise or ZeroNoise()
        ids = np.asarray(padded_ids, dtype=np.int64)[None]  # [1, T]
        n_tokens = ids.shape[1]
        style = np.asarray(style, dtype=self.dtype).reshape(1, -1)
        prosody, decoder_style = style[:, STYLE_DIM:], style[:, :STYLE_DIM]
        token_lengths = np.array([n_tokens], dtype=np.int64)

        (d_en,) = self.runner("albert", n_tokens)(ids, np.ones_like(ids))
        duration_logits, d = self.runner("duration", n_tokens)(d_en, prosody, token_lengths)
        durations = durations_from_logits(duration_logits, speed)
        alignment = alignment_from_durations(durations)
        n_frames = alignment.shape[0]
        frame_lengths = np.array([n_frames], dtype=np.int64)
        en = np.ascontiguousarray(d.transpose(0, 2, 1)[:, :, alignment])  # [1, 640, F]
        F0, N = self.runner("f0n", n_frames)(en, prosody, frame_lengths)
        (t_en,) = self.runner("text_encoder", n_tokens)(ids, token_lengths)
        asr = np.ascontiguousarray(t_en[:, :, alignment])  # [1, 512, F]
        sine = noise.sine_noise(n_frames * SAMPLES_PER_FRAME, batch=1, stream=stream)
        (audio,) = self.runner("decoder", n_frames)(
            asr, F0, N, decoder_style, sine.initial_phase.astype(self.dtype), sine.additive.astype(self.dtype)
        )
        return Stages(
            token_ids=ids[0],
            style=style,
            d_en=d_en,
            d=d,
            duration_logits=duration_logits,
            durations=durations,
            alignment=alignment,
            en=en,
            F0=F0,
            N=N,
            t_en=t_en,
            asr=asr,
            audio=audio.reshape(-1),
            noise=noise.description,
        )
