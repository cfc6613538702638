"""Timing one contraction function under one schedule (kokoro_tvm.compiler.tuning.tuner decides what to time).

- `contraction_functions(mod)`: the fused PrimFuncs of a legalized Relax module that the CPU Contraction rule
  takes, by class, each with its multiply-adds at the measured length;
- `candidates(geometry)`: the register tiles a CPU's vector registers can hold (the heuristic's and its
  neighbours), each in both tile orders;
- `measure(func, target, choices)`: one function scheduled with each choice (or the heuristics), compiled, and
  timed interleaved at MEASURE_TILES length tiles on random inputs: the median of a few calls each.

The functions are the build's own (same fusion, same epilogues, symbolic length), so a choice measured here is
the choice the build makes. Timing happens in this process with the build's thread count.
"""

from __future__ import annotations

import logging
import statistics
import time
from dataclasses import dataclass

import numpy as np
import tvm
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func

from kokoro_tvm.compiler.pipeline import schedule_passes
from kokoro_tvm.compiler.schedule.cpu.base import extent
from kokoro_tvm.compiler.schedule.cpu.contraction import contraction_class, match_contraction
from kokoro_tvm.compiler.targets import CPUGeometry
from kokoro_tvm.compiler.tuning.record import Choice, TuningRecord, using
from kokoro_tvm.components import LENGTH_TILE

log = logging.getLogger(__name__)

# The length every class is timed at: 256 frames (32 tiles of 8), near the corpus median
# (kokoro_tvm.compiler.schedule.cpu.contraction.REPRESENTATIVE_LENGTH) and long enough that one call of the
# largest conv takes milliseconds, not microseconds.
MEASURE_TILES = 32
CALLS = 5  # timed calls per candidate (after one untimed): the median


@dataclass
class ContractionFunction:
    name: str
    func: object  # the PrimFunc, unscheduled
    multiply_adds: int  # at MEASURE_TILES


def contraction_functions(mod, tiles: int = MEASURE_TILES) -> dict[str, list[ContractionFunction]]:
    """{class: [functions]} for every PrimFunc of `mod` the Contraction rule matches with a class (static rows)."""
    found: dict[str, list[ContractionFunction]] = {}
    for gv, func in mod.functions.items():
        if not isinstance(func, tirx.PrimFunc):
            continue
        sch = s_tir.Schedule(tvm.IRModule({"main": func}))
        infos = normalize_prim_func(sch)
        match = match_contraction(sch, infos) if infos else None
        key = contraction_class(sch, match) if match else None
        if key is None:
            continue
        values = _bindings(func, tiles) or {None: tiles}
        work = 1
        for loop in (*match.outer, match.row, match.col, *match.reduce):
            work *= _evaluate(extent(sch, loop), values)
        found.setdefault(key, []).append(ContractionFunction(gv.name_hint, func, work))
    return found


def _bindings(func, tiles: int) -> dict:
    """Every scalar parameter of `func` (the length's tile count) bound to `tiles`."""
    return {p: tiles for p in func.params if str(p.ty).startswith("int")}


def _evaluate(expr, values: dict) -> int:
    """`expr` with the scalar parameters at their `values`; any other variable is a length in steps, bound to
    the tile count's length (a function whose length is a buffer's own extent, not a tile count)."""
    if isinstance(expr, int):
        return expr
    tiles = next(iter(values.values()), MEASURE_TILES)
    analyzer = sym.Analyzer()
    for var in tirx.analysis.undefined_vars(expr):
        value = next((v for p, v in values.items() if p is not None and p.same_as(var)), tiles * LENGTH_TILE)
        analyzer.bind(var, tirx.IntImm(str(var.ty), value))
    return int(analyzer.simplify(expr))


def candidates(geometry: CPUGeometry) -> list[Choice]:
    """Register tiles (rows x vectors of columns) that fit the CPU's vector registers with room for the column
    loads and the broadcast row, in both tile orders: 32 registers (AVX-512, NEON) up to 24 accumulators, 16
    (AVX2) up to 12."""
    if geometry.vector_registers >= 32:
        tiles = [(16, 1), (8, 2), (12, 2), (6, 4), (4, 4), (8, 3)]
    else:
        tiles = [(6, 2), (4, 2), (4, 3), (3, 4), (8, 1)]
    return [Choice(rows, vectors, outer) for rows, vectors in tiles for outer in (False, True)]


def _random(shape, dtype: str, rng) -> np.ndarray:
    if dtype == "float32":
        return rng.standard_normal(shape).astype(np.float32)
    if dtype == "float64":
        return rng.standard_normal(shape)
    if dtype == "uint16":  # bf16 bit patterns of ordinary values (no NaN / denormal patterns)
        return (rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    if dtype in ("int8", "uint8"):
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max + 1, shape, dtype=dtype)
    return np.zeros(shape, dtype)  # lengths, indices: zeros are in bounds


def compile_function(func, target, choice: Choice | None, name: str = "contraction"):
    """`func` scheduled with `choice` (None: the heuristics) and compiled for `target`: a callable. `name`: the
    function's name in the model (a packed kernel's LLVM steps are imported by name)."""
    record = None if choice is None else _forcing(choice)
    mod = tvm.IRModule({name: func.with_attr("global_symbol", name)})
    with tvm.target.Target(target), using(record):
        mod = tvm.transform.Sequential(schedule_passes(target))(mod)
    return tvm.compile(mod, target=tvm.target.Target(target))[name]


class _Forcing(TuningRecord):
    """A record that gives every class the same choice (what `measure` times)."""

    def __init__(self, choice: Choice):
        super().__init__({}, {})
        self.forced = choice

    def choice(self, key: str) -> Choice:
        return self.forced


def _forcing(choice: Choice) -> TuningRecord:
    return _Forcing(choice)


def arguments(func, tiles: int, seed: int = 0) -> list:
    """Random inputs for `func` at `tiles` length tiles (device tensors), the scalars as ints."""
    rng, values = np.random.default_rng(seed), _bindings(func, tiles)
    args = []
    for p in func.params:
        if p in values:
            args.append(values[p])
        else:
            shape = [_evaluate(int(d) if isinstance(d, tirx.IntImm) else d, values) for d in p.shape]
            args.append(tvm.runtime.tensor(_random(shape, str(p.dtype), rng)))
    return args


def kernel(func, target, choice: Choice | None, name: str = "contraction"):
    """`func` compiled with `choice`, or None where the choice does not apply (the schedule fails)."""
    try:
        return compile_function(func, target, choice, name)
    except (tvm.TVMError, ValueError) as exc:
        log.debug("%s does not apply: %s", choice, exc)
        return None


def time_interleaved(kernels: dict[str, object], args: list, calls: int = CALLS) -> dict[str, float]:
    """Median seconds of each kernel over `calls` rounds, every kernel once per round (one untimed round
    first): a slow spell of the machine then costs every candidate alike, not the one that ran in it."""
    times: dict[str, list[float]] = {name: [] for name in kernels}
    for round_ in range(calls + 1):
        for name, fn in kernels.items():
            start = time.perf_counter()
            fn(*args)
            if round_:
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(
    func,
    target,
    choices: list[Choice | None],
    tiles: int = MEASURE_TILES,
    calls: int = CALLS,
    name: str = "contraction",
) -> dict:
    """{label: median seconds} of `func` scheduled with each of `choices` (None: the heuristic, "heuristic"),
    timed interleaved at `tiles` length tiles; a choice that does not apply is left out."""
    labels = {"heuristic" if c is None else c.label: c for c in choices}
    kernels = {label: kernel(func, target, choice, name) for label, choice in labels.items()}
    return time_interleaved({k: v for k, v in kernels.items() if v is not None}, arguments(func, tiles), calls)
