"""`DemoteFloat64`, for targets without float64 (Metal): every float32 -> float64 cast is dropped, so the float64
islands a float32 graph holds to round as PyTorch does (`kokoro_tvm.compiler.export.mix_neighbours`, SineGen's
phase interpolation) run in float32, rounded as the plain expression. Metal builds are generated and checked
for completeness here, never run (NOTES/metal.md)."""

from __future__ import annotations

from kokoro_tvm.compiler.passes.base import call_rewriting_pass


def _without_widening(call):
    source = call.args[0]
    widens = str(call.attrs.dtype) == "float64" and str(getattr(source.ty, "dtype", "")) == "float32"
    return source if widens else call


def DemoteFloat64():  # noqa: N802 (TVM pass naming)
    return call_rewriting_pass("DemoteFloat64", "relax.astype", _without_widening)
