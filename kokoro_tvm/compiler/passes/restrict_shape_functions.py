"""`RestrictShapeFunctions`: the VM's shape function marked noalias, so that it does not spoil the alias
information of the kernels compiled beside it (why: kokoro_tvm.compiler.symbolic). Runs in the finalize phase."""

from __future__ import annotations


def RestrictShapeFunctions():  # noqa: N802 (TVM pass naming)
    """A module pass for the finished module: a PrimFunc with one buffer parameter and no `tirx.noalias`
    attribute (the VM's shape_func) gets it, so that it does not spoil the alias information of the kernels
    compiled beside it. Exact: a function with a single buffer has nothing to alias."""
    import tvm
    from tvm import tirx

    @tvm.transform.module_pass(opt_level=0, name="RestrictShapeFunctions")
    def _pass(mod, _ctx):
        updates = {}
        for gv, func in mod.functions_items():
            if not isinstance(func, tirx.PrimFunc) or (func.attrs and "tirx.noalias" in func.attrs):
                continue
            if sum(not isinstance(param.ty, tvm.ir.PrimType) for param in func.params) <= 1:
                updates[gv] = func.with_attr("tirx.noalias", True)
        for gv, func in updates.items():
            mod[gv] = func
        return mod

    return _pass
