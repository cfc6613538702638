"""The tuner: the model's contraction classes, each timed on this machine under a bounded set of schedules
(kokoro_tvm.compiler.tuning.measure), the fastest kept in a TuningRecord (kokoro_tvm.compiler.tuning.record).

- `tune_functions(classes, target, budget_s)`: classes by their share of the work, largest first, until the
  budget is spent; `measure_amx`: a packed class's conv on the AMX tile engine, where the CPU has one;
  `packed_choices`: per packed (bf16 / int8) conv class, its kernel: AMX, the AVX-512 vector kernel, or the
  float32 conv where neither beat it;
- `tune(model, target, precisions)`: the whole run `kokoro-tvm tune` makes, and its record.
"""

from __future__ import annotations

import datetime
import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import tirx

from kokoro_tvm.compiler import amx
from kokoro_tvm.compiler.pipeline import lift_weight_transforms, phases
from kokoro_tvm.compiler.symbolic import SymbolicShape, add_tile_count, export_symbolic
from kokoro_tvm.compiler.targets import cpu_geometry
from kokoro_tvm.compiler.tuning import frequency
from kokoro_tvm.compiler.tuning.measure import (
    CALLS,
    MEASURE_TILES,
    ContractionFunction,
    _evaluate,
    _random,
    candidates,
    contraction_functions,
    measure,
    time_interleaved,
)
from kokoro_tvm.compiler.tuning.record import AMX, AVX512, FLOAT32, Choice, TuningRecord, using
from kokoro_tvm.components import LENGTH_TILE, SYMBOLIC_MAX_LENGTH, TUNED_COMPONENTS, build_precision, get_precision
from kokoro_tvm.components import component as info
from kokoro_tvm.machine import amx_tiles, cpu_identity

log = logging.getLogger(__name__)

# A candidate replaces the heuristic only when it is this much faster: run-to-run spread of one kernel on a
# 2-core virtual machine is 1-3 %, and a choice that wins by less is noise kept forever in a record.
MARGIN = 0.97
# Packed (bf16 / int8) convs pay for packing their activations (a pass over the input the float32 conv does not
# make); a packed conv is kept only when its conv alone beats the float32 conv by this factor.
PACKED_MARGIN = 0.9
# The AMX conv (kokoro_tvm.compiler.amx) is timed alone, the vector kernels with their fused epilogue (bias,
# residual, the int8 dequantization): the AMX path adds that epilogue as a pass over the output, about a fifth of
# the conv's time for a 128-channel conv (its output is as large as its input); it is chosen where its conv
# alone takes at most this share of the vector kernel's time.
AMX_MARGIN = 0.8


@dataclass
class ClassResult:
    key: str
    function: str
    share: float  # of the multiply-adds measured
    seconds: dict[str, float]  # candidate label (or "heuristic") -> seconds
    choice: Choice | None  # None: the heuristic stays
    work: int = 1  # the measured function's multiply-adds
    amx_seconds: float | None = None  # a packed class's conv on the tile engine alone, where it can run there

    @property
    def best(self) -> float:
        return min(self.seconds.values())


def tune_class(key: str, functions: list[ContractionFunction], target, share: float, search: list[Choice]):
    """Time the heuristic and every `search` choice on the class's largest function; keep the fastest if it
    beats the heuristic by MARGIN."""
    largest = max(functions, key=lambda f: f.multiply_adds)
    seconds = measure(largest.func, target, [None, *search], name=largest.name)
    best = min((c for c in search if c.label in seconds), key=lambda c: seconds[c.label], default=None)
    keep = best if best is not None and seconds[best.label] < MARGIN * seconds["heuristic"] else None
    return ClassResult(key, largest.name, share, seconds, keep, largest.multiply_adds)


def by_share(classes: dict[str, list[ContractionFunction]]) -> list[tuple[str, float]]:
    total = sum(f.multiply_adds for fs in classes.values() for f in fs) or 1
    shares = {k: sum(f.multiply_adds for f in fs) / total for k, fs in classes.items()}
    return sorted(shares.items(), key=lambda item: -item[1])


def tune_functions(
    classes: dict[str, list[ContractionFunction]],
    target,
    budget_s: float,
    progress: Callable[[Iterable, str], Iterable] = lambda items, _unit: items,
) -> list[ClassResult]:
    """Classes largest share first until `budget_s` is spent (the rest keep the heuristic)."""
    search = candidates(cpu_geometry(target))
    start, results = time.perf_counter(), []
    for key, share in progress(by_share(classes), "class"):
        if time.perf_counter() - start > budget_s:
            log.info("tuning budget of %.0f s spent: %s and smaller classes keep the heuristic tile", budget_s, key)
            break
        results.append(tune_class(key, classes[key], target, share, search))
    return results


# packed conv class -> the float32 class of the same conv: "uint16xuint16:256:128x7x2" -> "float32xfloat32:256:256x7"
def float32_class(packed_key: str) -> str | None:
    operands, rows, reduce = packed_key.split(":")
    if operands not in ("uint16xuint16", "int8xuint8"):
        return None
    *groups, width = (int(v) for v in reduce.split("x"))
    channels = [groups[0] * width, *groups[1:]]
    return f"float32xfloat32:{rows}:{'x'.join(str(v) for v in channels)}"


def _packed_shape(key: str) -> tuple[str, int, int, int] | None:
    """(amx kind, out channels, in channels, taps) of a packed class key, None for any other class."""
    operands, rows, reduce = key.split(":")
    kind = {"uint16xuint16": "bf16", "int8xuint8": "int8"}.get(operands)
    if kind is None:
        return None
    *groups, width = (int(v) for v in reduce.split("x"))
    return kind, int(rows), groups[0] * width, groups[1] if len(groups) > 1 else 1


def measure_amx(result: ClassResult, target, calls: int = CALLS) -> float | None:
    """Seconds of the AMX conv (kokoro_tvm.compiler.amx) of a packed class's shape at the length its vector
    kernel was timed at (dilation 1: the tile loads do not care where a tap starts), or None where it cannot run
    (no AMX, a refused tile permission, a shape the kernel does not take)."""
    shape = _packed_shape(result.key)
    if shape is None or not amx_tiles():
        return None
    name, out_channels, in_channels, taps = shape
    kind, length = amx.KINDS[name], result.work // (out_channels * in_channels * taps)
    if not amx.usable(kind, out_channels, in_channels, length, 1):
        return None
    channels = amx.channels_for(kind, in_channels)  # whole channel blocks, as the build pads them
    func = amx.conv_function(kind, out_channels, channels, taps, 1, amx.COL_TILES)
    label = f"{amx.MARK}_{name}"
    compiled = tvm.compile(
        tvm.IRModule({label: func.with_attr("global_symbol", label)}), target=tvm.target.Target(target)
    )
    rng = np.random.default_rng(0)
    groups, block = channels // kind.group, kind.block_channels
    args = [
        tvm.runtime.tensor(_random((1, groups, length + taps - 1, kind.group), kind.activation, rng)),
        tvm.runtime.tensor(_random((taps, channels // block, out_channels, block), kind.weight, rng)),
        tvm.runtime.tensor(np.zeros((1, out_channels, length), kind.accumulator)),
    ]
    return time_interleaved({"amx": compiled[label]}, args, calls)["amx"]


def packed_choices(results: dict[str, ClassResult]) -> dict[str, str]:
    """Per packed class with a measured float32 twin, its kernel (record.AMX, AVX512 or FLOAT32): the faster
    packed kernel (AMX counted at its time over AMX_MARGIN), if it beat the float32 conv by PACKED_MARGIN."""
    kept = {}
    for key, result in results.items():
        twin = results.get(float32_class(key) or "")
        if twin is None:
            continue
        tiles = result.amx_seconds / AMX_MARGIN if result.amx_seconds is not None else float("inf")
        packed = min(tiles, result.best)
        if packed >= PACKED_MARGIN * twin.best:
            kept[key] = FLOAT32
        else:
            kept[key] = AMX if tiles < result.best else AVX512
    return kept


def kernel_seconds(
    key: str, results: dict[str, ClassResult], packed: dict[str, str]
) -> tuple[ClassResult, float] | None:
    """The class result a build's function of class `key` runs as, and its seconds (AMX at its conv time over
    AMX_MARGIN, as packed_choices counts it)."""
    kernel = packed.get(key, AVX512)
    result = results.get(float32_class(key) if kernel == FLOAT32 else key)
    if result is None:
        return None
    if kernel == AMX and results[key].amx_seconds is not None:
        return results[key], results[key].amx_seconds / AMX_MARGIN
    return result, result.best


# --- the model's classes, and the whole tuning run -----------------------------------------------------------

BUDGET_S = 360.0  # the measuring part of a tuning run; exporting the components comes before it


def imported(model, component: str):
    """The symbolic build's Relax module of `component`, as imported (weights as inputs)."""
    from kokoro_tvm.compiler.converters import to_relax  # (deferred: the converters and the export load torch)
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    shape = SymbolicShape(component, SYMBOLIC_MAX_LENGTH[info(component).axis] // LENGTH_TILE)
    with default_dtype(next(model.parameters()).dtype):
        return add_tile_count(to_relax(export_symbolic(model, shape), keep_params_as_input=True))


def legalized(mod, component: str, precision: str, target, decided: TuningRecord | None = None, frequency_convs=None):
    """`mod` (imported) with `precision`'s rewrites applied to a copy, lifted, legalized and fused as a build
    does, under `decided` (the frequency-domain decisions made so far; None: heuristics) and with no tile
    choices: every packed conv stays packed, so that its class is measured. `frequency_convs`: force the
    frequency-domain convs on or off (None: as `decided`, or the heuristic, says)."""
    with using(decided):
        mod = lift_weight_transforms(mod, component, precision, target, frequency_convs=frequency_convs)
        with tvm.target.Target(target):
            for _, passes in phases(target)[:3]:  # rewrite, dispatch, legalize
                mod = tvm.transform.Sequential(passes)(mod)
    return mod


# The long float32 convs' timing (each shape built and run both ways) may take at most this share of the measuring
# budget; the contraction classes get what is left. Unbounded, it took 1.5 s a shape on the Zen 4 (12 shapes), so a
# `--budget` under about 20 s was spent on it alone and measured no class.
FREQUENCY_SHARE = 0.5


def measure_frequency(
    shapes: list[frequency.ConvShape], target, time_builds, progress, budget_s: float = float("inf")
) -> tuple[dict, dict]:
    """({shape key: [N, m] or None}, {shape key: its steps, convs, spectra and both ways' seconds}): each long conv
    shape built direct and in the frequency domain and timed by `time_builds(builds, params, inputs)` (the
    caller's: the Relax VM is the runtime's), the frequency domain kept where it beat the direct conv by MARGIN
    and its spectra fit frequency.SPECTRA_BUDGET. Shapes are timed most multiply-adds first until `budget_s` is
    spent; one not timed is in neither dict (passes.frequency_conv.chosen_tiling: direct where the record timed
    others, the heuristic where it timed none)."""
    measured, start = {}, time.perf_counter()
    by_work = sorted(shapes, key=lambda s: -s.convs * s.steps * s.channels**2 * s.taps)
    for shape in progress(by_work, "conv shape"):
        if time.perf_counter() - start > budget_s:
            log.info("frequency-domain share of %.0f s spent: %s and smaller shapes not timed", budget_s, shape.key)
            break
        builds, x, w = frequency.conv_builds(shape, target)
        seconds = time_builds(builds, [w], [x])
        spectra = frequency.spectrum_bytes(shape)
        measured[shape.key] = {"steps": shape.steps, "convs": shape.convs, "spectra_mb": spectra / 2**20}
        measured[shape.key] |= {"seconds": seconds, "won": frequency.decide(shape, seconds, MARGIN) is not None}
        log.info(
            "%s x %d at %d steps: direct %.1f ms, frequency domain %.1f ms (spectra %.0f MB)",
            *(shape.key, shape.convs, shape.steps, 1e3 * seconds["direct"], 1e3 * seconds["frequency"]),
            spectra / 2**20,
        )
    seconds = {key: m["seconds"] for key, m in measured.items()}
    return frequency.within_budget([s for s in shapes if s.key in measured], seconds, MARGIN), measured


def merge(into: dict[str, list[ContractionFunction]], more: dict[str, list[ContractionFunction]]) -> None:
    for key, functions in more.items():
        into.setdefault(key, []).extend(functions)


def estimated_seconds(classes: dict[str, list[ContractionFunction]], results: dict, packed: dict[str, bool]) -> float:
    """The contraction seconds of one call of every function in `classes` (one component at one arithmetic) at
    MEASURE_TILES: each at its class's best rate (a packed conv the record turns back to float32 at its float32
    twin's), unmeasured classes left out. What the record's `precision_seconds` sum."""
    seconds = 0.0
    for key, functions in classes.items():
        found = kernel_seconds(key, results, packed)
        if found is not None:
            result, best = found
            seconds += sum(best * f.multiply_adds / result.work for f in functions)
    return seconds


def steps_at_measured_length(length) -> int:
    """A conv's length in steps at the measured length: its symbolic length is a multiple of the build's tile
    count (kokoro_tvm.compiler.symbolic), here MEASURE_TILES."""
    return _evaluate(length, {var: MEASURE_TILES for var in tirx.analysis.undefined_vars(length)})


def contraction_classes(modules: dict, target, arithmetics, decided: TuningRecord) -> dict:
    """{(component, arithmetic): classes} of the builds `decided` gives, and, where a packed precision is tuned,
    under (None, "twins") the decoder's direct float32 conv classes that no fp32 build measured (the frequency
    domain took them out of it, or fp32 is not tuned): a packed conv class is compared with its float32 twin
    (packed_choices), and a packed build falls back to the direct conv, not the frequency-domain one."""
    found = {}
    for component, mod in modules.items():
        for arithmetic in dict.fromkeys(build_precision(component, a) for a in arithmetics):
            found[component, arithmetic] = contraction_functions(legalized(mod, component, arithmetic, target, decided))
    if any(a != "full" for a in arithmetics) and "decoder" in modules:
        direct = contraction_functions(legalized(modules["decoder"], "decoder", "full", target, None, False))
        taken = {k for (_, a), classes in found.items() if a == "full" for k in classes}
        found[None, "twins"] = {k: v for k, v in direct.items() if k not in taken}
    return found


def tune(
    model, target, precisions=("fp32", "bf16", "int8"), budget_s: float = BUDGET_S, progress=None, time_builds=None
):
    """Measure this machine: which long float32 convs run faster in the frequency domain (timed by
    `time_builds`, kokoro_tvm.compiled.module_seconds; None: not measured, the heuristic decides), then the
    TUNED_COMPONENTS' classes at every precision in `precisions` the CPU runs, within `budget_s` seconds of
    measuring. Returns the TuningRecord (not yet saved)."""
    started, progress = time.perf_counter(), progress or (lambda items, _unit: items)
    arithmetics = [get_precision(p).arithmetic for p in precisions]
    modules = {component: imported(model, component) for component in TUNED_COMPONENTS}
    exported = time.perf_counter()
    decided, convs = TuningRecord(cpu_identity()), {}
    if "full" in arithmetics and time_builds is not None:
        shapes = [s for c, mod in modules.items() for s in frequency.conv_shapes(mod, target, steps_at_measured_length)]
        share = FREQUENCY_SHARE * budget_s
        decided.frequency, convs = measure_frequency(shapes, target, time_builds, progress, share)
    found = contraction_classes(modules, target, arithmetics, decided)
    classes: dict[str, list[ContractionFunction]] = {}
    for functions in found.values():
        merge(classes, functions)
    left = budget_s - (time.perf_counter() - exported)
    results = {r.key: r for r in tune_functions(classes, target, left, progress)}
    for result in results.values():
        result.amx_seconds = measure_amx(result, target)
    decided.choices = {k: r.choice for k, r in results.items() if r.choice is not None}
    decided.packed = packed_choices(results)
    decided.measured = convs | {
        k: {"function": r.function, "share": round(r.share, 4), "seconds": r.seconds}
        | ({"amx_seconds": r.amx_seconds} if r.amx_seconds is not None else {})
        for k, r in results.items()
    }
    decided.tuned = {
        "date": datetime.date.today().isoformat(),
        "length_frames": MEASURE_TILES * LENGTH_TILE,
        "export_s": round(exported - started, 1),
        "measure_s": round(time.perf_counter() - exported, 1),
        "classes": len(classes),
        "measured": len(results),
        "frequency_domain": sum(v is not None for v in decided.frequency.values()),
        "precision_seconds": {
            p: sum(
                estimated_seconds(found.get((c, build_precision(c, a)), {}), results, decided.packed)
                for c in TUNED_COMPONENTS
            )
            for p, a in zip(precisions, arithmetics, strict=True)
        },
    }
    return decided
