"""Run compiled components with the Relax VM, plus the host-side steps between them. Never imports torch.

`TVMKokoro` chains the five components exactly like pt.dynamic: ALBERT -> duration -> (host) durations and
alignment as a gather -> F0N and text encoder -> (host) gather -> decoder, with SineGen noise as inputs.
Artifacts come from a provider `(component, length) -> Artifact`, so building (which needs torch) stays in
kokoro_tvm.compile and this module only loads and runs. With a kokoro_tvm.buckets.BucketSet, each utterance
runs in the smallest token and frame buckets that hold it; without one, at its exact lengths.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

import numpy as np

from kokoro_tvm.artifacts import Artifact, ArtifactError
from kokoro_tvm.buckets import BucketSet
from kokoro_tvm.config import SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.noise import NoiseSource, ZeroNoise
from kokoro_tvm.stages import Stages, alignment_from_durations, durations_from_logits

log = logging.getLogger(__name__)

ArtifactProvider = Callable[[str, int], Artifact]

DEVICES = ("cpu", "metal", "cuda")
_WHERE = {
    "metal": "Metal runs need macOS on an Apple GPU; here, `kokoro-tvm gpu-build --target metal` generates and "
    "checks the Metal sources",
    "cuda": "CUDA runs need an NVIDIA GPU and its driver; `kokoro-tvm gpu-build --target cuda` generates and "
    "compiles the sources without one",
}


class DeviceUnavailableError(ValueError):
    """The requested device does not exist on this machine."""


def device_exists(name: str) -> bool:
    """Whether TVM sees device `name` (index 0) on this machine."""
    import tvm

    try:
        return bool(tvm.device(name, 0).exist)
    except Exception:  # a TVM runtime built without that device's support
        return False


def require_device(name: str) -> None:
    """Raise DeviceUnavailableError (one clear line) unless device `name` exists here."""
    if name not in DEVICES:
        raise DeviceUnavailableError(f"unknown device {name!r}; choose from {', '.join(DEVICES)}")
    if not device_exists(name):
        raise DeviceUnavailableError(f"no {name} device on this machine: {_WHERE.get(name, '')}")


def use_every_cpu() -> None:
    """TVM's thread pool defaults to half the logical CPUs on x86 (it assumes hyper-threads): one thread on a
    2-vCPU machine, which made every compiled component ~1.7x slower outside `kokoro-tvm bench` (which sets
    the count). Unless TVM_NUM_THREADS is set, use every CPU this process may run on; TVM reads it once, when
    its pool starts (the first parallel kernel)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cpus))


class ComponentRunner:
    """One loaded artifact: call it with numpy inputs, get a tuple of numpy outputs."""

    def __init__(self, artifact: Artifact, device: str = "cpu"):
        import tvm

        use_every_cpu()
        self.artifact = artifact
        self.device = tvm.device(device, 0)
        try:
            self.vm = tvm.relax.VirtualMachine(tvm.runtime.load_module(str(artifact.library)), self.device)
        except Exception as exc:  # TVM raises its own error types for unreadable libraries
            raise ArtifactError(f"cannot load compiled library {artifact.library}: {exc}") from exc
        self.params = [tvm.runtime.tensor(p, device=self.device) for p in artifact.load_params()]
        transform = artifact.manifest.get("transform_params")
        if transform:  # weight-only work lifted out of main at build time: done once, here
            lifted = self.vm[transform](self.params)
            self.params = [lifted[i] for i in range(len(lifted))]
        self._tensor = tvm.runtime.tensor

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        tensors = (self._tensor(np.ascontiguousarray(x), device=self.device) for x in inputs)
        out = self.vm["main"](*tensors, *self.params)
        if hasattr(out, "numpy"):
            return (out.numpy(),)
        return tuple(out[i].numpy() for i in range(len(out)))


class TVMKokoro:
    """The compiled model for one dtype on one device ("cpu", or "metal"/"cuda" with artifacts built for it);
    components are loaded on first use of each shape and kept."""

    def __init__(
        self, provider: ArtifactProvider, dtype: str = "float32", buckets: BucketSet | None = None, device: str = "cpu"
    ):
        if device != "cpu":
            require_device(device)
        self.provider = provider
        self.dtype = np.dtype(dtype)
        self.buckets = buckets
        self.device = device
        self._runners: dict[tuple[str, int], ComponentRunner] = {}

    def runner(self, component: str, length: int) -> ComponentRunner:
        key = (component, length)
        if key not in self._runners:
            self._runners[key] = ComponentRunner(self.provider(component, length), self.device)
        return self._runners[key]

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
        """Same contract as kokoro_tvm.reference.run_stages (batch 1). The token axis is padded to
        `token_bucket` and the aligned-frame axis to `frame_bucket` (default: the bucket set's pick, or the
        exact length without a set); every stage returned is the valid prefix, which the padding-invariant
        components make equal to the unpadded model's."""
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

        (d_en,) = self.runner("albert", t_bucket)(ids_b, mask_b)
        duration_logits, d = self.runner("duration", t_bucket)(d_en, prosody, token_lengths)
        duration_logits, d = duration_logits[:, :n_tokens], d[:, :n_tokens]
        durations = durations_from_logits(duration_logits, speed)
        alignment = alignment_from_durations(durations)
        n_frames = alignment.shape[0]
        if frame_bucket is None and self.buckets is not None:
            frame_bucket = self.buckets.frame_bucket(n_frames)
        f_bucket = _bucket(frame_bucket, n_frames, "frame")
        frame_lengths = np.array([n_frames], dtype=np.int64)
        en = np.ascontiguousarray(d.transpose(0, 2, 1)[:, :, alignment])  # [1, 640, F]
        F0, N = self.runner("f0n", f_bucket)(_pad_last(en, f_bucket), prosody, frame_lengths)
        (t_en,) = self.runner("text_encoder", t_bucket)(ids_b, token_lengths)
        t_en = t_en[:, :, :n_tokens]
        asr = np.ascontiguousarray(t_en[:, :, alignment])  # [1, 512, F]
        sine = noise.sine_noise(n_frames * SAMPLES_PER_FRAME, batch=1, stream=stream)
        additive = np.zeros((1, f_bucket * SAMPLES_PER_FRAME, sine.additive.shape[2]), dtype=self.dtype)
        additive[:, : sine.n_samples] = sine.additive
        (audio,) = self.runner("decoder", f_bucket)(
            _pad_last(asr, f_bucket),
            F0,
            N,
            decoder_style,
            sine.initial_phase.astype(self.dtype),
            additive,
            frame_lengths,
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


class BucketTooSmallError(ValueError):
    pass


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
