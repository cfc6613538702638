"""Where a compiled component spends its time: every call the Relax VM makes, timed. Never imports torch.

`kernel_seconds` wraps the VM's instrument hook (called before and after each call instruction: our kernels
and the VM's builtins such as allocation) with a wall clock, and sums the time per function name over one
call of `main`; the median over several calls is what it returns. The hook itself costs a Python call per
instruction (a few microseconds), so totals run slightly above an uninstrumented call; compare kernels with
each other or with the same kernel in another build, not with untimed totals. Used by the decoder speed work
(NOTES/performance.md, NOTES/dynamic_shapes.md) and notebook 08.
"""

from __future__ import annotations

import re
import statistics
import time
from collections import defaultdict


def kernel_seconds(runner, tensors, runs: int = 3) -> dict[str, float]:
    """{function name: median seconds per call of `main`}, largest first, for a runtime.vm.VMRunner on
    `tensors` already on its device (VMRunner.device_inputs), after one warm-up call."""
    import tvm

    per_run: list[dict[str, float]] = []
    clock: list[float] = []

    def instrument(func, name, before, ret, *args):
        if before:
            clock.append(time.perf_counter())
        else:
            per_run[-1][name] += time.perf_counter() - clock.pop()
        return int(tvm.relax.VMInstrumentReturnKind.NO_OP)

    runner.set_instrument(instrument)
    try:
        for _ in range(runs + 1):
            per_run.append(defaultdict(float))
            runner.run_on_device(*tensors)
    finally:
        runner.set_instrument(lambda *args: int(tvm.relax.VMInstrumentReturnKind.NO_OP))
    per_run = per_run[1:]  # the warm-up call is not counted
    names = set().union(*per_run)
    medians = {name: statistics.median(run.get(name, 0.0) for run in per_run) for name in names}
    return dict(sorted(medians.items(), key=lambda item: -item[1]))


# Ops that only build index tensors: a symbolic build fuses an `arange` (and its expand_dims) into a kernel
# that the static build fuses with a constant instead, so the same kernel gets a different name.
_INDEX_OPS = re.compile(r"_(?:arange|expand_dims)\d*")


def kernel_family(name: str) -> str:
    """A function's name without its index-building ops: the same kernel in a static and a symbolic build."""
    return _INDEX_OPS.sub("", name)


def compare(baseline: dict[str, float], other: dict[str, float], top: int = 15) -> list[dict]:
    """The `top` kernels by the larger of their two times, matched across builds by kernel_family (times of
    functions of one family summed): seconds in each and the ratio other / baseline (a kernel missing from
    one build shows 0 there)."""
    families: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for column, times in enumerate((baseline, other)):
        for name, seconds in times.items():
            families[kernel_family(name)][column] += seconds
    names = sorted(families, key=lambda n: -max(families[n]))
    rows = []
    for name in names[:top]:
        a, b = families[name]
        rows.append({"function": name, "baseline_s": a, "other_s": b, "ratio": b / a if a else float("inf")})
    return rows


# What a kernel's fused name says it does, in the order asked: a conv (its epilogue and, in fp32 builds, the
# elementwise work before it fused in), a conv in the frequency domain (compiler.passes.frequency_conv's four
# kernels), the bf16 or int8 packing of a conv's input (with the AdaIN / Snake work fused in front of it), the int8
# convs' per-call channel ranges, everything else.
KERNEL_GROUPS = (
    ("convolution", ("conv1d",)),
    ("frequency-domain convolution", ("frames", "forward_dft", "spectral_product", "inverse_dft")),
    ("bf16 packing", ("bf16_pack",)),
    ("int8 packing", ("int8_pack",)),
    ("int8 ranges", ("int8_range",)),
)


def kernel_split(times: dict[str, float]) -> dict[str, float]:
    """kernel_seconds' times summed by KERNEL_GROUPS (the first group one of whose marks is in the name), plus
    "other"."""
    split = {name: 0.0 for name, _ in KERNEL_GROUPS} | {"other": 0.0}
    for function, seconds in times.items():
        group = next((name for name, marks in KERNEL_GROUPS if any(m in function for m in marks)), "other")
        split[group] += seconds
    return split
