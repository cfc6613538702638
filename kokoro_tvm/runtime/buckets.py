"""Bucket sets: which static lengths get compiled, and which one an utterance runs in; or DynamicLengths, one
symbolic-length build per component. Imports neither torch nor TVM.

Two independent axes: tokens T (ALBERT, duration, text encoder; at most MAX_POSITIONS) and aligned frames F
(F0N, decoder). An utterance runs in the smallest bucket of each axis that holds it; the masked components make
the padded result equal to the unpadded model's (NOTES/masking.md). A length past the largest frame bucket is
never truncated: it is rounded up to a multiple of OVERFLOW_FRAMES and built on demand like any bucket.

Why the chosen set (DEFAULT_SET) is what it is, measured over kokoro_tvm/data/sentences_en.txt: NOTES/bucketing.md;
why the runtime defaults to DynamicLengths instead: NOTES/dynamic_shapes.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kokoro_tvm.components import (
    FRAME_COMPONENTS,
    FRAMES,
    LENGTH_TILE,
    NAMES,
    SYMBOLIC_MAX_LENGTH,
    TOKEN_COMPONENTS,
    TOKENS,
)
from kokoro_tvm.config import MAX_POSITIONS, SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.errors import InputError

# Every bucket is a multiple of ALIGN: the CPU schedules tile the contiguous axis 32 wide (the register tile for
# float32), so ALBERT's attention (T x T) and the generator's convolutions never fall to the slow fallback.
ALIGN = 32
OVERFLOW_FRAMES = 256  # past the largest frame bucket: round up to this (padding overhead < 256 frames)


class BucketSpecError(InputError):
    """A --buckets value that does not describe a bucket set."""


def round_up(length: int, step: int) -> int:
    return -(-int(length) // step) * step


@dataclass(frozen=True)
class BucketSet:
    name: str
    tokens: tuple[int, ...]
    frames: tuple[int, ...]
    overflow: int = OVERFLOW_FRAMES  # frame lengths past frames[-1] round up to a multiple of this
    symbolic = False  # one static build per bucket (DynamicLengths: one symbolic build per component)

    def __post_init__(self):
        for axis, sizes in (("token", self.tokens), ("frame", self.frames)):
            if not sizes:
                raise BucketSpecError(f"bucket set {self.name!r} has no {axis} buckets")
            if list(sizes) != sorted(set(sizes)) or sizes[0] < ALIGN or any(s % ALIGN for s in sizes):
                raise BucketSpecError(
                    f"{axis} buckets of {self.name!r} must be increasing multiples of {ALIGN}, got {list(sizes)}"
                )
        if self.overflow < ALIGN or self.overflow % ALIGN:
            raise BucketSpecError(f"the overflow step must be a multiple of {ALIGN}, got {self.overflow}")
        if self.tokens[-1] > MAX_POSITIONS:
            raise BucketSpecError(f"token buckets stop at {MAX_POSITIONS} (ALBERT's positions), got {self.tokens[-1]}")

    def token_bucket(self, n_tokens: int) -> int:
        if not 1 <= n_tokens <= MAX_POSITIONS:
            raise ValueError(f"an utterance has 1..{MAX_POSITIONS} tokens, got {n_tokens}")
        return next((b for b in self.tokens if b >= n_tokens), min(round_up(n_tokens, ALIGN), MAX_POSITIONS))

    def frame_bucket(self, n_frames: int) -> int:
        if n_frames < 1:
            raise ValueError(f"an utterance has at least one frame, got {n_frames}")
        return next((b for b in self.frames if b >= n_frames), round_up(n_frames, self.overflow))

    @property
    def artifacts(self) -> int:
        """Compiled components the whole set needs, both axes."""
        return len(TOKEN_COMPONENTS) * len(self.tokens) + len(FRAME_COMPONENTS) * len(self.frames)

    def describe(self) -> str:
        return f"{self.name}: tokens {list(self.tokens)}, frames {list(self.frames)}, then multiples of {self.overflow}"


class TooLongError(InputError):
    """An utterance longer than the symbolic-length builds take (never truncated)."""


@dataclass(frozen=True)
class DynamicLengths:
    """`--buckets dynamic`: one symbolic-length build per component (kokoro_tvm.compiler.symbolic) runs every
    length, padded up to the next multiple of LENGTH_TILE (at most LENGTH_TILE - 1 masked steps). Lengths past
    SYMBOLIC_MAX_LENGTH are refused with one line, never truncated."""

    name: str = "dynamic"
    tile: int = LENGTH_TILE
    max_tokens: int = SYMBOLIC_MAX_LENGTH[TOKENS]
    max_frames: int = SYMBOLIC_MAX_LENGTH[FRAMES]
    symbolic = True
    artifacts = len(NAMES)

    def token_bucket(self, n_tokens: int) -> int:
        if not 1 <= n_tokens <= self.max_tokens:
            raise ValueError(f"an utterance has 1..{self.max_tokens} tokens, got {n_tokens}")
        return round_up(n_tokens, self.tile)

    def frame_bucket(self, n_frames: int) -> int:
        if n_frames < 1:
            raise ValueError(f"an utterance has at least one frame, got {n_frames}")
        if n_frames > self.max_frames:
            seconds = self.max_frames * SAMPLES_PER_FRAME / SAMPLE_RATE
            raise TooLongError(
                f"this utterance needs {n_frames} frames; the dynamic build speaks at most {self.max_frames} "
                f"({seconds:g} s) per chunk: use a faster speed, shorter sentences or --buckets bucketed"
            )
        return round_up(n_frames, self.tile)

    def describe(self) -> str:
        return (
            f"{self.name}: one symbolic build per component, lengths padded to multiples of {self.tile} "
            f"(up to {self.max_tokens} tokens, {self.max_frames} frames)"
        )


def geometric(lo: int, hi: int, ratio: float) -> tuple[int, ...]:
    """lo, then each size about `ratio` times the previous (rounded up to ALIGN), the last one exactly hi."""
    if ratio <= 1:
        raise BucketSpecError(f"a geometric ratio must exceed 1, got {ratio}")
    sizes = [round_up(lo, ALIGN)]
    while sizes[-1] < hi:
        grown = max(round_up(math.ceil(sizes[-1] * ratio), ALIGN), sizes[-1] + ALIGN)
        # a last step under half a ratio is merged into hi (no 1984-then-2048 pairs)
        sizes.append(round_up(hi, ALIGN) if grown * (1 + (ratio - 1) / 2) >= hi else grown)
    return tuple(sizes)


# The frame range the sets cover: a full 510-phoneme chunk at speed 1 is about 1,300-1,700 frames here
# (NOTES/bucketing.md); slower speech overflows into OVERFLOW_FRAMES steps.
MAX_FRAMES = 2048
CANDIDATES: dict[str, BucketSet] = {
    s.name: s
    for s in (
        BucketSet("pow2", geometric(32, MAX_POSITIONS, 2.0), geometric(64, MAX_FRAMES, 2.0)),
        BucketSet("geo1.5", geometric(32, MAX_POSITIONS, 1.5), geometric(64, MAX_FRAMES, 1.5)),
        BucketSet("geo1.25", geometric(32, MAX_POSITIONS, 1.25), geometric(64, MAX_FRAMES, 1.25)),
        # The earlier public effort's frame buckets; its token axis was not bucketed (512 always).
        BucketSet("earlier", (MAX_POSITIONS,), (256, 512, 1024, 2048)),
        # Every multiple of ALIGN: the least padding that keeps the schedules' tiles whole, but one build per
        # distinct length (what `kokoro-tvm bench` times as TVM).
        BucketSet(
            "align32",
            tuple(range(ALIGN, MAX_POSITIONS + 1, ALIGN)),
            tuple(range(ALIGN, MAX_FRAMES + 1, ALIGN)),
            overflow=ALIGN,
        ),
    )
}
DEFAULT_SET = "geo1.25"  # the bucket set chosen over the corpus (NOTES/bucketing.md), `--buckets bucketed`
# What `--buckets default` (the default of say, bench, compile and TVMKokoro) means: the symbolic builds, since
# they met their bars for build time, disk, speed and fidelity (NOTES/dynamic_shapes.md).
DEFAULT_POLICY = "dynamic"
POLICY_ALIASES = {"default": DEFAULT_POLICY, "bucketed": DEFAULT_SET}


def parse_buckets(spec: str) -> BucketSet | DynamicLengths:
    """'default' (DEFAULT_POLICY), 'dynamic' (DynamicLengths), 'bucketed' (the chosen set, DEFAULT_SET), a named
    set (see CANDIDATES) or an explicit set: 'tokens=64,128,512;frames=256,1024'."""
    spec = POLICY_ALIASES.get(spec.strip(), spec.strip())
    if spec in CANDIDATES:
        return CANDIDATES[spec]
    if spec == "dynamic":
        return DynamicLengths()
    fields = dict(part.split("=", 1) for part in spec.split(";") if "=" in part)
    if set(fields) != {"tokens", "frames"}:
        raise BucketSpecError(
            f"unknown bucket set {spec!r}: use one of {', '.join([*POLICY_ALIASES, 'dynamic', *CANDIDATES])} "
            "or 'tokens=64,128,...;frames=256,512,...'"
        )
    try:
        tokens, frames = (tuple(int(x) for x in fields[k].split(",") if x.strip()) for k in ("tokens", "frames"))
    except ValueError as exc:
        raise BucketSpecError(f"bucket sizes must be integers: {spec!r}") from exc
    return BucketSet("custom", tokens, frames)
