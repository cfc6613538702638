"""What the packed-operand CPU conv kernels share: kokoro_tvm.compiler.bf16 (`vdpbf16ps` over channel pairs) and
compiler.int8 (`vpdpbusd` over channel quads).

- `PackedFeature` and `require`: the CPU-feature checks, LLVM's CPU model for a target and /proc/cpuinfo for this
  machine (a virtual machine can hide a feature its CPU model has), refused in one line before any work;
- the conv both compute, one reduction over (channel group, tap, channel within the group) on operands packed
  as x[n, c / g, t, g] and w[o, c / g, k, g], which the CPU Contraction rule tiles and tensorizes;
- `PackedConvolutions`: the Relax rewrite both run, which finds the float32 conv1d calls a kernel can take and
  hands each to the kernel's `emit` (its packing, its conv, its dequantization) with the padding worked out;
- registering a kernel's tensorized step with TVM once per process;
- `ImportLLVMKernels`: TVM 0.27 cannot emit either instruction, so each kernel's step is a few lines of LLVM IR
  that the functions calling it import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import tvm
from tvm import s_tir, te, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator
from tvm.target import codegen

from kokoro_tvm.compiler.passes.base import alignment_pad, parameter_names, rewriting_pass, slice_last_axis
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


@mutator
class PackedConvRewriter(PyExprMutator):
    def __init__(self, mod, kernel: PackedKernel, select):
        super().__init__(mod)
        self.kernel, self.select, self.rewritten = kernel, select, 0
        self.conv1d = tvm.ir.Op.get("relax.nn.conv1d")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.conv1d) or not convertible(call, self.kernel.group):
            return call
        if not self.select(parameter_names(self, call.args[1])):
            return call
        left, right = (int(v) for v in call.attrs.padding)
        (dilation,) = (int(v) for v in call.attrs.dilation)
        x, w = call.args
        length = x.ty.shape[2] + left + right - dilation * (int(w.ty.shape[2]) - 1)
        extra = alignment_pad(length)  # whole column tiles, as AlignConvLengths does for fp32 convs
        # Zero words past the last tap, so that the packed row is whole vectors of words and the packing pass
        # (which the AdaIN / Snake work before it fuses into) vectorizes: rows of t + 18 words (k7, dilation 3)
        # ran scalar, 0.53 s of the bf16 decoder's 2.1 s at 472 frames.
        tail = alignment_pad(x.ty.shape[2] + left + right + extra, LANES)
        out = self.kernel.emit(self.builder_, x, w, left, right + extra + tail, dilation, tail)
        self.rewritten += 1
        return slice_last_axis(out, 0, length) if extra else out


def PackedConvolutions(name: str, kernel: PackedKernel, select):  # noqa: N802 (TVM pass naming)
    """The module pass `name`: every convertible float32 conv1d whose weight's parameter names `select` accepts,
    through `kernel`."""
    return rewriting_pass(name, lambda mod: PackedConvRewriter(mod, kernel, select))


def ImportLLVMKernels(kernels: dict[str, str]):  # noqa: N802 (TVM pass naming)
    """After scheduling: every PrimFunc whose name contains a key of `kernels` (FuseTIR keeps a kernel's name in
    the fused function's, e.g. `bf16_conv1d`) carries that key's LLVM IR (`pragma_import_llvm`), once per
    function, so its code generation links and inlines the steps it calls by name."""

    @tvm.transform.module_pass(opt_level=0, name="ImportLLVMKernels")
    def _pass(mod, _ctx):
        for gvar, func in list(mod.functions_items()):
            marks = [mark for mark in kernels if mark in gvar.name_hint]
            if isinstance(func, tirx.PrimFunc) and marks:
                ir = tvm.ir.StringImm("".join(kernels[mark] for mark in marks))
                mod[gvar] = func.with_body(tirx.AttrStmt(0, "pragma_import_llvm", ir, func.body))
        return mod

    return _pass
