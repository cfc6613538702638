"""The backends `synthesize` speaks through: PyTorch pt.dynamic and the compiled model. Each turns one chunk (padded
token ids, a style row, speed, noise) into audio and durations; the compiled one also speaks many chunks B at a time
(`speak_many`, for kokoro_tvm.synthesis.batch)."""

from __future__ import annotations

import logging

import numpy as np

from kokoro_tvm.compiled import READY, check_device, check_precision, ready_or_built, ready_start, resolve_precision
from kokoro_tvm.components import PRECISIONS
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.text import Chunk
from kokoro_tvm.reference.noise import NoiseSource
from kokoro_tvm.runtime import ready
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.runtime.kokoro import Utterance

log = logging.getLogger(__name__)

BACKENDS = ("torch", "tvm")


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

    def __init__(self, compiled, weights, precision: str = "fp32", choice: str = "asked for", started: str = "built"):
        self.compiled, self.weights = compiled, weights  # a runtime.TVMKokoro and the WeightsInfo
        self.shapes: list[tuple[int, int]] = []  # (token, frame) bucket of each chunk spoken
        self.precision, self.choice, self.started = precision, choice, started

    @classmethod
    def load(
        cls, weights=None, precision: str = "auto", buckets: str = "default", device: str = "cpu", batch: int = 1
    ) -> TVMBackend:
        """`precision`: a kokoro_tvm.components.PRECISIONS name (fp32, fp64, bf16, int8) or "auto" (the fastest
        on this CPU by its tuning record). The symbolic-length builds on the CPU start from the ready index
        (kokoro_tvm.runtime.ready) without torch when they are cached; otherwise the weights load, the five builds
        are found or built (with a progress bar) and the index is written. `batch` > 1 (`speak_many`): the builds
        for that batch are found or built on first use, which needs the weights (the ready index holds batch 1)."""

        asked = precision
        bucket_set = None if buckets == "exact" else parse_buckets(buckets)  # bad specs fail before any load
        found = ready_start(weights, asked, bucket_set, device, batch)  # cached builds: no torch, no TVM compiler
        if found is not None:
            compiled, info, precision, choice = found
            log.info("tvm backend, %s (%s): %s", precision, choice, READY)
            return cls(compiled, info, precision, choice, READY)
        precision, choice = resolve_precision(precision, device)
        dtype = check_precision(precision, device).dtype  # so does a CPU without bf16 for a bf16 build
        check_device(device, dtype)  # and a missing device
        compiled, info, started = ready_or_built(weights, precision, bucket_set, device, asked, batch, choice)
        log.info("tvm backend, %s (%s): %s", precision, choice, started)
        return cls(compiled, info, precision, choice, started)

    def describe(self, last_chunks: int) -> dict:
        """The bucket policy and the (token, frame) shapes the last `last_chunks` chunks ran in."""
        buckets = self.compiled.buckets
        return {
            "buckets": buckets.describe() if buckets else "exact",
            "shapes": self.shapes[-last_chunks:],
            "device": self.compiled.device,
            "precision": self.precision,
            "precision_choice": self.choice,
            "started": self.started,
            # the components whose build runs some convs on AMX tiles (kokoro_tvm.compiler.amx)
            "amx": [a.component for a in self.compiled.loaded_artifacts() if a.manifest["key"].get("amx_kernel")],
        }

    def speak(self, chunk: Chunk, style: np.ndarray, speed: float, noise: NoiseSource, stream: int):
        stages = self.compiled.run_stages(chunk.padded_ids, style, speed=speed, noise=noise, stream=stream)
        self.shapes.append(stages.buckets)
        return stages.audio, stages.durations

    def speak_many(self, rows: list[tuple[Chunk, np.ndarray, int]], speed: float, noise: NoiseSource, batch: int):
        """(audio, durations) of each (chunk, style, noise stream), `batch` chunks to a call of each component
        (kokoro_tvm.runtime.kokoro.TVMKokoro.run_many), in the order given."""

        utterances = [Utterance(chunk.padded_ids, style, stream) for chunk, style, stream in rows]
        spoken = self.compiled.run_many(utterances, batch, speed=speed, noise=noise)
        self.shapes.extend(stages.buckets for stages in spoken)
        return [(stages.audio, stages.durations) for stages in spoken]


def check_backend(name: str, device: str = "cpu", precision: str = "fp32", weights=None) -> None:
    """The backend's options hold together and its device exists, else one clear error, before the G2P (misaki
    and spaCy load for several seconds) and before any weights: `say Hi. --device cuda` fails in 1.1 s, not 8 s."""
    if name not in BACKENDS:
        raise InputError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
    if precision != "auto" and precision not in PRECISIONS:  # no precision at all, for any backend
        raise InputError(f"precision must be auto or one of {', '.join(PRECISIONS)}, got {precision!r}")
    if name != "tvm" and device != "cpu":
        raise InputError(f"--device {device} applies to the tvm backend only (the {name} backend runs on the CPU)")
    if name != "tvm" and precision not in ("fp32", "auto"):
        raise InputError(f"--precision {precision} applies to the tvm backend only (the {name} backend is fp32)")
    if name == "tvm" and not ready.indexed(weights, precision, device):  # an entry: checked when it was written
        chosen = check_precision(resolve_precision(precision, device)[0], device)  # a CPU without bf16 for bf16
        check_device(device, chosen.dtype)


def make_backend(
    name: str, weights=None, buckets: str = "default", device: str = "cpu", precision: str = "fp32", batch: int = 1
):
    """The backend `name`, loaded; its options are `check_backend`'s to refuse (`_Request.make` checks them before
    the G2P, and loads this after it)."""
    if name == "torch":
        return TorchBackend.load(weights)
    if name == "tvm":
        return TVMBackend.load(weights, precision=precision, buckets=buckets, device=device, batch=batch)
    raise InputError(f"unknown backend {name!r}; available: {', '.join(BACKENDS)}")
