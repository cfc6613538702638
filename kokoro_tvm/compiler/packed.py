"""What the packed-operand CPU conv kernels share: kokoro_tvm.compiler.bf16 (`vdpbf16ps` over channel pairs) and
compiler.int8 (`vpdpbusd` over channel quads).

- the CPU-feature checks: LLVM's CPU model for a target, /proc/cpuinfo for this machine (a virtual machine can
  hide a feature its CPU model has);
- the conv both compute, one reduction over (channel group, tap, channel within the group) on operands packed
  as x[n, c / g, t, g] and w[o, c / g, k, g], which the CPU Contraction rule tiles and tensorizes;
- registering a kernel's tensorized step with TVM once per process;
- `ImportLLVMKernels`: TVM 0.27 cannot emit either instruction, so each kernel's step is a few lines of LLVM IR
  that the functions calling it import.
"""

from __future__ import annotations

from collections.abc import Callable

import tvm
from tvm import te


def target_has_feature(target, feature: str) -> bool:
    """True if `target` is LLVM for a CPU with `feature` (LLVM's name: "avx512bf16", "avx512vnni")."""
    target = target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)
    if target.kind.name != "llvm":
        return False
    from tvm.target import codegen

    return bool(codegen.target_has_features(feature, target))


def cpu_flag(flag: str) -> bool | None:
    """This CPU's `flag` in /proc/cpuinfo ("avx512_bf16", "avx512_vnni"); None where there is no such file."""
    from kokoro_tvm.compiler.targets import cpu_flags

    flags = cpu_flags()
    return None if flags is None else flag in flags


def host_supports(feature: str, flag: str) -> bool:
    """This machine can build and run a kernel that needs `feature` for itself: its LLVM CPU model has it and
    its flags do not deny it."""
    from kokoro_tvm.compiler.targets import host_target

    return target_has_feature(host_target(), feature) and cpu_flag(flag) is not False


def register_step(name: str, make: Callable[[], tuple]) -> str:
    """Register the tensor intrinsic `name` (make() -> its description and implementation) with TVM once per
    process; returns the name."""
    from tvm import s_tir

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


def ImportLLVMKernels(kernels: dict[str, str]):  # noqa: N802 (TVM pass naming)
    """After scheduling: every PrimFunc whose name contains a key of `kernels` (FuseTIR keeps a kernel's name in
    the fused function's, e.g. `bf16_conv1d`) carries that key's LLVM IR (`pragma_import_llvm`), once per
    function, so its code generation links and inlines the steps it calls by name."""
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="ImportLLVMKernels")
    def _pass(mod, _ctx):
        for gvar, func in list(mod.functions_items()):
            marks = [mark for mark in kernels if mark in gvar.name_hint]
            if isinstance(func, tirx.PrimFunc) and marks:
                ir = tvm.ir.StringImm("".join(kernels[mark] for mark in marks))
                mod[gvar] = func.with_body(tirx.AttrStmt(0, "pragma_import_llvm", ir, func.body))
        return mod

    return _pass
