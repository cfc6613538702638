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
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.config import KOKORO_82M_CONFIG, SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.errors import InputError
from kokoro_tvm.machine import available_memory
from kokoro_tvm.reference.noise import NoiseSource, ZeroNoise
from kokoro_tvm.reference.stages import Stages, alignment_from_durations, durations_from_logits
from kokoro_tvm.runtime.buckets import BucketSet, DynamicLengths
from kokoro_tvm.runtime.devices import require_device
from kokoro_tvm.runtime.vm import ComponentRunner

log = logging.getLogger(__name__)

ArtifactProvider = Callable[[str, int | None, int], Artifact]  # (component, length, batch); length None: symbolic
N_TOKENS = KOKORO_82M_CONFIG["n_token"]  # rows of the token embeddings (ALBERT's and the text encoder's)
# What one call of a batched decoder adds to the process per row and frame: fp32 927-931 KiB at batch 16, 589-622
# at batch 2, 231-254 at batch 1 (256 frames a row, 2-core Zen 5, three runs; `python -m kokoro_tvm.studies.batching
# --memory decoder:256 --batches 1,2,16`); bf16 and int8 at most 546 at any batch. fp32's largest, 3% over for the
# spread between runs. A batch that needs more than the machine has left is refused before the F0 and the decoder
# run, rather than killed by the kernel's OOM killer part way through.
BATCH_BYTES_PER_ROW_FRAME = 960 * 1024


def batch_memory_refusal(batch: int, frames: int, available: int | None) -> str | None:
    """Why a CPU batch of `batch` rows padded to `frames` frames cannot run with `available` bytes free (None:
    unknown, not checked), or None. Batch 1 is never refused: it is what every other way of running does."""
    need = batch * frames * BATCH_BYTES_PER_ROW_FRAME
    if batch == 1 or available is None or need <= available:
        return None
    return (
        f"a batch of {batch} utterances of up to {frames} frames needs about {need / 2**30:.1f} GiB for the decoder "
        f"and {available / 2**30:.1f} GiB is free: use a smaller batch size (--batch-size, synthesize_batch's batch)"
    )


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
        self._runners: dict[tuple[str, int | None, int], ComponentRunner] = {}

    def runner(self, component: str, length: int, batch: int = 1) -> ComponentRunner:
        """The loaded component that runs `batch` utterances of `length` steps: its static build, or its
        symbolic build."""
        key = (component, None if self.buckets is not None and self.buckets.symbolic else length, batch)
        if key not in self._runners:
            self._runners[key] = ComponentRunner(self.provider(*key), self.device)
        return self._runners[key]

    def loaded_artifacts(self) -> list[Artifact]:
        """The artifacts loaded so far (each once), in load order."""
        return [runner.artifact for runner in self._runners.values()]

    def run_component(self, component: str, length: int, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        """Run `component` on inputs padded to `length` steps, as many utterances as the first input has rows (a
        symbolic build also gets its tile count)."""
        runner = self.runner(component, length, inputs[0].shape[0])
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
        (stages,) = self.run_batch([Utterance(padded_ids, style, stream)], speed, noise, token_bucket, frame_bucket)
        return stages

    def run_batch(
        self,
        utterances: Sequence[Utterance],
        speed: float = 1.0,
        noise: NoiseSource | None = None,
        token_bucket: int | None = None,
        frame_bucket: int | None = None,
    ) -> list[Stages]:
        """`run_stages` for B utterances in one call of each component (builds for batch B): the token axis
        padded to the longest utterance's bucket, the frames to the longest alignment's; durations and alignments
        per utterance on the host, each utterance's SineGen noise from its own stream. Each Stages equals the
        utterance's own `run_stages` (the components are padding-invariant per row: tests/test_batched.py)."""
        noise = noise or ZeroNoise()
        tokens = _TokenSide.run(self, utterances, speed, token_bucket)
        n_frames = max(a.shape[0] for a in tokens.alignments)
        if frame_bucket is None and self.buckets is not None:
            frame_bucket = self.buckets.frame_bucket(n_frames)
        f_bucket = _bucket(frame_bucket, n_frames, "frame")
        refusal = batch_memory_refusal(len(utterances), f_bucket, available_memory() if self.device == "cpu" else None)
        if refusal:
            raise InputError(refusal)
        frame_lengths = np.array([a.shape[0] for a in tokens.alignments], dtype=np.int64)
        en = [
            np.ascontiguousarray(d.transpose(0, 2, 1)[:, :, a])
            for d, a in zip(tokens.d, tokens.alignments, strict=True)
        ]
        asr = [np.ascontiguousarray(t[:, :, a]) for t, a in zip(tokens.t_en, tokens.alignments, strict=True)]
        F0, N = self.run_component("f0n", f_bucket, _stack(en, f_bucket), tokens.prosody, frame_lengths)
        sines = [
            self._sine_noise(noise, int(f), f_bucket, u.stream) for f, u in zip(frame_lengths, utterances, strict=True)
        ]
        phase, additive = (np.concatenate(parts) for parts in zip(*sines, strict=True))
        (audio,) = self.run_component(
            "decoder", f_bucket, _stack(asr, f_bucket), F0, N, tokens.decoder_style, phase, additive, frame_lengths
        )
        return [
            Stages(
                **tokens.stages(b),
                en=en[b],
                F0=F0[b : b + 1, : 2 * f],
                N=N[b : b + 1, : 2 * f],
                asr=asr[b],
                audio=audio[b, : f * SAMPLES_PER_FRAME],
                noise=noise.description,
                buckets=(tokens.bucket, f_bucket),
            )
            for b, f in enumerate(frame_lengths)
        ]

    def run_many(
        self, utterances: Sequence[Utterance], batch: int, speed: float = 1.0, noise: NoiseSource | None = None
    ) -> list[Stages]:
        """Every utterance through `run_batch` in groups of up to `batch`, shortest first (utterances of like length
        share a group, so little is padding), returned in the order given."""
        if batch < 1:
            raise InputError(f"the batch size must be a positive number, got {batch}")
        order = sorted(range(len(utterances)), key=lambda i: len(utterances[i].padded_ids))
        found: dict[int, Stages] = {}
        for start in range(0, len(order), batch):
            group = order[start : start + batch]
            found.update(zip(group, self.run_batch([utterances[i] for i in group], speed, noise), strict=True))
        return [found[i] for i in range(len(utterances))]


def token_ids(padded_ids: Sequence[int]) -> np.ndarray:
    """One utterance's ids as int64, refused unless whole numbers below N_TOKENS: the compiled embeddings read
    their rows unchecked (TVM's "fast" take), so an id past the table would read other memory, and a float id
    would be truncated to another token."""
    try:
        ids = np.asarray(padded_ids)
    except ValueError:  # a ragged list
        raise InputError("token ids must be a list of whole numbers, got a ragged list") from None
    if ids.ndim != 1 or (ids.size and not np.issubdtype(ids.dtype, np.integer)):
        raise InputError(f"token ids must be a list of whole numbers, got {ids.dtype} of shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= N_TOKENS):
        raise InputError(f"token ids must be 0..{N_TOKENS - 1}, got {int(ids.min())}..{int(ids.max())}")
    return ids.astype(np.int64)


@dataclass(frozen=True)
class Utterance:
    """One row of a batch: token ids with the pad token at both ends, its style row [256] (decoder half, then
    prosody), and its SineGen noise stream (a chunk's index within its text, whatever its place in the batch)."""

    padded_ids: Sequence[int]
    style: np.ndarray
    stream: int = 0


@dataclass
class _TokenSide:
    """ALBERT, the duration path and the text encoder for a batch, split back into its utterances."""

    ids: list[np.ndarray]  # [T_b] each
    style: np.ndarray  # [B, 256]
    d_en: list[np.ndarray]
    d: list[np.ndarray]
    duration_logits: list[np.ndarray]
    durations: list[np.ndarray]
    alignments: list[np.ndarray]
    t_en: list[np.ndarray]
    bucket: int

    @property
    def prosody(self) -> np.ndarray:
        return self.style[:, STYLE_DIM:]

    @property
    def decoder_style(self) -> np.ndarray:
        return self.style[:, :STYLE_DIM]

    @classmethod
    def run(cls, model: TVMKokoro, utterances: Sequence[Utterance], speed: float, token_bucket: int | None):
        if not utterances:
            raise ValueError("a batch needs at least one utterance")
        ids = [token_ids(u.padded_ids) for u in utterances]
        lengths = np.array([len(i) for i in ids], dtype=np.int64)
        n_tokens = int(lengths.max())
        if token_bucket is None and model.buckets is not None:
            token_bucket = model.buckets.token_bucket(n_tokens)
        t_bucket = _bucket(token_bucket, n_tokens, "token")
        style = np.concatenate([np.asarray(u.style, dtype=model.dtype).reshape(1, -1) for u in utterances])
        ids_b = _stack([i[None] for i in ids], t_bucket)  # pad token 0 past each end
        mask_b = _stack([np.ones((1, len(i)), dtype=np.int64) for i in ids], t_bucket)
        (d_en,) = model.run_component("albert", t_bucket, ids_b, mask_b)
        logits, d = model.run_component("duration", t_bucket, d_en, style[:, STYLE_DIM:], lengths)
        (t_en,) = model.run_component("text_encoder", t_bucket, ids_b, lengths)
        rows = list(enumerate(lengths))
        logits = [logits[b : b + 1, :n] for b, n in rows]
        durations = [durations_from_logits(x, speed) for x in logits]
        return cls(
            ids=ids,
            style=style,
            d_en=[d_en[b : b + 1, :, :n] for b, n in rows],
            d=[d[b : b + 1, :n] for b, n in rows],
            duration_logits=logits,
            durations=durations,
            alignments=[alignment_from_durations(x) for x in durations],
            t_en=[t_en[b : b + 1, :, :n] for b, n in rows],
            bucket=t_bucket,
        )

    def stages(self, b: int) -> dict:
        """Utterance b's token-side fields of its Stages."""
        names = ("d_en", "d", "duration_logits", "durations", "t_en")
        found = {name: getattr(self, name)[b] for name in names}
        return dict(found, token_ids=self.ids[b], style=self.style[b : b + 1], alignment=self.alignments[b])


class BucketTooSmallError(InputError):
    """A bucket given by hand that is shorter than the utterance (never truncated)."""


def _bucket(bucket: int | None, length: int, axis: str) -> int:
    if bucket is None:
        return length
    if bucket < length:
        raise BucketTooSmallError(f"the {axis} bucket {bucket} is shorter than the utterance ({length} {axis}s)")
    return int(bucket)


def _stack(rows: list[np.ndarray], length: int) -> np.ndarray:
    """Rows [1, ..., L_b] zero-padded on the last axis to `length` and stacked: [B, ..., length]."""
    return np.concatenate([_pad_last(row, length) for row in rows])


def _pad_last(x: np.ndarray, length: int) -> np.ndarray:
    """Zero-pad the last axis to `length`."""
    pad = length - x.shape[-1]
    return x if pad == 0 else np.concatenate([x, np.zeros(x.shape[:-1] + (pad,), x.dtype)], axis=-1)
