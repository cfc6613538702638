"""The int8 conv kernel (kokoro_tvm.compiler.int8): exact integer arithmetic, the vpdpbusd hot loop, the 8-lane
form. Random packed operands, small shapes; the kernel tests need a CPU with AVX512_VNNI."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from kernel_asm import executable_asm, hot_loop
from tvm import relax

from kokoro_tvm.compiler import int8
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.studies.benchmark import _int8_conv_module

needs_vnni = pytest.mark.skipif(not int8.host_supports_int8(), reason="this CPU has no AVX512_VNNI")


def _build(channels: int, taps: int, dilation: int, steps: int):
    from kokoro_tvm.compiler.pipeline import compile_relax

    executable = compile_relax(_int8_conv_module(channels, taps, dilation, steps), host_target())
    return relax.VirtualMachine(executable, tvm.cpu()), executable_asm(executable)


def _reference(xq: np.ndarray, wq: np.ndarray, dilation: int, steps: int) -> np.ndarray:
    """The conv in int64 from the unpacked operands: x[c, s] = xq[c // 4, s, c % 4], w likewise."""
    channels = xq.shape[1] * 4
    x = xq.transpose(0, 1, 3, 2).reshape(channels, -1).astype(np.int64)
    w = wq.transpose(0, 1, 3, 2).reshape(wq.shape[0], channels, -1).astype(np.int64)
    return sum(w[:, :, k] @ x[:, k * dilation : k * dilation + steps] for k in range(w.shape[2]))[None]


@needs_vnni
@pytest.mark.parametrize("steps", [96, 40])  # 40: 16 columns do not divide it, 8 do (the ymm step)
def test_int8_conv_is_the_exact_integer_conv(steps):
    vm, asm = _build(32, 5, 2, steps)
    register = "zmm" if steps % int8.LANES == 0 else "ymm"
    assert re.search(rf"vpdpbusd\s.*%{register}", asm)
    rng = np.random.default_rng(4)
    # the extremes included: 255 x -127 products, four to a lane, summed without saturation
    xq = rng.integers(0, 256, (1, 8, steps + 8, 4), dtype=np.uint8)
    wq = rng.integers(-127, 128, (32, 8, 5, 4), dtype=np.int8)
    xq[0, 0, :, :] = 255
    wq[0, :, :, :] = -127
    got = vm["main"](tvm.runtime.tensor(xq), tvm.runtime.tensor(wq)).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference(xq, wq, 2, steps))


@needs_vnni
def test_the_int8_kernel_is_vpdpbusd_with_the_tile_in_registers():
    _, asm = _build(128, 7, 3, 4800)
    count, stores = hot_loop(asm, "vpdpbusd")
    assert count >= 8
    assert stores == []
