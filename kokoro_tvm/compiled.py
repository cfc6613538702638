"""Compiled Kokoro, ready to run: where the compiler (builds, needs torch) meets the runtime (runs, needs
neither torch nor the compiler). Neither stage imports the other; this module joins them for the callers
above both: synthesis, the evaluation, the studies and the tests.

- `check_device`: a device takes the dtype (a compiler fact) and exists here (a runtime fact), one clear error;
  `check_precision`: likewise for a reduced-precision build (bf16: AVX512_BF16); `resolve_precision`: what the
  command line's `--precision` fp32 / fp64 / bf16 / int8 means.
- `compiled_kokoro`: a runtime.kokoro.TVMKokoro whose artifacts the compiler builds on demand.
- `compile_and_load`: any Relax module -> a runtime.vm.VMRunner (our pipeline, or stock TVM's for the probes).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from kokoro_tvm.compiler.bf16 import Bf16Unsupported, require_bf16
from kokoro_tvm.compiler.build import OnDemandBuilder
from kokoro_tvm.compiler.int8 import require_int8
from kokoro_tvm.compiler.pipeline import compile_relax, compile_stock
from kokoro_tvm.compiler.targets import check_dtype, host_target, target_for
from kokoro_tvm.components import PRECISIONS
from kokoro_tvm.runtime.devices import require_device
from kokoro_tvm.runtime.kokoro import TVMKokoro
from kokoro_tvm.runtime.vm import VMRunner

# What `--precision` names: the model's dtype and the build's arithmetic (kokoro_tvm.components.PRECISIONS).
PRECISION_CHOICES = {
    "fp32": ("float32", "full"),
    "fp64": ("float64", "full"),
    "bf16": ("float32", "bf16"),
    "int8": ("float32", "int8"),
}


def resolve_precision(name: str) -> tuple[str, str]:
    """`--precision` fp32 / fp64 / bf16 / int8 -> (dtype, arithmetic)."""
    if name not in PRECISION_CHOICES:
        raise ValueError(f"precision must be one of {', '.join(PRECISION_CHOICES)}, got {name!r}")
    return PRECISION_CHOICES[name]


def check_device(device: str, dtype: str) -> None:
    """Before any weights load or build: `device` takes `dtype` and exists on this machine (one clear error)."""
    check_dtype(dtype, device)
    if device != "cpu":
        require_device(device)


def check_precision(precision: str, device: str = "cpu", target: dict | None = None) -> None:
    """Before anything is built: `precision` exists and the device's target can run it (bf16: an x86 CPU with
    AVX512_BF16, this one included when it is the target; int8: AVX512_VNNI as well), one clear error."""

    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision in ("bf16", "int8"):

        if device != "cpu":
            raise Bf16Unsupported(
                f"{precision} builds are for the CPU (AVX512_BF16, int8: AVX512_VNNI), not {device}: "
                "use --precision fp32"
            )
        require_bf16(target or host_target())
    if precision == "int8":

        require_int8(target or host_target())


def compiled_kokoro(
    model,
    weights_fingerprint: str,
    dtype: str = "float32",
    target: dict | None = None,
    buckets=None,
    device="cpu",
    precision: str = "full",
) -> TVMKokoro:
    """A TVMKokoro whose components are built on demand from `model` (in `dtype`) for `device`; with a
    kokoro_tvm.runtime.buckets.BucketSet, utterances run in its buckets, else at exact length. A missing
    device, a dtype it lacks or a precision it cannot run is reported before anything is built."""
    check_device(device, dtype)
    check_precision(precision, device, target)
    provider = OnDemandBuilder(model, weights_fingerprint, dtype, target or target_for(device), precision)
    return TVMKokoro(provider, dtype, buckets, device)


def compile_and_load(
    mod,
    target: dict | None = None,
    *,
    stock: bool = False,
    params: Sequence[np.ndarray] = (),
    transform_params: str | None = None,
) -> VMRunner:
    """Build a Relax module for `target` (default: this CPU with our pipeline; `stock=True`: TVM's default
    pipeline for generic LLVM, as the hazard probes need) and load it on the CPU as a numpy-callable runner."""
    executable = compile_stock(mod, target) if stock else compile_relax(mod, target or host_target())
    return VMRunner(executable, "cpu", params, transform_params)
