"""`Int8Convolutions`: float32 conv1d calls as the per-call `int8_channel` plan with the `vpdpbusd` conv
(kokoro_tvm.compiler.int8)."""

from __future__ import annotations

from kokoro_tvm.compiler.int8 import KERNEL
from kokoro_tvm.compiler.passes.packed_convolutions import PackedConvolutions


def Int8Convolutions(select=lambda parameters: True):  # noqa: N802 (TVM pass naming)
    """Every convertible float32 conv1d whose weight's parameter names `select` accepts, as the per-call
    int8_channel conv (see the module)."""
    return PackedConvolutions("Int8Convolutions", KERNEL, select)
