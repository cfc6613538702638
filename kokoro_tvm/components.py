"""The component registry: the five compiled pieces of Kokoro-82M and every fact about them, in one place.

For each component: its name, the length axis it runs on (tokens T or aligned frames F), its inputs with
their shapes written in terms of that length (F0 and N are 2F long, the SineGen noise 600F), its outputs,
and the name of its torch wrapper in kokoro_tvm.compiler.export. Every stage reads it: export (wrappers,
example inputs, symbolic dimensions), the artifact cache (valid names), bucket sets and the runtime (which
axis), the studies, bench, the GPU builds and the notebooks. It sits below all of them (plain data, no torch,
no TVM) because the runtime reads it too and must import neither the compiler nor torch.

Batch B, T tokens, F aligned frames; every length input is int64 [B]:

1. albert        input_ids [B, T], attention_mask [B, T]               -> d_en [B, 512, T]
2. duration      d_en [B, 512, T], style [B, 128], token_lengths        -> duration_logits [B, T, 50], d [B, T, 640]
3. f0n           en [B, 640, F], style [B, 128], frame_lengths          -> F0 [B, 2F], N [B, 2F]
4. text_encoder  input_ids [B, T], token_lengths                        -> t_en [B, 512, T]
5. decoder       asr [B, 512, F], F0 [B, 2F], N [B, 2F], style [B, 128], initial_phase [B, 9],
                 additive_noise [B, 600 F, 9], frame_lengths            -> audio [B, 600 F]
"""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_tvm.config import MAX_POSITIONS, N_HARMONICS, SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.errors import InputError

TOKENS, FRAMES = "tokens", "frames"  # the two length axes

# What example values an input holds (kokoro_tvm.compiler.export.example_inputs draws them):
# ids: token ids < 178; ones: an all-ones mask; lengths: every sample full; normal: N(0, 1);
# f0: |N(0, 1)| * 200 (Hz-like); phase: U[0, 1).
VALUE_KINDS = ("ids", "ones", "lengths", "normal", "f0", "phase")


@dataclass(frozen=True)
class Input:
    """One input of a component. `shape` holds ints and at most one length term: "L" (the component's length)
    or a multiple of it ("2L": F0 at twice the frame rate, "600L": one audio sample per 1/600 frame)."""

    name: str
    shape: tuple[str | int, ...]  # "B" is the batch
    dtype: str  # "int64", or "float" for the build's float dtype (float32 / float64)
    values: str  # one of VALUE_KINDS

    @property
    def length_axis(self) -> int | None:
        """Which axis scales with the component's length (None: no such axis)."""
        return next((i for i, d in enumerate(self.shape) if isinstance(d, str) and d.endswith("L")), None)

    @property
    def length_multiple(self) -> int | None:
        """How many elements per unit of length along length_axis (1, 2 or 600), None without a length axis."""
        axis = self.length_axis
        return None if axis is None else int(self.shape[axis][:-1] or 1)

    def concrete_shape(self, batch: int, length: int) -> tuple[int, ...]:
        def size(d):
            if d == "B":
                return batch
            if isinstance(d, str):
                return int(d[:-1] or 1) * length
            return d

        return tuple(size(d) for d in self.shape)


@dataclass(frozen=True)
class Component:
    name: str
    axis: str  # TOKENS or FRAMES
    inputs: tuple[Input, ...]
    outputs: tuple[str, ...]
    wrapper: str  # the torch.nn.Module class in kokoro_tvm.compiler.export
    summary: str

    @property
    def input_names(self) -> tuple[str, ...]:
        return tuple(i.name for i in self.inputs)


def _ids(name):
    return Input(name, ("B", "L"), "int64", "ids")


def _lengths(name):
    return Input(name, ("B",), "int64", "lengths")


_STYLE = Input("style", ("B", STYLE_DIM), "float", "normal")

REGISTRY: dict[str, Component] = {
    c.name: c
    for c in (
        Component(
            "albert",
            TOKENS,
            (_ids("input_ids"), Input("attention_mask", ("B", "L"), "int64", "ones")),
            ("d_en",),
            "AlbertComponent",
            "ALBERT + bert_encoder",
        ),
        Component(
            "duration",
            TOKENS,
            (Input("d_en", ("B", 512, "L"), "float", "normal"), _STYLE, _lengths("token_lengths")),
            ("duration_logits", "d"),
            "DurationComponent",
            "DurationEncoder + LSTM + duration projection",
        ),
        Component(
            "f0n",
            FRAMES,
            (Input("en", ("B", 640, "L"), "float", "normal"), _STYLE, _lengths("frame_lengths")),
            ("F0", "N"),
            "F0NComponent",
            "F0 and N predictors (x2 upsampling inside)",
        ),
        Component(
            "text_encoder",
            TOKENS,
            (_ids("input_ids"), _lengths("token_lengths")),
            ("t_en",),
            "TextEncoderComponent",
            "text encoder (CNN + LSTM)",
        ),
        Component(
            "decoder",
            FRAMES,
            (
                Input("asr", ("B", 512, "L"), "float", "normal"),
                Input("F0", ("B", "2L"), "float", "f0"),
                Input("N", ("B", "2L"), "float", "normal"),
                _STYLE,
                Input("initial_phase", ("B", N_HARMONICS), "float", "phase"),
                Input("additive_noise", ("B", f"{SAMPLES_PER_FRAME}L", N_HARMONICS), "float", "normal"),
                _lengths("frame_lengths"),
            ),
            ("audio",),
            "DecoderComponent",
            "iSTFTNet decoder with explicit SineGen noise",
        ),
    )
}

NAMES: tuple[str, ...] = tuple(REGISTRY)  # pipeline order


class UnknownComponentError(InputError):
    """A component name that is not in the registry."""


def component(name: str) -> Component:
    if name not in REGISTRY:
        raise UnknownComponentError(f"unknown component {name!r}; choose from {', '.join(NAMES)}")
    return REGISTRY[name]


def on_axis(axis: str) -> tuple[str, ...]:
    """The components that run on `axis` (TOKENS or FRAMES), in pipeline order."""
    if axis not in (TOKENS, FRAMES):
        raise ValueError(f"axis must be {TOKENS!r} or {FRAMES!r}, got {axis!r}")
    return tuple(c.name for c in REGISTRY.values() if c.axis == axis)


def lengths_for(names, tokens: int, frames: int) -> dict[str, int]:
    """{component: its length} for the given token and frame counts."""
    return {name: tokens if component(name).axis == TOKENS else frames for name in names}


# The components whose convs `kokoro-tvm tune` measures (kokoro_tvm.compiler.tuning), by their share of a
# sentence's time: the decoder (about 90 %), the F0 / N predictor and the text encoder. ALBERT's and the duration
# path's matmuls run over tokens (a symbolic row extent): they keep the heuristic tile.
TUNED_COMPONENTS = ("decoder", "f0n", "text_encoder")

TOKEN_COMPONENTS = on_axis(TOKENS)
FRAME_COMPONENTS = on_axis(FRAMES)

# Symbolic-length builds (kokoro_tvm.compiler.symbolic; `--buckets dynamic`): one build per component takes
# every length that is a whole number of LENGTH_TILE steps, up to the axis's largest. 8 steps: at most 7 masked
# steps of padding. The conv kernels' column tile is 16 float32 lanes (one AVX-512 vector) where 16 divides the
# length and 8 (a ymm register, the same FLOP rate on Zen 4) where only 8 does: the frame-rate convs at an odd
# tile count; everything upsampled from the frames is a multiple of 16 anyway. On 20 corpus sentences 0.88-0.89x
# the bucket set's time, against 0.90x with 16-step tiles and 0.93x with 32 (NOTES/dynamic_shapes.md).
LENGTH_TILE = 8
SYMBOLIC_MAX_LENGTH = {
    TOKENS: MAX_POSITIONS,  # one utterance's tokens, pads included (ALBERT's positions)
    FRAMES: 5120,  # 128 s of audio (600 samples a frame); the longest the float64 parity checks cover
}

# Reduced precision (`--precision bf16`, kokoro_tvm.compiler.bf16): per component, the convolutions computed with
# bf16 operands and float32 accumulation, as prefixes of their torch module names. Admitted by a measured error
# budget (`python -m kokoro_tvm.studies.precision --layers`, notebook 08): every group alone and all together in
# bf16 against float32 with the same SineGen noise; all together 38.7 dB audio SNR, PESQ-WB 4.64, STOI 0.99996 on
# its sentence (float32 against float64 is 48.6 dB). The F0 / N predictor (f0n) and the duration path (albert,
# duration) stay float32: F0 drives the ill-conditioned SineGen phase, and durations must not move. Convolutions
# with an odd number of input channels (F0_conv, N_conv: one) stay float32 in any case.
BF16_CONVOLUTIONS = {
    "text_encoder": ("text_encoder.cnn.",),
    "decoder": ("decoder.encode.", "decoder.decode.", "decoder.asr_res.", "decoder.generator."),
}


# int8 (`--precision int8`): these convs in int8 (kokoro_tvm.compiler.int8: uint8 activations with a scale and zero
# point per input channel and call, folded into int8 weights), every other layer of BF16_CONVOLUTIONS in bf16. The
# generator's resblocks and noise resblocks: 90.8% of the conv multiply-adds, and each alone >= 45 dB audio SNR
# in int8 where the frame-rate convs, noise convs, upsamplers and conv_post fell to 31-43 dB; on 24 texts the
# plan held PESQ-WB >= 4.477, STOI >= 0.9964 in emulation (python -m kokoro_tvm.studies.precision --int8).
INT8_CONVOLUTIONS = {
    "decoder": ("decoder.generator.resblocks.", "decoder.generator.noise_res."),
}


@dataclass(frozen=True)
class Precision:
    """One value of `--precision`: the one vocabulary of the CLI (say, compile, compare, bench), synthesize, bench
    and the notebooks. A build's own field is its `arithmetic` (ARITHMETICS), read from here."""

    name: str
    dtype: str  # the model's dtype the build starts from
    arithmetic: str  # what the build computes in: "full" = the dtype's own arithmetic everywhere
    timed: bool  # bench times it (fp64 is the parity reference, not a speed contender)
    summary: str


ARITHMETICS = ("full", "bf16", "int8")
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision("fp32", "float32", "full", True, "float32 everywhere"),
        Precision("fp64", "float64", "full", False, "float64 everywhere: the parity reference"),
        Precision("bf16", "float32", "bf16", True, "BF16_CONVOLUTIONS in bf16 (AVX512_BF16)"),
        Precision("int8", "float32", "int8", True, "INT8_CONVOLUTIONS in int8, the rest of bf16's in bf16 (+ VNNI)"),
    )
}
TIMED_PRECISIONS = tuple(name for name, p in PRECISIONS.items() if p.timed)


def get_precision(name: str) -> Precision:
    """`--precision NAME` -> its Precision; an unknown name is one InputError listing the choices."""
    if name not in PRECISIONS:
        raise InputError(f"precision must be one of {', '.join(PRECISIONS)}, got {name!r}")
    return PRECISIONS[name]


def precision_list(spec: str, choices: tuple[str, ...] = tuple(PRECISIONS)) -> tuple[Precision, ...]:
    """A comma-separated list of distinct precisions from `choices` (bench's `--precision fp32,bf16,int8`)."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    if not names or len(set(names)) != len(names) or not set(names) <= set(choices):
        raise InputError(f"--precision takes {', '.join(choices)}, comma-separated and distinct; got {spec!r}")
    return tuple(PRECISIONS[name] for name in names)


def check_arithmetic(arithmetic: str) -> str:
    if arithmetic not in ARITHMETICS:
        raise InputError(f"a build's arithmetic is one of {', '.join(ARITHMETICS)}, got {arithmetic!r}")
    return arithmetic


def build_precision(component: str, arithmetic: str) -> str:
    """The arithmetic `component` is built with under `arithmetic`: a component with no layer to reduce is built
    (and cached) as its full-precision self, so a bf16 runtime shares those artifacts with the float32 one, and
    one with bf16 layers but no int8 layer under int8 as its bf16 self."""
    if check_arithmetic(arithmetic) == "int8" and component not in INT8_CONVOLUTIONS:
        arithmetic = "bf16"
    return arithmetic if arithmetic == "full" or component in BF16_CONVOLUTIONS else "full"
