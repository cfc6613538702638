"""Compiled Kokoro, ready to run: where the compiler (builds, needs torch) meets the runtime (runs, needs
neither torch nor the compiler). Neither stage imports the other; this module joins them for the callers
above both: synthesis, the evaluation, the studies and the tests.

- `check_device`: a device takes the dtype (a compiler fact) and exists here (a runtime fact), one clear error;
  `check_precision`: a `--precision` name (kokoro_tvm.components.PRECISIONS) exists and the device can run it
  (bf16: AVX512_BF16; int8: AVX512_VNNI as well); `runs_here`: whether this CPU can.
- `resolve_precision`: `--precision auto`, the precision this CPU's tuning record measured fastest;
- `ready_or_built`: the symbolic builds from the ready index without torch, or found / built and indexed;
- `compiled_kokoro`: a runtime.kokoro.TVMKokoro whose artifacts the compiler builds on demand.
- `compile_and_load`: any Relax module -> a runtime.vm.VMRunner (our pipeline, or stock TVM's for the probes);
  `module_seconds`: Relax modules of one signature built and timed interleaved (what the tuner's builds of one
  conv, direct and in the frequency domain, are measured with: the compiler does not run the VM).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, compile_relax, compile_stock
from kokoro_tvm.compiler.targets import check_dtype, host_target, target_for
from kokoro_tvm.compiler.tuning.record import find
from kokoro_tvm.components import NAMES, Precision, get_precision
from kokoro_tvm.runtime import ready
from kokoro_tvm.runtime.devices import require_device
from kokoro_tvm.runtime.kokoro import TVMKokoro
from kokoro_tvm.runtime.vm import VMRunner
from kokoro_tvm.timing import median_interleaved


def check_device(device: str, dtype: str) -> None:
    """Before any weights load or build: `device` takes `dtype` and exists on this machine (one clear error)."""
    check_dtype(dtype, device)
    if device != "cpu":
        require_device(device)


def check_precision(name: str, device: str = "cpu", target: dict | None = None) -> Precision:
    """Before anything is built: `--precision NAME` exists and the device's target can run it (bf16: an x86 CPU
    with AVX512_BF16, this one included when it is the target; int8: AVX512_VNNI as well), one clear error."""
    from kokoro_tvm.compiler.arithmetic import require_arithmetic
    from kokoro_tvm.compiler.bf16 import Bf16Unsupported

    chosen = get_precision(name)
    check_dtype(chosen.dtype, device)
    if chosen.arithmetic == "full":
        return chosen
    if device != "cpu":
        raise Bf16Unsupported(
            f"{name} builds are for the CPU (AVX512_BF16, int8: AVX512_VNNI), not {device}: use --precision fp32"
        )
    require_arithmetic(chosen.arithmetic, target or host_target())
    return chosen


def runs_here(name: str) -> bool:
    """Whether this CPU can build and run `--precision NAME` for itself."""
    from kokoro_tvm.compiler.bf16 import host_supports_bf16
    from kokoro_tvm.compiler.int8 import host_supports_int8

    arithmetic = get_precision(name).arithmetic
    return arithmetic == "full" or (host_supports_bf16() and (arithmetic != "int8" or host_supports_int8()))


AUTO = "auto"  # `--precision auto`: the tuner's choice for this CPU
CPU_PRECISIONS = ("fp32", "bf16", "int8")  # what `auto` chooses from: each holds the fidelity bars (kokoro_tvm.marks)


def resolve_precision(name: str, device: str = "cpu") -> tuple[str, str]:
    """(the precision to build, why): `auto` is the precision of CPU_PRECISIONS that this CPU runs and whose
    kernels its tuning record measured fastest (kokoro_tvm.compiler.tuning), fp32 without a record or off the
    CPU; any other name is itself."""
    if name != AUTO:
        return name, "asked for"
    if device != "cpu":
        return "fp32", f"auto on {device}: GPU builds are fp32"
    available = [p for p in CPU_PRECISIONS if runs_here(p)]
    record = find()
    fastest = record.fastest_precision(available) if record is not None else None
    if fastest is None:
        return "fp32", "auto: no tuning record for this CPU (`kokoro-tvm tune` measures it)"
    return fastest, f"auto: the fastest of {', '.join(available)} by tuning record {record.name}"


def compiled_kokoro(
    model,
    weights_fingerprint: str,
    precision: str = "fp32",
    *,
    target: dict | None = None,
    buckets=None,
    device="cpu",
) -> TVMKokoro:
    """A TVMKokoro whose components are built on demand from `model` (in the dtype of `precision`, a
    kokoro_tvm.components.PRECISIONS name) for `device`; with a
    kokoro_tvm.runtime.buckets.BucketSet, utterances run in its buckets, else at exact length. A missing
    device, a dtype it lacks or a precision it cannot run is reported before anything is built."""
    chosen = check_precision(precision, device, target)
    check_device(device, chosen.dtype)
    from kokoro_tvm.compiler.build import OnDemandBuilder  # (deferred: the build loads torch)

    target = target or target_for(device)
    provider = OnDemandBuilder(model, weights_fingerprint, chosen.dtype, target, chosen.arithmetic)
    return TVMKokoro(provider, chosen.dtype, buckets, device)


READY = "its cached builds, started without torch"


@dataclass
class RecordedWeights:
    """The weights a ready build was made from, as recorded (kokoro_tvm.runtime.ready): what a sidecar says."""

    recorded: dict

    def as_dict(self) -> dict:
        return dict(self.recorded)


def ready_start(weights, asked: str, bucket_set, device: str = "cpu", batch: int = 1):
    """(TVMKokoro, its recorded weights, the precision, why that one) from the ready index, where this request
    (`asked` as given: "auto" is its own entry) has one whose builds check out, else None: no torch, and no TVM
    compiler either (the precision's checks passed on this machine when the entry was written)."""
    if device != "cpu" or batch != 1 or bucket_set is None or not bucket_set.symbolic:
        return None
    found = ready.find(weights, asked, device)
    if found is None:
        return None
    choice = found.choice or ("asked for" if asked == found.precision else f"{asked}: as the ready index recorded")
    dtype = get_precision(found.precision).dtype
    return TVMKokoro(found.provider, dtype, bucket_set, device), RecordedWeights(found.weights), found.precision, choice


def ready_or_built(
    weights,
    precision: str,
    bucket_set,
    device: str = "cpu",
    asked: str | None = None,
    batch: int = 1,
    choice: str | None = None,
):
    """(TVMKokoro, its weights' info, how it started) for a checked precision: the symbolic-length builds on the
    CPU from the ready index without torch when they are cached (kokoro_tvm.runtime.ready); otherwise the weights
    load, the five builds are found or built with a progress bar, and the index is written (under `asked` too:
    "auto", with the `choice` that resolved it). `batch` > 1: the builds path (the index holds the batch-1 builds,
    the batched ones need the weights)."""
    symbolic = bucket_set is not None and bucket_set.symbolic and device == "cpu"
    found = ready.find(weights, precision, device) if symbolic and batch == 1 else None
    if found is not None:
        if asked not in (None, precision):  # the next `auto` start finds it before importing TVM
            ready.save(weights, precision, device, found.artifacts, found.weights, asked, choice)
        dtype = get_precision(precision).dtype
        return TVMKokoro(found.provider, dtype, bucket_set, device), RecordedWeights(found.weights), READY
    import torch  # (deferred: what a ready start never loads)
    from tqdm.auto import tqdm

    from kokoro_tvm.weights.resolve import load_kmodel, load_weights

    info = load_weights(weights)[0]  # resolved and fingerprinted: which cached builds are these weights'
    # the KModel (kokoro, transformers: ~4 s) only where a build is missing; none where every one is cached
    dtype = get_precision(precision).dtype
    model = functools.cache(lambda: load_kmodel(weights, dtype=getattr(torch, dtype))[0])
    compiled = compiled_kokoro(model, info.fingerprint, precision, buckets=bucket_set, device=device)
    if not symbolic:
        return compiled, info, "each build found or built on first use"
    quiet = not logging.getLogger("kokoro_tvm").isEnabledFor(logging.INFO)  # `-q`: errors only, no bar
    bar = tqdm(NAMES, desc="builds", unit="component", disable=quiet)
    artifacts = {name: compiled.provider(name, None) for name in bar}
    ready.save(weights, precision, device, artifacts, info.as_dict(), asked, choice)
    return compiled, info, "its five builds found or built (once per machine), ready index written"


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


def module_seconds(
    modules: dict[str, object], params: Sequence[np.ndarray], inputs: Sequence[np.ndarray], calls: int = 5
) -> dict[str, float]:
    """{name: median seconds of one call} of Relax modules taking the same `inputs` and `params` (their weight
    work, where lifted, done at load), each built for this CPU and timed interleaved, `calls` rounds after one
    untimed round, on inputs already on the device."""
    backends = {}
    for name, mod in modules.items():
        lifted = TRANSFORM_PARAMS if TRANSFORM_PARAMS in {gv.name_hint for gv in mod.functions} else None
        runner = compile_and_load(mod, params=list(params), transform_params=lifted)
        tensors = runner.device_inputs(*inputs)
        backends[name] = lambda r=runner, t=tensors: r.run_on_device(*t)
    return median_interleaved(backends, calls, warmup=1)
