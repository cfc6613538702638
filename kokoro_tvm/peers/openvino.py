"""OpenVINO as a `bench` peer: the same weights converted by this project, in parts around the host-side
durations, with shapes fixed per utterance (like the torch.compile peer), on OpenVINO's CPU plugin.

Parts (`PARTS`), each one `ov.convert_model` of a torch module and one compiled model per length:

- `albert`, `duration`, `text_encoder`, `f0n`: the component wrappers TVM compiles (kokoro_tvm.compiler.export),
  traced at the utterance's exact length with plain `nn.LSTM` calls in place of the masked-LSTM custom op (at
  batch 1 and exact length every step is valid, so the two compute the same; `exact_length_lstms`).
- `source`: SineGen (noise as inputs: `explicit_sine_noise_tensors`) and the forward STFT, F0 curve -> the
  generator's harmonic spectrum.
- `body`: kokoro's own `Decoder.forward` with that spectrum given (`given_harmonics`): the decoder blocks, the
  generator and the inverse STFT.

Precision (`OV_PRECISIONS`): `f32`, or `bf16` (the CPU plugin's default on AVX512_BF16 CPUs) for the parts TVM's
bf16 build computes in bf16 (`text_encoder`, `body`); the duration path (`albert`, `duration`) and the F0 / SineGen
path (`f0n`, `source`) stay f32 as in TVM's (kokoro_tvm.components.BF16_CONVOLUTIONS: durations must not move).

Graph rewrite (`polynomial_sine`, on by default): every `Sin` of the `body` part becomes a range-reduced odd
polynomial (Cody-Waite reduction by pi, Taylor terms to r^11: error <= 6e-8 on the reduced range). The CPU
plugin runs `Sin` as a scalar reference kernel; the polynomial is adds and multiplies it vectorizes. The
`source` part's sines (harmonic phases up to thousands of radians) keep OpenVINO's own `Sin`.

The first call at a new length converts and compiles its parts: `compile_s` (seconds, all lengths so far).
"""

from __future__ import annotations

import contextlib
import logging
import math
import time
import warnings

import numpy as np
import torch

from kokoro_tvm.compiler import export
from kokoro_tvm.compiler.patches import export_patches
from kokoro_tvm.components import BF16_CONVOLUTIONS, NAMES
from kokoro_tvm.config import SAMPLES_PER_FRAME, STYLE_DIM
from kokoro_tvm.errors import InputError
from kokoro_tvm.reference.noise import ZeroNoise
from kokoro_tvm.reference.pt_dynamic import explicit_sine_noise_tensors
from kokoro_tvm.reference.stages import alignment_from_durations, durations_from_logits

log = logging.getLogger(__name__)

OV_PRECISIONS = ("f32", "bf16")
COMPONENT_PARTS = tuple(name for name in NAMES if name != "decoder")  # the decoder is split: source and body
PARTS = (*COMPONENT_PARTS, "source", "body")
# f32 under bf16: what TVM's bf16 build keeps in float32 (no bf16 convolutions), and SineGen with its STFT
F32_PARTS = (*(name for name in COMPONENT_PARTS if name not in BF16_CONVOLUTIONS), "source")

# sin(r) = r (1 + r^2 (c3 + r^2 (c5 + ...))) on |r| <= pi/2: Taylor coefficients -1/3!, 1/5!, ..., -1/11!;
# the first term left out, r^13/13!, is at most 5.7e-8 there (below float32's half ulp of 1: 6e-8).
SINE_TERMS = tuple((-1) ** k / math.factorial(2 * k + 1) for k in range(1, 6))
# pi as a float32 head plus the float32 rounding of the rest: r = x - k pi_hi - k pi_lo keeps r accurate to
# float32 rounding for |k| up to 2^12 (Snake's alpha x and the inverse STFT's phases are far below that).
PI_HI = float(np.float32(math.pi))
PI_LO = float(np.float32(math.pi - PI_HI))


class OpenVinoError(InputError):
    """An OpenVINO peer setting the bench cannot take."""


@contextlib.contextmanager
def exact_length_lstms():
    """The component wrappers' `masked_lstm` as a plain `nn.LSTM` call while tracing at an exact length (batch
    1, every step valid): OpenVINO converts `aten::lstm`, not the project's custom op. Restored on exit."""
    masked = export.masked_lstm
    export.masked_lstm = lambda x, lengths, lstm: lstm(x)[0]
    try:
        yield
    finally:
        export.masked_lstm = masked


class HarmonicSource(torch.nn.Module):
    """F0 curve [1, 2F], SineGen's initial phase [1, 9] and additive noise [1, 600F, 9] -> the generator's
    harmonic spectrum [1, 22, 120F + 1] (magnitude and phase stacked), with kokoro's own modules."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, f0_curve, initial_phase, additive_noise):
        generator = self.decoder.generator
        with explicit_sine_noise_tensors(self.decoder, initial_phase, additive_noise):
            f0 = generator.f0_upsamp(f0_curve[:, None]).transpose(1, 2)
            wave = generator.m_source(f0)[0].transpose(1, 2).squeeze(1)
        spectrum, phase = generator.stft.transform(wave)
        return torch.cat([spectrum, phase], dim=1)


class _GivenHarmonics(torch.nn.Module):
    """Stands in for the generator's SineGen source and STFT: `transform` returns the given harmonic spectrum,
    `inverse` is the stock STFT's (the source's output is then unused and dropped by the conversion)."""

    def __init__(self, stft, harmonics):
        super().__init__()
        self.stft, self.harmonics = stft, harmonics

    def forward(self, f0):
        return f0, None, None

    def transform(self, waveform):
        half = self.harmonics.shape[1] // 2
        return self.harmonics[:, :half], self.harmonics[:, half:]

    def inverse(self, magnitude, phase):
        return self.stft.inverse(magnitude, phase)


class DecoderBody(torch.nn.Module):
    """kokoro's `Decoder.forward` (asr, F0 curve, N, style) with the harmonic spectrum as an input."""

    def __init__(self, model):
        super().__init__()
        self.decoder = model.decoder

    def forward(self, asr, f0_curve, n_curve, style, harmonics):
        generator = self.decoder.generator
        stock = generator.m_source, generator.stft
        generator.m_source = generator.stft = _GivenHarmonics(stock[1], harmonics)
        try:
            return self.decoder(asr, f0_curve, n_curve, style).reshape(1, -1)
        finally:
            generator.m_source, generator.stft = stock


def polynomial_sine(model) -> int:
    """Every `Sin` of an ov.Model as the range-reduced polynomial of the module docstring; returns how many."""
    import openvino.opset15 as ops

    def const(value):
        return ops.constant(np.float32(value))

    count = 0
    for node in list(model.get_ordered_ops()):
        if node.get_type_name() != "Sin":
            continue
        x = node.input_value(0)
        k = ops.round(ops.multiply(x, const(1 / math.pi)), "half_to_even")
        r = ops.subtract(ops.subtract(x, ops.multiply(k, const(PI_HI))), ops.multiply(k, const(PI_LO)))
        r2 = ops.multiply(r, r)
        series = const(SINE_TERMS[-1])
        for term in reversed(SINE_TERMS[:-1]):
            series = ops.add(ops.multiply(series, r2), const(term))
        sine = ops.multiply(r, ops.add(ops.multiply(series, r2), const(1.0)))
        odd = ops.subtract(k, ops.multiply(ops.floor(ops.multiply(k, const(0.5))), const(2.0)))  # k mod 2
        signed = ops.multiply(sine, ops.subtract(const(1.0), ops.multiply(odd, const(2.0))))  # (-1)^k sin(r)
        for target in node.output(0).get_target_inputs():
            target.replace_source_output(signed.output(0))
        count += 1
    model.validate_nodes_and_infer_types()
    return count


def _part_module(model, part: str) -> torch.nn.Module:
    if part in COMPONENT_PARTS:
        return export.component_module(model, part)
    return (HarmonicSource if part == "source" else DecoderBody)(model).eval()


class OpenVinoKokoro:
    """Kokoro on OpenVINO's CPU plugin at `precision` (one of OV_PRECISIONS) with `threads` inference
    threads; `speak(padded_ids, style, speed)` like every peer, with SineGen noise from `noise` (default zero,
    as bench's TVM runs)."""

    def __init__(self, model, threads: int | None = None, precision: str = "f32", sine: str = "polynomial", noise=None):
        import openvino

        if precision not in OV_PRECISIONS or sine not in ("polynomial", "native"):
            raise OpenVinoError(
                f"OpenVINO precision is one of {', '.join(OV_PRECISIONS)} and sine is polynomial "
                f"or native; got {precision!r}, {sine!r}"
            )
        self.model, self.threads, self.precision, self.sine = model, threads, precision, sine
        self.noise = noise or ZeroNoise()
        self.core = openvino.Core()
        self.compiled: dict[tuple[str, int], object] = {}
        self.durations: np.ndarray | None = None  # the last utterance's, for bench's quality columns
        self.compile_s: float | None = None

    def _config(self, part: str) -> dict:
        hint = "f32" if self.precision == "f32" or part in F32_PARTS else self.precision
        config = {"INFERENCE_PRECISION_HINT": hint, "PERFORMANCE_HINT": "LATENCY"}
        if self.threads:
            config["INFERENCE_NUM_THREADS"] = self.threads
        return config

    def run(self, part: str, length: int, *inputs: np.ndarray) -> list[np.ndarray]:
        """Part `part` at `length` steps (converted and compiled on its first use) on `inputs`."""
        key = (part, length)
        if key not in self.compiled:
            self.compiled[key] = self._convert(part, inputs)
        outputs = self.compiled[key](list(inputs))
        return [outputs[i] for i in range(len(outputs))]

    def _convert(self, part: str, inputs) -> object:
        import openvino

        start = time.perf_counter()
        example = tuple(torch.from_numpy(np.ascontiguousarray(x)) for x in inputs)
        with export_patches(self.model), exact_length_lstms(), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore", torch.jit.TracerWarning)  # shapes are fixed per utterance on purpose
            converted = openvino.convert_model(_part_module(self.model, part), example_input=example)
        rewritten = polynomial_sine(converted) if part == "body" and self.sine == "polynomial" else 0
        compiled = self.core.compile_model(converted, "CPU", self._config(part))
        seconds = time.perf_counter() - start
        self.compile_s = (self.compile_s or 0.0) + seconds
        log.info(
            "OpenVINO %s [%s, %d sines rewritten]: %.1f s",
            part,
            self._config(part)["INFERENCE_PRECISION_HINT"],
            rewritten,
            seconds,
        )
        return compiled

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """float32 audio for one utterance (token ids with both pads): the pipeline of TVMKokoro.run_stages."""
        ids = np.asarray(padded_ids, dtype=np.int64)[None]
        n_tokens = ids.shape[1]
        style = np.asarray(style, dtype=np.float32).reshape(1, -1)
        prosody, decoder_style = style[:, STYLE_DIM:], style[:, :STYLE_DIM]
        token_lengths = np.array([n_tokens], dtype=np.int64)
        (d_en,) = self.run("albert", n_tokens, ids, np.ones_like(ids))
        logits, d = self.run("duration", n_tokens, d_en, prosody, token_lengths)
        self.durations = durations_from_logits(logits, speed)
        alignment = alignment_from_durations(self.durations)
        n_frames = alignment.shape[0]
        en = np.ascontiguousarray(d.transpose(0, 2, 1)[:, :, alignment])
        f0, n = self.run("f0n", n_frames, en, prosody, np.array([n_frames], dtype=np.int64))
        (t_en,) = self.run("text_encoder", n_tokens, ids, token_lengths)
        asr = np.ascontiguousarray(t_en[:, :, alignment])
        sine = self.noise.sine_noise(n_frames * SAMPLES_PER_FRAME, batch=1, stream=0)
        (harmonics,) = self.run(
            "source", n_frames, f0, sine.initial_phase.astype(np.float32), sine.additive.astype(np.float32)
        )
        (audio,) = self.run("body", n_frames, asr, f0, n, decoder_style, harmonics)
        return audio.reshape(-1)
