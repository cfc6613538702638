"""The int8 conv kernel (kokoro_tvm.compiler.int8): exact integer arithmetic, the vpdpbusd hot loop, the 8-lane
form. Random packed operands, small shapes; the tests that run the kernel need a CPU with AVX512_VNNI, those
that read its code build it for a Zen 4 where this CPU lacks it (kernel_asm.code_target)."""

from __future__ import annotations

import re

import numpy as np
import pytest
import tvm
from kernel_asm import code_target, executable_asm, hot_loop
from tvm import relax

from kokoro_tvm.commands.bench_kernels import _int8_conv_module
from kokoro_tvm.compiler import int8
from kokoro_tvm.compiler.passes.int8_convolutions import Int8Convolutions
from kokoro_tvm.compiler.targets import cpu_geometry, host_target

needs_vnni = pytest.mark.skipif(not int8.host_supports_int8(), reason="this CPU has no AVX512_VNNI")
CODE_TARGET = code_target(int8.host_supports_int8())  # where the tests that only read the kernel's code build it
needs_code = pytest.mark.skipif(CODE_TARGET is None, reason="no x86-64 code to read on this machine")


def _int8_conv(channels: int, taps: int, dilation: int, steps: int, target):
    """The int8 kernel's conv over packed operands (commands.bench_kernels's module), compiled for target."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    return compile_relax(_int8_conv_module(channels, taps, dilation, steps), target)


def _reference(xq: np.ndarray, wq: np.ndarray, dilation: int, steps: int) -> np.ndarray:
    """The conv in int64 from the unpacked operands: x[c, s] = xq[c // 4, s, c % 4], w likewise."""
    channels = xq.shape[1] * 4
    x = xq.transpose(0, 1, 3, 2).reshape(channels, -1).astype(np.int64)
    w = wq.transpose(0, 1, 3, 2).reshape(wq.shape[0], channels, -1).astype(np.int64)
    return sum(w[:, :, k] @ x[:, k * dilation : k * dilation + steps] for k in range(w.shape[2]))[None]


@needs_code
@pytest.mark.parametrize("steps", [96, 40])  # 40: 16 columns do not divide it, 8 do (the ymm step)
def test_the_int8_conv_steps_in_whole_vectors_of_its_columns(steps):
    register = "zmm" if steps % int8.LANES == 0 else "ymm"
    assert re.search(rf"vpdpbusd\s.*%{register}", executable_asm(_int8_conv(32, 5, 2, steps, CODE_TARGET)))


@needs_vnni
@pytest.mark.parametrize("steps", [96, 40])
def test_int8_conv_is_the_exact_integer_conv(steps):
    vm = relax.VirtualMachine(_int8_conv(32, 5, 2, steps, host_target()), tvm.cpu())
    rng = np.random.default_rng(4)
    # the extremes included: 255 x -127 products, four to a lane, summed without saturation
    xq = rng.integers(0, 256, (1, 8, steps + 8, 4), dtype=np.uint8)
    wq = rng.integers(-127, 128, (32, 8, 5, 4), dtype=np.int8)
    xq[0, 0, :, :] = 255
    wq[0, :, :, :] = -127
    got = vm["main"](tvm.runtime.tensor(xq), tvm.runtime.tensor(wq)).numpy()
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, _reference(xq, wq, 2, steps))


@needs_code
def test_the_int8_kernel_is_vpdpbusd_with_the_tile_in_registers():
    count, stores = hot_loop(executable_asm(_int8_conv(128, 7, 3, 4800, CODE_TARGET)), "vpdpbusd")
    assert count >= 8
    assert stores == []


# --- the int8 build: Int8Convolutions (per-call channel ranges folded into the weights) ------------------------


def _float_conv_module(channels: int, out_channels: int, taps: int, dilation: int, steps):
    """conv1d + bias over `steps` (a number, or 16 * k with the tile count k as a last input), float32."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, steps), "float32"))
    w = relax.Var("w", relax.TensorType((out_channels, channels, taps), "float32"))
    b = relax.Var("b", relax.TensorType((1, out_channels, 1), "float32"))
    symbolic = not isinstance(steps, int)
    tiles = [relax.Var("tiles", relax.ShapeType(list(tvm.tirx.analysis.undefined_vars(steps))))] if symbolic else []
    with bb.function("main", [x, w, b, *tiles]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w, padding=dilation * (taps - 1) // 2, dilation=dilation))
            out = bb.emit_output(relax.op.add(y, b))
        bb.emit_func_output(out)
    return bb.get()


def _emulated(x, w, b, dilation: int):
    """The study's int8_channel rounding (kokoro_tvm.studies.precision), then the conv in float64: what the build
    must compute."""
    import torch

    from kokoro_tvm.studies.emulation import EMULATIONS

    xr, wr = EMULATIONS["int8_channel"](torch.from_numpy(x).double(), torch.from_numpy(w).double(), 0)
    pad = dilation * (w.shape[2] - 1) // 2
    return (torch.nn.functional.conv1d(xr, wr, padding=pad, dilation=dilation) + torch.from_numpy(b)).numpy()


def _operands(rng, channels: int, out_channels: int, taps: int, steps: int):
    x = (rng.standard_normal((1, channels, steps)) * rng.uniform(0.1, 3.0, (1, channels, 1))).astype(np.float32)
    x[0, 1] = np.abs(x[0, 1]) + 0.5  # positive throughout: the range is widened to hold 0 (the padding)
    x[0, 2] = 0.0  # zero throughout: any scale represents it
    w = (rng.standard_normal((out_channels, channels, taps)) * 0.1).astype(np.float32)
    return x, w, rng.standard_normal((1, out_channels, 1)).astype(np.float32)


# Against the emulation the build differs by float32 rounding of the scale products and the dequantization
# (about 1e-7 relative) and by the rare value that lands on a rounding tie one way in float32 and the other in
# float64 (one uint8 step of one input); 1e-4 of the output's norm holds both with margin. Against the float
# conv, int8 is off by ~1%: the same bound would fail if the rewrite left the conv in float32.
EMULATION_BOUND = 1e-4


@needs_vnni
def test_the_int8_rewrite_computes_the_studys_int8_channel_conv():
    from kokoro_tvm.compiled import compile_and_load

    x, w, b = _operands(np.random.default_rng(5), 32, 48, 7, 100)  # 100: padded to whole column tiles
    rewritten = Int8Convolutions()(_float_conv_module(32, 48, 7, 3, 100))
    assert "int8_conv1d" in rewritten.script()
    (got,) = compile_and_load(rewritten)(x, w, b)
    expected = _emulated(x, w, b, 3)
    assert got.shape == expected.shape
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < EMULATION_BOUND
    exact = _emulated_float(x, w, b, 3)
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) > 10 * EMULATION_BOUND  # int8 really


@needs_code
def test_the_activation_packing_loads_scales_without_gathers():
    """The packing's vector loop rounds 16 values of four channels (vrndscaleps) and loads each channel's scale
    and zero point once, as broadcasts: with the padding condition around the whole expression, LLVM masked
    those loads too and emitted them as vgatherdps, two per channel and vector (4x slower on the decoder)."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    executable = compile_relax(Int8Convolutions()(_float_conv_module(32, 48, 7, 3, 96)), CODE_TARGET)
    blocks = re.split(r"\n(?=\.LBB)", executable_asm(executable))
    packing = max(blocks, key=lambda block: block.count("vrndscaleps"))
    assert packing.count("vrndscaleps") >= 4  # one vector of each channel of a quad
    assert "vgatherdps" not in packing


def test_the_weights_layout_and_peaks_are_computed_once_at_load():
    """Per call the weight side reads the weights once, in the kernel's layout, with each row's scale from the
    per-channel peaks max_k |w| (O x C values); the layout and the peaks depend on the weights alone, so lifting
    moves them (the O x C x K abs and transpose) into the function that runs at load."""
    module = _float_conv_module(32, 48, 7, 3, 96)
    module["main"] = module["main"].with_attr("num_input", 1)  # x is the input, w and b the weights
    lifted = relax.transform.LiftTransformParams()(Int8Convolutions()(module))
    per_call, at_load = lifted["main"].script(), lifted["main_transform_params"].script()
    assert "R.abs" in at_load and "R.permute_dims" in at_load
    assert "R.abs" not in per_call and "R.permute_dims" not in per_call


@pytest.mark.parametrize("batch", [1, 3])  # 3: each row's pair, then the largest over the rows
@pytest.mark.parametrize("steps", [1024, 1004])  # 1004: not whole vectors, a plain loop per row
def test_the_channel_range_is_min_and_max_bit_for_bit_from_one_read_of_each_row(steps, batch):
    """Per call the int8 conv needs each input channel's min and max: one reduction of max(-x) and max(x), the
    pair computed inside the row's loop (RowReduction's short last axis), so the activations are read once, not
    once per reduction. Negation is exact, so -max(-x) equals min(x) bit for bit, zeros of both signs
    included. A batch's ranges span all its rows, each reduction over one axis, so RowReduction takes it too (a
    reduction over the batch and the length at once it refuses)."""
    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.schedule.cpu import RowReduction

    rng = np.random.default_rng(7)
    x = rng.standard_normal((batch, 24, steps)).astype(np.float32)
    x[:, 3] = np.abs(x[:, 3])  # a channel without negatives: its min is positive
    x[:, 5, :] = -0.0
    x[0, 5, 7] = 0.0
    x[-1, 9, 11] = 40.0  # the extreme of channel 9 in the last row only
    bb = relax.BlockBuilder()
    xv = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [xv]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit_te(int8._channel_range, xv, primfunc_name_hint="int8_range"))
        bb.emit_func_output(out)
    module = bb.get()
    (got,) = compile_and_load(module)(x)
    np.testing.assert_array_equal(-got[:, 0], x.min(axis=(0, 2)))
    np.testing.assert_array_equal(got[:, 1], x.max(axis=(0, 2)))
    assert got[9, 1] == 40.0
    target = tvm.target.Target(host_target())
    schedule = RowReduction().apply(module["int8_range"], target, False)
    assert schedule is not None
    lanes = cpu_geometry(target).lanes(32)  # 16 with AVX-512, 8 with AVX2
    lanes = lanes if steps % lanes == 0 else None
    if lanes:  # under the row loop: the row's vectors, then the pair, then the lanes
        update = schedule.get_sblock("int8_range_rf_update" if batch == 1 else "int8_range_rows_rf_update")
        extents = [schedule.get(loop).extent for loop in schedule.get_loops(update)]
        assert [int(e) for e in extents[1:]] == [steps // lanes, 2, lanes], "each row read once for both results"


def _emulated_float(x, w, b, dilation: int):
    import torch

    pad = dilation * (w.shape[2] - 1) // 2
    y = torch.nn.functional.conv1d(
        torch.from_numpy(x).double(), torch.from_numpy(w).double(), padding=pad, dilation=dilation
    )
    return (y + torch.from_numpy(b)).numpy()


def _symbolic_int8_conv(target):
    """An int8 conv over 16 * k steps (k: the tile count, an input), compiled for target."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    k = tvm.tirx.Var("k", "int64")
    return compile_relax(Int8Convolutions()(_float_conv_module(16, 16, 3, 1, k * 16)), target)


@needs_code
def test_a_symbolic_length_int8_conv_steps_in_zmm():
    assert re.search(r"vpdpbusd\s.*%zmm", executable_asm(_symbolic_int8_conv(CODE_TARGET)))


@needs_vnni
def test_a_symbolic_length_int8_conv_runs_every_tile_count():
    vm = relax.VirtualMachine(_symbolic_int8_conv(host_target()), tvm.cpu())
    rng = np.random.default_rng(6)
    for tiles in (1, 3):
        x, w, b = _operands(rng, 16, 16, 3, 16 * tiles)
        arrays = [tvm.runtime.tensor(a) for a in (x, w, b)]
        got = vm["main"](*arrays, tvm.runtime.ShapeTuple([tiles])).numpy()
        expected = _emulated(x, w, b, 1)
        assert got.shape == expected.shape
        assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < EMULATION_BOUND


def test_only_selected_convs_with_channel_quads_become_int8():
    from kokoro_tvm.compiler.bf16 import selected_by_name

    mod = _float_conv_module(32, 48, 7, 3, 64)
    assert "int8_conv1d" not in Int8Convolutions(selected_by_name(["decoder.generator."]))(mod).script()
    assert "int8_conv1d" not in Int8Convolutions()(_float_conv_module(6, 8, 3, 1, 64)).script()  # 6 % 4


def test_int8_builds_take_the_resblocks_and_leave_the_rest_to_bf16():
    from kokoro_tvm.compiler.build import BuildSpec, key_fields
    from kokoro_tvm.compiler.pipeline import precision_passes
    from kokoro_tvm.compiler.precompile import bucket_specs
    from kokoro_tvm.components import build_precision
    from kokoro_tvm.runtime.buckets import parse_buckets

    specs = bucket_specs(parse_buckets("default"), precision="int8")
    assert {s.component: s.precision for s in specs} == {
        "albert": "full",
        "duration": "full",
        "f0n": "full",
        "text_encoder": "bf16",
        "decoder": "int8",
    }
    assert build_precision("text_encoder", "int8") == "bf16"  # the bf16 runtime's artifact, shared
    names = [p.info.name for p in precision_passes("decoder", "int8")]
    assert names.index("Int8Convolutions") < names.index("Bf16Convolutions")
    target = {"kind": "llvm", "mcpu": "znver4"}
    keys = [key_fields(BuildSpec.dynamic("decoder", precision=p), "w", target) for p in ("bf16", "int8")]
    assert keys[0] != keys[1] and keys[1]["int8_kernel"] == int8.KERNEL_VERSION


def test_a_target_without_avx512_vnni_is_refused_in_one_line():
    with pytest.raises(int8.Int8Unsupported, match="AVX512_VNNI") as caught:
        int8.require_int8({"kind": "llvm", "mcpu": "skylake-avx512"})  # AVX-512, no VNNI
    assert "\n" not in str(caught.value)
    int8.require_int8({"kind": "llvm", "mcpu": "cascadelake"})  # VNNI: no error


def test_int8_on_a_cpu_without_vnni_is_refused_before_any_work(capsys, tmp_path, monkeypatch):
    from kokoro_tvm.cli import main
    from kokoro_tvm.compiler import packed

    flags = packed.cpu_flag
    monkeypatch.setattr(packed, "cpu_flag", lambda flag: False if flag == "avx512_vnni" else flags(flag))
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path / "cache"))
    assert main(["-q", "compile", "--precision", "int8"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kokoro-tvm: error:") and "AVX512_VNNI" in err and "\n" not in err, err
    assert not (tmp_path / "cache" / "artifacts").exists()


# --- the instruction's own rate (kokoro_tvm.compiler.peak, commands.bench_kernels.instruction_peak) -----------------


@needs_vnni
def test_the_peak_loop_is_the_step_on_registers_and_computes_it():
    """`instruction_peak` times `peak_loop`, vpdpbusd on PEAK_CHAINS register accumulators: nothing but the step
    in the loop (no loads, no stores), and the accumulators hold exactly the dot products it issued."""
    from kokoro_tvm.compiler.peak import PEAK_CHAINS, peak_loop

    executable = peak_loop("int8", threads=2)
    asm = executable_asm(executable)
    count, stores = hot_loop(asm, "vpdpbusd")
    assert count >= PEAK_CHAINS and count % PEAK_CHAINS == 0 and stores == []  # LLVM may unroll the steps
    steps = [line for line in asm.splitlines() if "vpdpbusd" in line]
    assert all("(" not in line and "%zmm" in line for line in steps), "register operands only"
    out = tvm.runtime.tensor(np.zeros((2, PEAK_CHAINS * 16), "int32"))
    executable["int8_conv1d"](out, 5)
    for thread in range(2):
        # a word 0x01020304 (+1 on odd steps): bytes 4 (5), 3, 2, 1; b 0x01010101 + thread: 1 + thread, 1, 1, 1
        issued = sum((4 + i % 2) * (1 + thread) + 3 + 2 + 1 for i in range(5))
        want = np.repeat(np.arange(PEAK_CHAINS) + thread + issued, 16)
        np.testing.assert_array_equal(out.numpy()[thread], want)


def test_a_packed_convs_multiply_adds_are_read_from_its_arguments():
    from kokoro_tvm.commands.bench_kernels import _packed_operands

    x8 = tvm.runtime.tensor(np.zeros((1, 8, 120, 4), "uint8"))
    w8 = tvm.runtime.tensor(np.zeros((48, 8, 7, 4), "int8"))
    out = tvm.runtime.tensor(np.zeros((1, 48, 96), "float32"))
    assert _packed_operands([x8, w8, out], "int8") == (48, 32, 7, 96)
    x16 = tvm.runtime.tensor(np.zeros((1, 16, 120, 2), "uint16"))
    w16 = tvm.runtime.tensor(np.zeros((48, 16, 3, 2), "uint16"))
    assert _packed_operands([x16, w16, out], "bf16") == (48, 32, 3, 96)
