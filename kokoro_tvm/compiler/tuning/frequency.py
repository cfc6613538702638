"""Direct or frequency-domain, measured: each long float32 conv shape of the model timed both ways on the machine
that builds (kokoro_tvm.compiler.passes.FrequencyDomainConvs), the faster kept in the tuning record.

- `conv_shapes(mod, target)`: the conv shapes of a Relax module the pass could take (taps, dilation, wider
  channels) with their length in steps at the measured length;
- `conv_builds(shape, target)`: one such conv as a Relax module built direct and in the frequency domain, weight
  work lifted, with random inputs; the caller times them (the Relax VM is the runtime's: the compiler does not
  run it), `decide` keeps the frequency domain where it won by the tuner's margin, and `within_budget` keeps
  the winners that save the most time per byte of kernel spectra until SPECTRA_BUDGET is spent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
from tvm import relax

from kokoro_tvm.compiler.passes.frequency_conv import conv_key, measured_tiling, spectrum_floats
from kokoro_tvm.compiler.pipeline import lift_weight_transforms
from kokoro_tvm.compiler.tuning.record import using

# The kernel spectra a build keeps in memory (B x 2O x 2C floats per conv, half that above 128 channels; made at load):
# at most about the model's own float32 weights (82 M parameters, 327 MB). On the Zen 4, with whole spectra, every
# winning shape together took 860 MB and the cold `kokoro-tvm say --precision fp32` went from 594 MB to 1.41 GB; with
# half spectra at 256 channels a 448 MB budget would take all but one winner (427 MB): fp32 2.24 s against 2.37 s on
# the bench sentence, but that cold `say` at 1.02 GB against 895 MB (NOTES/performance.md, "Half spectra").
SPECTRA_BUDGET = 320 * 2**20


@dataclass(frozen=True)
class ConvShape:
    channels: int  # the wider side's (the convs measured here have as many outputs as inputs)
    taps: int
    dilation: int
    steps: int  # at the measured length
    convs: int = 1  # how many convs of the module have this shape

    @property
    def key(self) -> str:
        return conv_key(self.channels, self.taps, self.dilation)


def conv_module(channels: int, length, taps: int, dilation: int, dtype: str = "float32", batch: int = 1):
    """main(x [batch, C, length]; w [C, C, taps]) = conv1d with 'same' padding, w a weight (num_input = 1);
    `length` an int or a symbolic TIR variable."""
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((batch, channels, length), dtype))
    w = relax.Var("w", relax.TensorType((channels, channels, taps), dtype))
    with builder.function("main", [x, w], attrs={"num_input": 1}):
        with builder.dataflow():
            padding = dilation * (taps - 1) // 2
            out = builder.emit_output(relax.op.nn.conv1d(x, w, padding=padding, dilation=dilation))
        builder.emit_func_output(out)
    return builder.get()


def conv_shapes(mod, target, steps_at) -> list[ConvShape]:
    """The distinct conv shapes of `mod` (an imported, unlifted Relax module) that FrequencyDomainConvs matches and
    the tuner times (passes.frequency_conv.measured_tiling), in the order met; `steps_at(length)`: a conv's
    length expression in steps at the measured length. The pass runs with a choice that records and declines,
    so the shapes are exactly those a build would decide on."""
    found: dict[str, ConvShape] = {}

    def record(taps: int, dilation: int, channels: int, length=None):
        if measured_tiling(taps, dilation) is not None:
            shape = ConvShape(channels, taps, dilation, steps_at(length))
            met = found.get(shape.key)
            found[shape.key] = shape if met is None else replace(met, convs=met.convs + 1)
        return None

    with using(None):
        lift_weight_transforms(mod, target=target, frequency_convs=True, frequency_tiling=record)
    return list(found.values())


def conv_builds(shape: ConvShape, target, seed: int = 0) -> tuple[dict[str, object], np.ndarray, np.ndarray]:
    """({"direct": lifted module, "frequency": lifted module}, x, w): the conv of `shape` both ways, built with
    the heuristic tiles (no record in use), and random inputs at its measured length."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, shape.channels, shape.steps)).astype("float32")
    w = rng.standard_normal((shape.channels, shape.channels, shape.taps)) / np.sqrt(shape.channels * shape.taps)
    tiles = measured_tiling(shape.taps, shape.dilation)
    module = conv_module(shape.channels, shape.steps, shape.taps, shape.dilation)
    with using(None):
        builds = {
            way: lift_weight_transforms(
                module, target=target, frequency_convs=way == "frequency", frequency_tiling=lambda *_: tiles
            )
            for way in ("direct", "frequency")
        }
    return builds, x, w.astype("float32")


def decide(shape: ConvShape, seconds: dict[str, float], margin: float) -> list[int] | None:
    """The record's entry for `shape`: its tiles [N, m] where the frequency domain took at most `margin` of the
    direct conv's time, else None (direct)."""
    if seconds["frequency"] < margin * seconds["direct"]:
        return list(measured_tiling(shape.taps, shape.dilation))
    return None


def spectrum_bytes(shape: ConvShape) -> int:
    """The bytes of the kernel spectra of every conv of `shape` (frequency_conv.spectrum_floats)."""
    points, _ = measured_tiling(shape.taps, shape.dilation)
    return shape.convs * spectrum_floats(shape.channels, points) * 4


def within_budget(
    shapes: list[ConvShape], seconds: dict[str, dict[str, float]], margin: float, budget: int = SPECTRA_BUDGET
) -> dict[str, list[int] | None]:
    """{shape key: [N, m] or None} for every shape timed (`seconds[key]`: "direct", "frequency"): the shapes the
    frequency domain won (`decide`), most time saved per byte of spectra first, while their spectra fit `budget`
    bytes; every other shape direct."""
    winners = [s for s in shapes if decide(s, seconds[s.key], margin)]

    def saved_per_byte(shape: ConvShape) -> float:
        timed = seconds[shape.key]
        return shape.convs * (timed["direct"] - timed["frequency"]) / spectrum_bytes(shape)

    chosen, spent = dict.fromkeys(s.key for s in shapes), 0
    for shape in sorted(winners, key=saved_per_byte, reverse=True):
        if spent + spectrum_bytes(shape) <= budget:
            chosen[shape.key], spent = decide(shape, seconds[shape.key], margin), spent + spectrum_bytes(shape)
    return chosen
