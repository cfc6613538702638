"""`Bf16Convolutions`: float32 conv1d calls as bf16 packing + the `vdpbf16ps` conv (kokoro_tvm.compiler.bf16)."""

from __future__ import annotations

from kokoro_tvm.compiler.bf16 import KERNEL
from kokoro_tvm.compiler.passes.packed_convolutions import PackedConvolutions


def Bf16Convolutions(select=lambda parameters: True):  # noqa: N802 (TVM pass naming)
    """Every convertible float32 conv1d whose weight's parameter names `select` accepts, as bf16 pack + bf16
    conv (see the module)."""
    return PackedConvolutions("Bf16Convolutions", KERNEL, select)
