"""`ImportLLVMKernels`: TVM 0.27 cannot emit `vdpbf16ps` or `vpdpbusd`, so each packed kernel's step is a few
lines of LLVM IR (kokoro_tvm.compiler.bf16 / int8) that the functions calling it import. Runs after scheduling."""

from __future__ import annotations

import tvm
from tvm import tirx


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
