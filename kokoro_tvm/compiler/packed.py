"""What the packed-operand CPU conv kernels share: kokoro_tvm.compiler.bf16 (`vdpbf16ps` over channel pairs) and
compiler.int8 (`vpdpbusd` over channel quads).

- `PackedFeature` and `require`: the CPU-feature checks, LLVM's CPU model for a target and /proc/cpuinfo for this
  machine (a virtual machine can hide a feature its CPU model has), refused in one line before any work;
- the conv both compute, one reduction over (channel group, tap, channel within the group) on operands packed
  as x[n, c / g, t, g] and w[o, c / g, k, g], which the CPU Contraction rule tiles and tensorizes;
- `PackedKernel`: what the Relax rewrite both run (kokoro_tvm.compiler.passes.packed_convolutions) reads to find
  the float32 conv1d calls a kernel can take and hand each to the kernel's `emit` (its packing, its conv, its
  dequantization) with the padding worked out;
- registering a kernel's tensorized step with TVM once per process;
- TVM 0.27 cannot emit either instruction, so each kernel's step is a few lines of LLVM IR that the functions
  calling it import (kokoro_tvm.compiler.passes.llvm_kernels.ImportLLVMKernels).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import s_tir, te
from tvm.target import codegen

from kokoro_tvm.compiler.targets import cpu_flags, host_target
from kokoro_tvm.errors import UnsupportedError

LANES = 16  # 32-bit lanes of one zmm register: the packed rows are padded to whole vectors of them


def target_has_feature(target, feature: str) -> bool:
    """True if `target` is LLVM for a CPU with `feature` (LLVM's name: "avx512bf16", "avx512vnni")."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if target.kind.name != "llvm":
        return False

    return bool(codegen.target_has_features(feature, target))


def cpu_flag(flag: str) -> bool | None:
    """This CPU's `flag` in /proc/cpuinfo ("avx512_bf16", "avx512_vnni"); None where there is no such file."""
    flags = cpu_flags()
    return None if flags is None else flag in flags


def host_supports(feature: str, flag: str) -> bool:
    """This machine can build and run a kernel that needs `feature` for itself: its LLVM CPU model has it and
    its flags do not deny it."""
    return target_has_feature(host_target(), feature) and cpu_flag(flag) is not False


class PackedUnsupported(UnsupportedError):
    """A packed-kernel build for a target (or a run on a CPU) without the instruction it needs."""


@dataclass(frozen=True)
class PackedFeature:
    """The CPU feature a packed kernel needs, by every name it goes by."""

    precision: str  # the --precision that needs it
    llvm: str  # LLVM's feature name: "avx512bf16"
    flag: str  # /proc/cpuinfo's: "avx512_bf16"
    title: str  # the vendor's: "AVX512_BF16"
    instruction: str  # "vdpbf16ps"
    instead: str  # the precisions to use without it: "fp32"
    error: type[PackedUnsupported] = PackedUnsupported


def _mcpu(target) -> str | None:
    if isinstance(target, dict):
        return target.get("mcpu")
    return str(target.attrs["mcpu"]) if "mcpu" in getattr(target, "attrs", {}) else None


def require(target, *features: PackedFeature) -> None:
    """Refuse (the first feature's error, one line naming every one that is missing) a target without all of
    `features`, and a host target (a dict or a Target) on a CPU whose flags lack one. `features` go from the
    build's own to the most basic: the last missing one says which precision is left."""
    precision = features[0].precision
    lacking = [f for f in features if not target_has_feature(target, f.llvm)]
    if lacking:
        described = target.get("mcpu", target.get("kind")) if isinstance(target, dict) else str(target)
        raise features[0].error(
            f"{precision} builds need an x86 CPU with {_titles(lacking)}; the target {described} has "
            f"{'none' if len(lacking) == 1 else 'neither'}: use --precision {lacking[-1].instead}"
        )
    on_host = _mcpu(target) == host_target().get("mcpu")
    denied = [f for f in features if on_host and cpu_flag(f.flag) is False]
    if denied:
        raise features[0].error(
            f"{precision} builds need {_titles(denied)}, which this CPU does not report in /proc/cpuinfo: use "
            f"--precision {denied[-1].instead}"
        )


def _titles(features: list[PackedFeature]) -> str:
    return " and ".join(f"{f.title} ({f.instruction})" for f in features)


def register_step(name: str, make: Callable[[], tuple]) -> str:
    """Register the tensor intrinsic `name` (make() -> its description and implementation) with TVM once per
    process; returns the name."""

    if s_tir.TensorIntrin.get(name, allow_missing=True) is None:
        s_tir.TensorIntrin.register(name, *make())
    return name


def packed_conv(xq: te.Tensor, wq: te.Tensor, dilation: int, product: Callable, name: str, tail: int = 0):
    """out[n, o, t] = sum over (group, k, p) of product(xq[n, group, t + k d, p], wq[o, group, k, p]) for the
    packed operands above; the last `tail` columns of xq are vector padding that no tap reads. `name` (the
    compute's and, through FuseTIR, the fused function's) is what ImportLLVMKernels finds the kernel by."""
    n, groups, padded, width = xq.shape
    o, _, k_extent, _ = wq.shape
    length = padded - dilation * (k_extent - 1) - tail
    group = te.reduce_axis((0, groups), "group")
    k = te.reduce_axis((0, k_extent), "k")
    p = te.reduce_axis((0, width), "p")
    return te.compute(
        (n, o, length),
        lambda b, a, t: te.sum(product(xq[b, group, t + k * dilation, p], wq[a, group, k, p]), axis=[group, k, p]),
        name=name,
    )


def convertible(call, group: int) -> bool:
    """A float32 conv1d (NCW / OIW, stride 1, one group, input channels a multiple of `group`, static weights)."""
    attrs = call.attrs
    try:
        w_shape = [int(d) for d in call.args[1].ty.shape]
        x_dtype = str(call.args[0].ty.dtype)
    except (AttributeError, TypeError, ValueError):
        return False
    return (
        x_dtype == "float32"
        and attrs.data_layout == "NCW"
        and attrs.kernel_layout == "OIW"
        and [int(s) for s in attrs.strides] == [1]
        and int(attrs.groups) == 1
        and w_shape[1] % group == 0
        and str(attrs.out_dtype) in ("", "None", "void", "float32")
    )


@dataclass(frozen=True)
class PackedKernel:
    """One packed conv kernel as the rewrite sees it: `group` input channels per lane, and `emit(builder, x, w,
    left, right, dilation, tail)`, which emits the packing of x (zero padding `left` / `right`, the last `tail`
    columns vector padding), of w, and the conv, and returns the float32 output."""

    group: int
    emit: Callable
    operands: str  # its conv's operand dtypes as a tuning class names them: "uint16xuint16", "int8xuint8"
    amx: str | None = None  # its kokoro_tvm.compiler.amx kind, whose tile kernel `emit_amx` emits instead
    emit_amx: Callable | None = None

    def tuning_class(self, out_channels: int, in_channels: int, taps: int) -> str:
        """The contraction class (kokoro_tvm.compiler.tuning) of this kernel's conv of that shape: the
        reduction over (channel group, tap, channel within the group), a single tap's axis dropped as the
        schedule rules' normalization drops it."""
        reduce = [in_channels // self.group, *([taps] if taps > 1 else []), self.group]
        return f"{self.operands}:{out_channels}:{'x'.join(str(r) for r in reduce)}"
