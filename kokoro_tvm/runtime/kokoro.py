"""The compiled model end to end: five components and the host-side steps between them. Never imports torch.

`TVMKokoro` chains the five components exactly like pt.dynamic: ALBERT -> duration -> (host) durations and
alignment as a gather -> F0N and text encoder -> (host) gather -> decoder, with SineGen noise as inputs.
Artifacts come from a provider `(component, length) -> Artifact`, so building (which needs torch) stays in
kokoro_tvm.compiler and this package only loads and runs (kokoro_tvm.compiled joins the two). With a
kokoro_tvm.runtime.buckets.BucketSet, each utterance runs in the smallest token and frame buckets that hold it;
with DynamicLengths, in one symbolic-length build per component at its lengths rounded up to a whole tile (the
provider is asked for length None, and each call passes the tile count); without either, at its exact lengths.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np

from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.config import SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.errors import InputError
from kokoro_tvm.reference.noise import NoiseSource, ZeroNoise
from kokoro_tvm.reference.stages import Stages, alignment_from_durations, durations_from_logits
from kokoro_tvm.runtime.buckets import BucketSet, DynamicLengths
from kokoro_tvm.runtime.devices import require_device
from kokoro_tvm.runtime.vm import ComponentRunner

log = logging.getLogger(__name__)

ArtifactProvider = Callable[[str, int | None], Artifact]  # length None: the symbolic-length build


class TVMKokoro:
    """The compiled model for one dtype on one device ("cpu", or "metal"/"cuda" with artifacts built for it);
    components are loaded on first use of each shape and kept."""

    def __init__(
        self,
        provider: ArtifactProvider,
        dtype: str = "float32",
        buckets: BucketSet | DynamicLengths | None = None,
        device: str = "cpu",
    ):
        if device != "cpu":
            require_device(device)
        self.provider = provider
        self.dtype = np.dtype(dtype)
        self.buckets = buckets
        self.device = device
        self._runners: dict[tuple[str, int | None], ComponentRunner] = {}

    def runner(self, component: str, length: int) -> ComponentRunner:
        """The loaded component that runs `length` steps: its static build, or its symbolic build."""
        key = (component, None if self.buckets is not None and self.buckets.symbolic else length)
        if key not in self._runners:
            self._runners[key] = ComponentRunner(self.provider(*key), self.device)
        return self._runners[key]

    def loaded_artifacts(self) -> list[Artifact]:
        """The artifacts loaded so far (each once), in load order."""
        return [runner.artifact for runner in self._runners.values()]

    def run_component(self, component: str, length: int, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run `component` on inputs padded to `length` steps (a symbolic build also gets its tile count)."""
        runner = self.runner(component, length)
        tile = runner.artifact.length_tile
        if tile is None:
            return runner(*inputs)
        if length % tile:
            raise ValueError(f"{component}: length {length} is not a whole number of {tile}-step tiles")
        return runner(*inputs, runner.shape(length // tile))

    def _sine_noise(self, noise: NoiseSource, n_frames: int, f_bucket: int, stream: int):
        """SineGen's initial phase and its additive noise, zero past the valid samples of the frame bucket."""
        sine = noise.sine_noise(n_frames * SAMPLES_PER_FRAME, batch=1, stream=stream)
        additive = np.zeros((1, f_bucket * SAMPLES_PER_FRAME, sine.additive.shape[2]), dtype=self.dtype)
        additive[:, : sine.n_samples] = sine.additive
        return sine.initial_phase.astype(self.dtype), additive

    def run_stages(
        self,
        padded_ids,
        style: np.ndarray,
        speed: float = 1.0,
        noise: NoiseSource | None = None,
        stream: int = 0,
        token_bucket: int | None = None,
        frame_bucket: int | None = None,
    ) -> Stages:
        """kokoro_tvm.reference.pt_dynamic.run_stages's contract (batch 1), the token axis padded to `token_bucket`
        and the frames to `frame_bucket` (default: the bucket set's pick, else the exact length); each stage returned
        is the valid prefix, equal to the unpadded model's (the components are padding-invariant)."""
        noise = noise or ZeroNoise()
        ids = np.asarray(padded_ids, dtype=np.int64)[None]  # [1, T]
        n_tokens = ids.shape[1]
        if token_bucket is None and self.buckets is not None:
            token_bucket = self.buckets.token_bucket(n_tokens)
        t_bucket = _bucket(token_bucket, n_tokens, "token")
        style = np.asarray(style, dtype=self.dtype).reshape(1, -1)
        prosody, decoder_style = style[:, STYLE_DIM:], style[:, :STYLE_DIM]
        token_lengths = np.array([n_tokens], dtype=np.int64)
        ids_b = _pad_last(ids, t_bucket)  # pad token 0 past the end
        mask_b = _pad_last(np.ones_like(ids), t_bucket)

        (d_en,) = self.run_component("albert", t_bucket, ids_b, mask_b)
        duration_logits, d = self.run_component("duration", t_bucket, d_en, prosody, token_lengths)
        duration_logits, d = duration_logits[:, :n_tokens], d[:, :n_tokens]
        alignment = alignment_from_durations(durations := durations_from_logits(duration_logits, speed))
        n_frames = alignment.shape[0]
        if frame_bucket is None and self.buckets is not None:
            frame_bucket = self.buckets.frame_bucket(n_frames)
        f_bucket = _bucket(frame_bucket, n_frames, "frame")
        frame_lengths = np.array([n_frames], dtype=np.int64)
        en = np.ascontiguousarray(d.transpose(0, 2, 1)[:, :, alignment])  # [1, 640, F]
        F0, N = self.run_component("f0n", f_bucket, _pad_last(en, f_bucket), prosody, frame_lengths)
        (t_en,) = self.run_component("text_encoder", t_bucket, ids_b, token_lengths)
        t_en = t_en[:, :, :n_tokens]
        asr = np.ascontiguousarray(t_en[:, :, alignment])  # [1, 512, F]
        phase, additive = self._sine_noise(noise, n_frames, f_bucket, stream)
        (audio,) = self.run_component(
            "decoder", f_bucket, _pad_last(asr, f_bucket), F0, N, decoder_style, phase, additive, frame_lengths
        )
        return Stages(
            token_ids=ids[0],
            style=style,
            d_en=d_en[:, :, :n_tokens],
            d=d,
            duration_logits=duration_logits,
            durations=durations,
            alignment=alignment,
            en=en,
            F0=F0[:, : 2 * n_frames],
            N=N[:, : 2 * n_frames],
            t_en=t_en,
            asr=asr,
            audio=audio.reshape(-1)[: n_frames * SAMPLES_PER_FRAME],
            noise=noise.description,
            buckets=(t_bucket, f_bucket),
        )


class BucketTooSmallError(InputError):
    """A bucket given by hand that is shorter than the utterance (never truncated)."""


def _bucket(bucket: int | None, length: int, axis: str) -> int:
    if bucket is None:
        return length
    if bucket < length:
        raise BucketTooSmallError(f"the {axis} bucket {bucket} is shorter than the utterance ({length} {axis}s)")
    return int(bucket)


def _pad_last(x: np.ndarray, length: int) -> np.ndarray:
    """Zero-pad the last axis to `length`."""
    pad = length - x.shape[-1]
    return x if pad == 0 else np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1)
