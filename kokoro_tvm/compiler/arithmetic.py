"""Which reduced-precision arithmetic a target can run (torch-free: `say` checks it before anything loads)."""

from __future__ import annotations

from kokoro_tvm.compiler import bf16, int8, packed


def require_arithmetic(arithmetic: str, target) -> None:
    """Refuse, in one line, a reduced-precision build for a target without its instructions (bf16: AVX512_BF16;
    int8: AVX512_VNNI, and AVX512_BF16 for its bf16 layers; the line names every one missing)."""
    if arithmetic == "bf16":
        bf16.require_bf16(target)
    elif arithmetic == "int8":
        packed.require(target, int8.FEATURE, bf16.FEATURE)
