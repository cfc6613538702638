"""`CumsumInFloat64`: a float32 running sum accumulated in float64, each output rounded to float32.

That is PyTorch's CPU cumsum (its accumulator for float is a double), so the SineGen phase, a running sum of
two increments per frame over the whole utterance, agrees with PyTorch bit for bit. TVM's cumsum accumulates in
float32: at 20,000 steps of increments up to 0.1 it is 2.6e-3 away from PyTorch's, and the phase is multiplied
by 2 pi x 300 before its sine (tests/test_cpu_schedule.py). A GPU's parallel scan in float32 drifts from both in
its own way; in float64 every order rounds to the same float32 outputs but for rare last-bit ties.

Not for Metal (no float64): `kokoro_tvm.compiler.pipeline` runs this only where the target has float64.
"""

from __future__ import annotations

from tvm import relax

from kokoro_tvm.compiler.passes.base import call_rewriting_pass


def _accumulated_in_float64(call):
    x = call.args[0]
    dtype = str(call.attrs.dtype or x.ty.dtype)
    if dtype != "float32" or str(x.ty.dtype) != "float32":
        return call
    wide = relax.op.cumsum(
        relax.op.astype(x, "float64"), axis=call.attrs.axis, dtype="float64", exclusive=bool(call.attrs.exclusive)
    )
    return relax.op.astype(wide, "float32")


def CumsumInFloat64():  # noqa: N802 (TVM pass naming)
    return call_rewriting_pass("CumsumInFloat64", "relax.cumsum", _accumulated_in_float64)
