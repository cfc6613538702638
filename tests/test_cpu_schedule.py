"""The speed work keeps values: Relax rewrites (polyphase conv-transpose, aligned conv lengths, vectorizable
sine) against torch, and the CPU schedules against the same graph unscheduled. Unit tier: small shapes."""

import re

import numpy as np
import pytest
import torch
import tvm
from tvm import relax
from tvm.s_tir import dlight

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.compiler.schedule.cpu import rules
from kokoro_tvm.compiler.targets import cpu_geometry, host_target

# float64, different summation order only (polyphase regroups the taps): a few ulps of the result's scale
F64_TOL = 1e-12


def _module(build, inputs, dtype="float32"):
    """`build(*vars)` as the Relax function `main`, one parameter per numpy input."""
    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(x.shape, dtype)) for i, x in enumerate(inputs)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params))
        bb.emit_func_output(out)
    return bb.get()


def _run(build, inputs, dtype="float64"):
    """Compile `build(*vars)` as a Relax function with our pipeline and run it on numpy `inputs`."""
    return compile_and_load(_module(build, inputs, dtype))(*inputs)[0]


@pytest.mark.parametrize(
    "c_in, c_out, kernel, stride, padding, output_padding, steps",
    [
        (512, 256, 20, 10, 5, 0, 6),  # the generator's first upsampler
        (256, 128, 12, 6, 3, 0, 9),  # the second
        (11, 1, 20, 5, 0, 0, 17),  # the iSTFT's overlap-add
        (4, 3, 5, 2, 1, 1, 7),  # a kernel that is not a multiple of the stride, with output padding
    ],
)
def test_polyphase_conv_transpose_matches_torch(c_in, c_out, kernel, stride, padding, output_padding, steps):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((1, c_in, steps)), rng.standard_normal((c_in, c_out, kernel))
    got = _run(
        lambda a, b: relax.op.nn.conv1d_transpose(a, b, strides=stride, padding=padding, output_padding=output_padding),
        [x, w],
    )
    want = torch.nn.functional.conv_transpose1d(
        torch.tensor(x), torch.tensor(w), stride=stride, padding=padding, output_padding=output_padding
    ).numpy()
    assert got.shape == want.shape
    assert np.abs(got - want).max() <= F64_TOL * np.abs(want).max()


def test_polyphase_interleave_over_a_symbolic_length_is_one_pass_and_exact():
    """The x6 upsampler over a length of 16 k + 1 steps (a symbolic build's shape): the phases are interleaved by
    one kernel, no copying reshape (as reshape / transpose / reshape, both reshapes stayed copies with a division
    per element), and every tile count gives torch's values."""
    from kokoro_tvm.compiler.pipeline import compile_lowered, lower

    rng = np.random.default_rng(7)
    weights = rng.standard_normal((8, 4, 12))  # a constant, as in a build (its rearrangement is folded)
    k = tvm.tirx.Var("k", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 8, k * 16 + 1), "float64"))
    tiles = relax.Var("tiles", relax.ShapeType([k]))
    with bb.function("main", [x, tiles]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv1d_transpose(x, relax.const(weights, "float64"), strides=6, padding=3))
        bb.emit_func_output(out)
    target = tvm.target.Target(host_target())
    lowered = lower(bb.get(), target)
    names = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert any("polyphase_interleave" in name for name in names)
    assert not [name for name in names if "reshape" in name or "transpose" in name], names
    vm = relax.VirtualMachine(compile_lowered(lowered, target), tvm.cpu())
    for count in (1, 3):
        signal = rng.standard_normal((1, 8, count * 16 + 1))
        got = vm["main"](tvm.runtime.tensor(signal), tvm.runtime.ShapeTuple([count]))
        want = torch.nn.functional.conv_transpose1d(torch.tensor(signal), torch.tensor(weights), stride=6, padding=3)
        assert got.numpy().shape == tuple(want.shape)
        assert np.abs(got.numpy() - want.numpy()).max() <= F64_TOL * np.abs(want.numpy()).max()


@pytest.mark.parametrize(
    "c_in, c_out, kernel, dilation, padding, steps", [(16, 16, 11, 5, 25, 77), (22, 24, 7, 1, 3, 101)]
)
def test_aligned_conv_matches_torch(c_in, c_out, kernel, dilation, padding, steps):
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, c_in, steps)), rng.standard_normal((c_out, c_in, kernel))
    got = _run(lambda a, b: relax.op.nn.conv1d(a, b, padding=padding, dilation=dilation), [x, w])
    want = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), padding=padding, dilation=dilation).numpy()
    assert got.shape == want.shape  # the aligned conv's extra outputs are sliced off
    assert np.abs(got - want).max() <= F64_TOL * np.abs(want).max()


def test_vectorizable_sine_is_the_rounded_sine():
    """Within one float32 ulp of the float64 sine rounded to float32 (the correctly rounded result), over
    Snake-sized arguments and SineGen-sized phases (thousands of radians)."""
    rng = np.random.default_rng(2)
    x = np.concatenate([rng.standard_normal(1024) * scale for scale in (0.1, 3.0, 100.0, 3e4)]).astype(np.float32)
    got = _run(relax.op.sin, [x[None]], dtype="float32")[0]
    want = np.sin(x.astype(np.float64)).astype(np.float32)
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want)))


def _snake_module(steps: int, square: bool):
    """main(x [1, steps], alpha) = sin(alpha x) (or Snake: x + sin(alpha x)^2 / alpha), alpha named as the
    generator's Snake parameters are (what passes.SnakeSine selects by)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, steps), "float32"))
    alpha = relax.Var("p_decoder_generator_resblocks_0_alpha1_0", relax.TensorType((1, 1), "float32"))
    with bb.function("main", [x, alpha]):
        with bb.dataflow():
            wave = bb.emit(relax.op.sin(relax.op.multiply(alpha, x)))
            out = relax.op.add(x, relax.op.divide(relax.op.multiply(wave, wave), alpha)) if square else wave
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def test_snake_sine_is_float32_accurate_and_one_kernel_with_snake():
    """passes.SnakeSine: Snake's sine in float32 arithmetic stays within 1.3e-7 of the correctly rounded sine
    (about 2 ulp of values near 1; the float32 polynomial's own rounding, measured 1.2e-7) over Snake-sized
    arguments and beyond (|alpha x| to 1e4, where the three-part pi keeps the reduction exact), and the whole
    Snake (sine, square, sum) is one kernel: nothing between them goes through memory."""
    from kokoro_tvm.compiler.pipeline import lower

    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(4096) * scale for scale in (0.1, 3.0, 30.0, 3e3)]).astype(np.float32)
    alpha = np.ones((1, 1), np.float32)
    got = compile_and_load(_snake_module(x.size, square=False))(x[None], alpha)[0][0]
    want = np.sin(x.astype(np.float64))
    assert np.abs(got - want).max() <= 1.3e-7
    lowered = lower(_snake_module(x.size, square=True), host_target())
    kernels = [gv.name_hint for gv, f in lowered.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert len(kernels) == 1, kernels
    assert "float64" not in lowered[kernels[0]].script()


def _unscheduled_and_scheduled(build, inputs):
    """Run the legalized graph twice: TVM's pipeline (nothing scheduled) and ours; also report which PrimFuncs
    our rules scheduled."""
    mod = _module(build, inputs)
    target = tvm.target.Target(host_target())
    outputs = [compile_and_load(mod, host_target(), stock=stock)(*inputs)[0] for stock in (True, False)]
    with target:
        legal = tvm.transform.Sequential(relax.backend.cpu_generic.pipeline.legalize_passes(target))(mod)
        scheduled = dlight.ApplyDefaultSchedule(*rules())(legal)
    flags = {
        gv.name_hint: bool(f.attrs and f.attrs.get("tirx.is_scheduled", False))
        for gv, f in scheduled.functions_items()
        if isinstance(f, tvm.tirx.PrimFunc)
    }
    return outputs, flags


def _snake_block(x, w, b, alpha):
    """conv + bias + leaky ReLU, then an InstanceNorm-like reduction and Snake: what the generator fuses."""
    y = relax.op.nn.leakyrelu(relax.op.add(relax.op.nn.conv1d(x, w, padding=3), b), 0.1)
    centered = relax.op.subtract(y, relax.op.mean(y, axis=[2], keepdims=True))
    wave = relax.op.sin(relax.op.multiply(alpha, centered))
    return relax.op.add(centered, relax.op.multiply(wave, wave))


def test_every_primfunc_is_scheduled_and_values_are_kept():
    rng = np.random.default_rng(3)
    inputs = [
        rng.standard_normal((1, 16, 96)).astype(np.float32),
        rng.standard_normal((24, 16, 7)).astype(np.float32) * 0.2,
        rng.standard_normal((1, 24, 1)).astype(np.float32),
        rng.uniform(0.5, 2.0, (1, 24, 1)).astype(np.float32),
    ]
    (plain, ours), flags = _unscheduled_and_scheduled(_snake_block, inputs)
    assert flags and all(flags.values()), f"unscheduled PrimFuncs: {[n for n, s in flags.items() if not s]}"
    # float32, different summation order and our sine (<= 1 ulp): relative to the output's scale
    assert np.abs(ours - plain).max() <= 1e-5 * np.abs(plain).max()


@pytest.mark.parametrize("rows", [40, 59])  # 59: prime, so the row tile is a single row
def test_matmul_contraction_keeps_values(rows):
    rng = np.random.default_rng(4)
    a, b = rng.standard_normal((rows, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    (plain, ours), flags = _unscheduled_and_scheduled(relax.op.matmul, [a, b])
    assert all(flags.values())
    assert np.abs(ours - a @ b).max() <= 1e-5 * np.abs(a @ b).max()
    assert np.abs(plain - a @ b).max() <= 1e-5 * np.abs(a @ b).max()


def test_folded_weight_norm_is_identical_and_undone():
    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
    from kokoro_tvm.compiler.patches import folded_weight_norm
    from kokoro_tvm.weights.resolve import kmodel_skeleton

    torch.manual_seed(0)
    model = kmodel_skeleton().eval()
    state = {k: v.clone() for k, v in model.state_dict().items()}
    hooks = sum(len(m._forward_pre_hooks) for m in model.modules())
    inputs = example_inputs(ComponentShape("f0n", 8), torch.float32)
    with torch.no_grad():
        with folded_weight_norm(model):
            folded = component_module(model, "f0n")(*inputs)
            assert not any(k.endswith("_g") for k in model.state_dict())
        stock = component_module(model, "f0n")(*inputs)
    assert all(torch.equal(a, b) for a, b in zip(folded, stock, strict=True))
    assert model.state_dict().keys() == state.keys()
    assert all(torch.equal(state[k], v) for k, v in model.state_dict().items())
    assert sum(len(m._forward_pre_hooks) for m in model.modules()) == hooks


def _fused_primfuncs(build, shapes):
    """The legalized, fused PrimFuncs of a small Relax graph, each re-parsed as a standalone function."""
    import textwrap

    from tvm.script import from_source
    from tvm.script import tirx as T

    bb = relax.BlockBuilder()
    params = [relax.Var(f"x{i}", relax.TensorType(s, "float32")) for i, s in enumerate(shapes)]
    with bb.function("main", params):
        with bb.dataflow():
            out = bb.emit_output(build(*params))
        bb.emit_func_output(out)
    target = tvm.target.Target(host_target())
    with target:
        legal = tvm.transform.Sequential(relax.backend.cpu_generic.pipeline.legalize_passes(target))(bb.get())
    lines = legal.script().split("\n")
    for gv, func in legal.functions_items():
        if isinstance(func, tvm.tirx.PrimFunc):
            start = next(i for i, line in enumerate(lines) if line.strip().startswith(f"def {gv.name_hint}("))
            end = next((j for j in range(start + 1, len(lines)) if lines[j].startswith("    @")), len(lines))
            source = "@T.prim_func(s_tir=True)\n" + textwrap.dedent("\n".join(lines[start:end]))
            yield gv.name_hint, from_source(source, extra_vars={"T": T}).with_attr("global_symbol", "main")


def test_contraction_epilogue_onto_a_longer_axis_is_computed_everywhere():
    """Regression: conv -> slice -> zero pad onto a longer axis (the generator's alignment makes this). The
    epilogue's extra positions read no conv output, so computing it per conv tile left them unwritten."""
    from kokoro_tvm.compiler.schedule.cpu import Contraction

    def graph(x, w):
        y = relax.op.strided_slice(relax.op.nn.conv1d(x, w), axes=[2], begin=[0], end=[90])
        return relax.op.nn.pad(y, pad_width=[0, 0, 0, 0, 0, 38])

    target = tvm.target.Target(host_target())
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((1, 8, 96)).astype(np.float32), rng.standard_normal((16, 8, 1)).astype(np.float32)
    checked = 0
    for name, func in _fused_primfuncs(graph, [x.shape, w.shape]):
        schedule = Contraction().apply(func, target, False)
        if schedule is None:
            continue
        lib = tvm.compile(schedule.mod, target=target)["main"]
        out = tvm.runtime.tensor(np.full((1, 16, 128), np.nan, dtype=np.float32))
        lib(tvm.runtime.tensor(x), tvm.runtime.tensor(w), out)
        want = np.pad(
            torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w)).numpy()[..., :90], [(0, 0), (0, 0), (0, 38)]
        )
        np.testing.assert_allclose(out.numpy(), want, rtol=1e-5, atol=1e-5, err_msg=name)
        checked += 1
    assert checked == 1


def test_values_read_at_other_positions_stay_outside_the_tile():
    """Regression: a value read twice is computed per output chunk only if it is read at the chunk's own
    positions. Read at other positions (a shift, a transpose), a per-chunk copy has to cover them too; with
    the decoder's SineGen phase that meant the whole buffer for every chunk, quadratic in length (a
    5120-frame decoder stalled for minutes)."""
    from kokoro_tvm.compiler.schedule.cpu import Elementwise

    def graph(x):
        y = relax.op.multiply(x, x)
        shifted = relax.op.concat(
            [relax.op.strided_slice(y, [2], [1], [64]), relax.op.strided_slice(y, [2], [0], [1])], axis=2
        )
        return relax.op.add(y, shifted)

    target = tvm.target.Target(host_target())
    (name, func), *_ = list(_fused_primfuncs(graph, [(1, 48, 64)]))
    schedule = Elementwise().apply(func, target, False)
    assert schedule is not None, name
    output_blocks = [b for b in schedule.get_child_blocks(schedule.get_sblock("root"))]
    outer = [schedule.get(schedule.get_loops(b)[0]) for b in output_blocks]
    assert len(outer) >= 2 and not outer[0].same_as(outer[-1]), "the shifted value was computed per chunk"


@pytest.mark.parametrize("steps", [1024, 1004])  # 1004: not a whole number of 8- or 16-lane vectors: a plain loop
def test_row_reduction_keeps_values(steps):
    """Masked sums over the time axis (norm statistics): vector partial sums per row, rows in parallel."""
    from kokoro_tvm.compiler.schedule.cpu import RowReduction

    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 24, steps)).astype(np.float32)
    mask = (np.arange(steps) < steps - 37).astype(np.float32)[None, None]

    def graph(a, m):
        return relax.op.sum(relax.op.multiply(a, m), axis=[2], keepdims=True)

    (plain, ours), flags = _unscheduled_and_scheduled(graph, [x, mask])
    assert all(flags.values())
    want = (x.astype(np.float64) * mask).sum(-1, keepdims=True)
    # float32 sums of ~1000 unit-variance terms in another order: a few ulps of the running sum (~sqrt(n))
    assert np.abs(ours - want).max() <= 1e-5 * np.sqrt(steps)
    target = tvm.target.Target(host_target())
    (name, func), *_ = list(_fused_primfuncs(graph, [x.shape, mask.shape]))
    schedule = RowReduction().apply(func, target, False)
    assert schedule is not None, name
    partial_sums = "rf" in schedule.mod.script()
    lanes = cpu_geometry(target).lanes(32)  # 16 float32 lanes with AVX-512, 8 with AVX2
    assert partial_sums == (steps % lanes == 0), "vector partial sums exactly when the row is whole vectors"


def test_register_tile_follows_cache_set_collisions():
    from kokoro_tvm.compiler.schedule.cpu.contraction import WIDE_TILE, _set_collisions
    from kokoro_tvm.compiler.targets import CPUGeometry

    zen4 = CPUGeometry(512, 32)  # 32 KiB, 8-way, 64-byte lines: 64 sets, so rows 4 KiB apart share one set
    rows, ways = WIDE_TILE[0], zen4.l1_ways
    assert _set_collisions(1024 * 3 * 4, rows, zen4) == rows  # 1024 channels x k3: every row in one set
    assert _set_collisions(512 * 2 * 4, rows, zen4) == rows  # 512 x k2 (the first upsampler's polyphase conv)
    assert _set_collisions(128 * 11 * 4, rows, zen4) <= ways // 2  # the generator's convs keep the wide tile
    assert _set_collisions(1090 * 3 * 4, rows, zen4) <= ways // 2


@pytest.mark.parametrize(
    "c_in, c_out, kernel, steps",
    [
        (256, 32, 4, 64),  # weight rows 4 KiB apart: the narrow tile; weights larger than the input: rows outer
        (16, 48, 3, 160),  # the wide tile, columns outer
    ],
)
def test_conv_tiles_keep_values(c_in, c_out, kernel, steps):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, c_in, steps)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, kernel)) / np.sqrt(c_in * kernel)).astype(np.float32)
    b = rng.standard_normal((1, c_out, 1)).astype(np.float32)

    def graph(a, weight, bias):  # a conv with a per-tile epilogue (bias)
        return relax.op.add(relax.op.nn.conv1d(a, weight, padding=kernel // 2), bias)

    (plain, ours), flags = _unscheduled_and_scheduled(graph, [x, w, b])
    assert all(flags.values())
    want = torch.nn.functional.conv1d(torch.tensor(x), torch.tensor(w), torch.tensor(b[0, :, 0]), padding=kernel // 2)
    # float32, unit-scale outputs from a few hundred products: a few ulps
    np.testing.assert_allclose(ours, want.numpy(), rtol=1e-5, atol=1e-5)


def test_conv_epilogue_runs_per_tile():
    """Regression: the epilogue (bias, masks, residuals) is applied to each register tile, not in a second pass
    over a whole-size intermediate (a check made after `cache_write` had silently sent every epilogue there)."""
    from kokoro_tvm.compiler.schedule.cpu import Contraction

    def graph(a, weight, bias):
        return relax.op.add(relax.op.nn.conv1d(a, weight, padding=1), bias)

    target = tvm.target.Target(host_target())
    (name, func), *_ = list(_fused_primfuncs(graph, [(1, 16, 64), (32, 16, 3), (1, 32, 1)]))
    schedule = Contraction().apply(func, target, False)
    assert schedule is not None, name
    root_loops = [
        schedule.get(schedule.get_loops(b)[0]) for b in schedule.get_child_blocks(schedule.get_sblock("root"))
    ]
    parallel = {id(loop) for loop in root_loops if loop.kind == tvm.tirx.ForKind.PARALLEL}
    epilogue = schedule.get(schedule.get_loops(schedule.get_sblock("T_add"))[0])
    conv = schedule.get(schedule.get_loops(schedule.get_sblock("conv1d_ncw_update"))[0])
    assert epilogue.same_as(conv), "the epilogue has its own loop nest"
    assert parallel


@pytest.mark.parametrize("exponent", [2.0, 3.0])
def test_integer_powers_are_products(exponent):
    from kokoro_tvm.compiler.passes import IntegerPowers

    rng = np.random.default_rng(8)
    x = rng.standard_normal((4, 64)).astype(np.float32)

    def graph(a):
        return relax.op.power(a, relax.const(exponent, "float32"))

    bb = relax.BlockBuilder()
    param = relax.Var("x", relax.TensorType(x.shape, "float32"))
    with bb.function("main", [param]):
        with bb.dataflow():
            out = bb.emit_output(graph(param))
        bb.emit_func_output(out)
    assert "power" not in IntegerPowers()(bb.get()).script()
    # PyTorch computes these powers as the same products, in the same order: bit-identical
    np.testing.assert_array_equal(_run(graph, [x], dtype="float32"), torch.pow(torch.tensor(x), exponent).numpy())


def test_a_float32_running_sum_is_pytorchs_bit_for_bit():
    # SineGen's phase: a running sum along the frame axis of [1, steps, harmonics]; PyTorch's CPU cumsum keeps a
    # double accumulator and rounds each output. 20,000 steps of increments in [0, 0.1) put a float32
    # accumulator 1e-3 away from it (the assertion below that the float32 order differs keeps the case able to fail).
    from kokoro_tvm.compiler.passes import CumsumInFloat64

    rng = np.random.default_rng(9)
    x = (rng.random((1, 20000, 3)) * 0.1).astype(np.float32)
    graph = lambda a: relax.op.cumsum(a, axis=1)  # noqa: E731
    rewritten = CumsumInFloat64()(_module(graph, [x])).script()
    assert "float64" in rewritten and rewritten.count("R.cumsum") == 1
    got = _run(graph, [x], dtype="float32")
    np.testing.assert_array_equal(got, torch.cumsum(torch.tensor(x), dim=1).numpy())
    assert np.abs(got - np.cumsum(x, axis=1, dtype=np.float32)).max() > 1e-4


AVX2 = {"kind": "llvm", "mcpu": "haswell"}  # 256-bit vectors, 16 registers: a subset of this CPU's AVX-512
AARCH64 = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "cortex-a72"}  # NEON, 128-bit


def _conv_norm_snake_module(inputs):
    return _module(_snake_block, inputs)


def _snake_inputs():
    rng = np.random.default_rng(8)
    return [
        rng.standard_normal((1, 16, 128)).astype(np.float32),
        rng.standard_normal((24, 16, 7)).astype(np.float32) * 0.2,
        rng.standard_normal((1, 24, 1)).astype(np.float32),
        rng.uniform(0.5, 2.0, (1, 24, 1)).astype(np.float32),
    ]


def test_cpu_geometry_comes_from_the_target():
    from kokoro_tvm.compiler.targets import cpu_geometry

    assert cpu_geometry(AVX2).vector_bits == 256 and cpu_geometry(AVX2).vector_registers == 16
    assert cpu_geometry({"kind": "llvm", "mcpu": "znver4"}).vector_bits == 512
    assert cpu_geometry({"kind": "llvm", "mcpu": "x86-64"}).vector_bits == 128  # SSE2 baseline
    assert cpu_geometry(AARCH64).vector_bits == 128 and cpu_geometry(AARCH64).vector_registers == 32
    assert cpu_geometry({"kind": "llvm", "mcpu": "sapphirerapids"}).l1_sets == 64  # 48 KiB, 12-way


def test_an_avx2_build_runs_here_within_the_native_tolerance():
    """Scheduled for haswell (8 float32 lanes, 16 registers: the 4 x 2 register tile), run on this CPU (every
    x86 CPU these builds are for has AVX2): same values as TVM's unscheduled build, within the native build's
    tolerance."""
    inputs = _snake_inputs()
    mod = _conv_norm_snake_module(inputs)
    plain = compile_and_load(mod, host_target(), stock=True)(*inputs)[0]
    native = compile_and_load(mod, host_target())(*inputs)[0]
    avx2 = compile_and_load(mod, AVX2)(*inputs)[0]
    # float32, different summation order and our sine (<= 1 ulp): relative to the output's scale (as above)
    for got in (native, avx2):
        assert np.abs(got - plain).max() <= 1e-5 * np.abs(plain).max()


def test_the_avx2_build_uses_256_bit_vectors():
    from kokoro_tvm.compiler.pipeline import compile_relax

    inputs = _snake_inputs()
    library = next(m for m in compile_relax(_conv_norm_snake_module(inputs), AVX2).mod.imports if m.kind == "llvm")
    assembly = library.inspect_source("s")
    assert "%ymm" in assembly and "%zmm" not in assembly


def test_aarch64_code_is_generated_with_neon_vectors(tmp_path):
    """Cross-compiled, not run: an aarch64 ELF object whose kernels use NEON vector FMAs on 128-bit registers."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    inputs = _snake_inputs()
    library = next(m for m in compile_relax(_conv_norm_snake_module(inputs), AARCH64).mod.imports if m.kind == "llvm")
    obj = tmp_path / "kernels.o"
    library.write_to_file(str(obj))
    header = obj.read_bytes()[:20]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[18:20], "little") == 183  # EM_AARCH64
    assert "fmla\tv" in library.inspect_source("s")  # vector fused multiply-add (v registers)


def test_the_pipeline_dumps_the_ir_after_each_phase(tmp_path):
    from kokoro_tvm.compiler.pipeline import PHASES, compile_relax

    compile_relax(_conv_norm_snake_module(_snake_inputs()), host_target(), dump_dir=tmp_path)
    dumps = sorted(p.name for p in tmp_path.iterdir())
    assert dumps == [f"{i:02d}_{phase}.py" for i, phase in enumerate(PHASES, start=1)]
    text = {phase: (tmp_path / name).read_text() for phase, name in zip(PHASES, dumps, strict=True)}
    assert "R.nn.conv1d" in text["rewrite"] and "R.nn.conv1d" not in text["legalize"]  # legalized to TIR
    assert "tirx.is_scheduled" not in text["legalize"] and "tirx.is_scheduled" in text["schedule"]


def _scheduled_script(a: np.ndarray, b: np.ndarray, target: dict) -> str:
    target = tvm.target.Target(target)
    with target:
        legal = tvm.transform.Sequential(relax.backend.cpu_generic.pipeline.legalize_passes(target))(
            _module(relax.op.matmul, [a, b])
        )
        return dlight.ApplyDefaultSchedule(*rules())(legal).script()


def test_avx2_takes_a_register_tile_of_4_rows_by_2_vectors():
    """16 registers: 4 rows x 2 vectors of 8 columns, 2 loads and 4 broadcasts for 8 FMAs a step; 8 x 1 asked 9
    loads, more than two ports issue in that time (1.15-1.21x slower on a Zen 2: NOTES/performance.md)."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((16, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    script = _scheduled_script(a, b, AVX2)
    step = (
        r"T\.unroll\(T\.int64\((\d+)\)\):\s+for \w+ in T\.vectorized\(T\.int64\((\d+)\)\):"
        r"\s+with T\.sblock\(\"matmul_update"
    )
    assert re.search(step, script).groups() == ("4", "16")  # 4 rows unrolled, 16 columns: two ymm vectors


@pytest.mark.parametrize("rows, tile", [(8, (8, 32)), (16, (16, 16)), (3, (3, 16))])
def test_a_matmul_with_fewer_rows_than_the_tile_takes_more_column_vectors(rows, tile):
    """ALBERT's matmuls have a row axis (tokens) that divides by 8 only: the register tile is 8 rows x 2 vectors,
    16 accumulators as the 16 x 1 tile, not 8 x 1 (its feed-forward matmul ran 1.3x slower). 3 rows: too few to
    widen for (3 x 5 vectors would leave the loads the bottleneck). The tiles are AVX-512's (16 lanes, 32
    registers), scheduled for a Zen 4 target whatever CPU runs the test; the numbers are checked on this one."""
    rng = np.random.default_rng(9)
    a, b = rng.standard_normal((rows, 64)).astype(np.float32), rng.standard_normal((64, 96)).astype(np.float32)
    script = _scheduled_script(a, b, {"kind": "llvm", "mcpu": "znver4"})
    tasks = re.findall(r"in T\.parallel\(T\.int64\((\d+)\)\)", script)
    assert tasks == [str(rows // tile[0] * 96 // tile[1])]  # one task per register tile
    (_, ours), flags = _unscheduled_and_scheduled(relax.op.matmul, [a, b])
    assert all(flags.values())
    assert np.abs(ours - a @ b).max() <= 1e-5 * np.abs(a @ b).max()  # 64 products, another order: a few ulps


@pytest.mark.parametrize("outputs", [2048, 48])  # 48: three vectors of outputs
def test_a_style_projection_is_a_column_reduction_and_keeps_values(outputs):
    """A Linear layer on one row with its weight transposed at load (AdaIN's style fc): ColumnReduction takes it
    (RowReduction vectorized the rows, a whole row's stride per lane) and the values are numpy's."""
    from kokoro_tvm.compiler.schedule.cpu import ColumnReduction

    rng = np.random.default_rng(8)
    inputs = [rng.standard_normal(shape).astype(np.float32) for shape in ((1, 128), (128, outputs), (outputs,))]

    def graph(style, weight, bias):
        return relax.op.add(relax.op.matmul(style, weight), bias)

    target = tvm.target.Target(host_target())
    with target:
        legal = tvm.transform.Sequential(relax.backend.cpu_generic.pipeline.legalize_passes(target))(
            _module(graph, inputs)
        )
    ((name, func),) = [(gv.name_hint, f) for gv, f in legal.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert ColumnReduction().apply(func, target, False) is not None, name
    (plain, ours), flags = _unscheduled_and_scheduled(graph, inputs)
    assert all(flags.values())
    want = inputs[0].astype(np.float64) @ inputs[1] + inputs[2]
    # float32 sums of 128 unit-scale products, in another order than numpy's: a few ulps of the largest output
    assert np.abs(ours - want).max() <= 1e-5 * np.abs(want).max()


def _rows_in_parallel(func, target):
    """`func` as Elementwise scheduled it before the long-axis split: values inlined, rows in parallel."""
    from tvm import s_tir
    from tvm.s_tir.dlight.analysis import normalize_prim_func

    from kokoro_tvm.compiler.schedule.cpu.base import elementwise_loops, inline_single_use

    sch = s_tir.Schedule(func)
    infos = normalize_prim_func(sch)
    assert inline_single_use(sch, infos[:-1]) == []
    elementwise_loops(sch, infos[-1].block_rv, cpu_geometry(target).lanes(32))
    return sch.mod


def test_few_rows_over_a_long_odd_axis_split_the_long_axis_among_threads():
    """The decoder's STFT output: 11 magnitude rows (a square root each) and 11 phase rows (an atan2 call each)
    concatenated over an odd frame count. Parallel over rows, one thread of two took every atan2; the long axis
    is now cut into chunks, chunks outermost, with the same values as the row-parallel schedule. A loop with no
    libm call stays row-parallel (LLVM vectorizes it; a chunk's bound check would not let it)."""
    from kokoro_tvm.compiler.schedule.cpu import Elementwise
    from kokoro_tvm.compiler.schedule.cpu.elementwise import CHUNK

    steps = 5001  # odd: no whole vectors, so the rule keeps a plain loop body

    def graph(re_, im):
        magnitude = relax.op.sqrt(relax.op.add(relax.op.multiply(re_, re_), relax.op.multiply(im, im)))
        return relax.op.concat([magnitude, relax.op.atan2(im, re_)], axis=1)

    target = tvm.target.Target(host_target())
    rng = np.random.default_rng(11)
    re_, im = (rng.standard_normal((1, 11, steps)).astype(np.float32) for _ in range(2))
    im[..., ::7], re_[..., 3::5] = 0.0, -0.0  # the signed zeros atan2 distinguishes
    (name, func), *_ = list(_fused_primfuncs(graph, [re_.shape, im.shape]))
    schedule = Elementwise().apply(func, target, False)
    assert schedule is not None, name
    parallel = [
        schedule.get(loop)
        for block in schedule.get_child_blocks(schedule.get_sblock("root"))
        for loop in schedule.get_loops(block)
        if schedule.get(loop).kind == tvm.tirx.ForKind.PARALLEL
    ]
    assert [int(loop.extent) for loop in parallel] == [-(-steps // CHUNK) * 22]
    outs = []
    for mod in (_rows_in_parallel(func, target), schedule.mod):
        out = tvm.runtime.tensor(np.full((1, 22, steps), np.nan, dtype=np.float32))
        tvm.compile(mod, target=target)["main"](tvm.runtime.tensor(re_), tvm.runtime.tensor(im), out)
        outs.append(out.numpy())
    # bit for bit against the row-parallel schedule it replaces: the same loop body, each output computed once
    assert np.array_equal(outs[0].view(np.uint32), outs[1].view(np.uint32))
    np.testing.assert_allclose(outs[1], np.concatenate([np.hypot(re_, im), np.arctan2(im, re_)], axis=1), rtol=2e-6)

    (_, plain), *_ = list(
        _fused_primfuncs(lambda a, b: relax.op.concat([relax.op.multiply(a, a), b], axis=1), [re_.shape, im.shape])
    )
    schedule = Elementwise().apply(plain, target, False)
    (loop,) = [
        schedule.get(lp)
        for b in schedule.get_child_blocks(schedule.get_sblock("root"))
        for lp in schedule.get_loops(b)
        if schedule.get(lp).kind == tvm.tirx.ForKind.PARALLEL
    ]
    assert int(loop.extent) == 22


def test_a_conv_tile_prefetches_the_rows_its_epilogue_reads_and_writes():
    """Before each tile's reduction one prefetch per tile row of the residual the epilogue adds (a read) and of
    the output it writes (a write), none of a per-channel vector (the bias), no mark left after the pass
    (passes.EpiloguePrefetch, marked by Contraction); the values are the unscheduled graph's."""
    from kokoro_tvm.compiler.passes import EpiloguePrefetch
    from kokoro_tvm.compiler.passes.prefetch import MARK
    from kokoro_tvm.compiler.schedule.cpu import Contraction

    def graph(a, weight, bias, residual):
        return relax.op.add(relax.op.add(relax.op.nn.conv1d(a, weight, padding=1), bias), residual)

    shapes = [(1, 16, 64), (32, 16, 3), (1, 32, 1), (1, 32, 64)]
    target = tvm.target.Target(host_target())
    (name, func), *_ = list(_fused_primfuncs(graph, shapes))
    schedule = Contraction().apply(func, target, False)
    assert schedule is not None, name
    reduction = map(schedule.get, schedule.get_loops(schedule.get_sblock("conv1d_ncw_update")))
    assert sum(MARK in loop.annotations for loop in reduction) == 1
    lowered = EpiloguePrefetch()(tvm.IRModule({"main": schedule.mod["main"]}))["main"].script()
    assert MARK not in lowered
    # T.prefetch(T.address_of(buffer[..]), rw, locality, cache): the residual read (0), the output written (1)
    prefetches = re.findall(r"T\.prefetch\(T\.address_of\(\w+\[[^\]]*\]\), (\d)", lowered)
    assert sorted(prefetches) == ["0", "1"], prefetches
    assert re.search(r"for prefetch_row in T\.unroll\(", lowered)
    assert lowered.index("T.prefetch") < lowered.index('T.sblock("conv1d_ncw_update'), "issued before the reduction"
    from kokoro_tvm.compiler.pipeline import phases

    assert "EpiloguePrefetch" in [p.info.name for p in dict(phases(target))["schedule"]]  # CPU builds run it
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    (plain, ours), flags = _unscheduled_and_scheduled(graph, inputs)
    assert all(flags.values())
    # float32, a different summation order between the plain and the tiled loops: a few ulps
    np.testing.assert_allclose(ours, plain, rtol=1e-5, atol=1e-5)


def _conv_scheduled(x, w, rows, target):
    """The AVX2-scheduled script of one conv of x by w, keeping its first `rows` channels."""
    from kokoro_tvm.commands.bench_kernels import _fp32_conv_module

    target = tvm.target.Target(target)
    with target:
        legal = tvm.transform.Sequential(relax.backend.cpu_generic.pipeline.legalize_passes(target))(
            _fp32_conv_module(x.shape, w.shape, 3, 1, rows)
        )
        return dlight.ApplyDefaultSchedule(*rules())(legal).script()


def test_avx2_convs_take_6_rows_on_channels_padded_to_whole_tiles():
    """16 registers: 6 rows x 2 vectors (12 FMA chains, enough to cover the FMA latency on two pipes; 4 x 2's 8
    are not) where 6 divides the output channels. AlignConvRows pads a conv's weights with zero rows to the
    next multiple of 6 (128 -> 132) and slices its output back, only on such targets and only for 24 channels
    or more; the kept channels are bit for bit the unpadded conv's (same products, same order)."""
    from kokoro_tvm.compiler.passes import AlignConvRows
    from kokoro_tvm.compiler.pipeline import aligned_conv_rows

    assert aligned_conv_rows(AVX2) == 6
    assert aligned_conv_rows({"kind": "llvm", "mcpu": "znver4"}) is None  # AVX-512: 16 x 1 and 8 x 2 as before
    assert aligned_conv_rows({"kind": "cuda", "arch": "sm_80"}) is None
    rng = np.random.default_rng(11)
    x = rng.standard_normal((1, 40, 64)).astype(np.float32)
    w = (rng.standard_normal((128, 40, 7)) * 0.1).astype(np.float32)
    padded = np.pad(w, ((0, 4), (0, 0), (0, 0)))
    tile = (
        r"T\.unroll\(T\.int64\((\d+)\)\):\s+for \w+ in T\.vectorized\(T\.int64\((\d+)\)\):"
        r"\s+with T\.sblock\(\"conv1d"
    )
    assert re.search(tile, _conv_scheduled(x, padded, 128, AVX2)).groups() == ("6", "16")
    assert re.search(tile, _conv_scheduled(x, w, None, AVX2)).groups() == ("4", "16")
    mod = _module(lambda a, b: relax.op.nn.conv1d(a, b, padding=3), [x, w])
    aligned = AlignConvRows(6)(mod)
    assert "T.int64(132), T.int64(40), T.int64(7)" in aligned.script() or "(132, 40, 7)" in aligned.script()
    small = _module(lambda a, b: relax.op.nn.conv1d(a, b, padding=3), [x, w[:22]])
    tvm.ir.assert_structural_equal(AlignConvRows(6)(small), small)
    ours = compile_and_load(aligned, AVX2)(x, w)[0]
    plain = compile_and_load(mod, AVX2)(x, w)[0]
    assert ours.shape == (1, 128, 64) and np.array_equal(ours, plain)


def _linear_module(rows, depth, width):
    """main(x [rows, depth]; W [width, depth], b [width] as weights) = x @ W.T + b, and x @ x.T (activations
    only), lifted for the target as the builds lift."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((rows, depth), "float32"))
    w = relax.Var("w", relax.TensorType((width, depth), "float32"))
    b = relax.Var("b", relax.TensorType((width,), "float32"))
    with bb.function("main", [x, w, b], attrs={"num_input": 1}):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w, [1, 0])), b))
            gram = bb.emit(relax.op.matmul(x, relax.op.permute_dims(x, [1, 0])))
            out = bb.emit_output(relax.Tuple([y, gram]))
        bb.emit_func_output(out)
    return bb.get()


def test_matmul_weights_are_read_in_column_panels():
    """A matmul by a weight matrix reads it as [N / C, K, C] panels as wide as the register tile (16 columns on
    AVX2, 32 on AVX-512), made once at load: the same products in the same order, so bit for bit the values of
    the row-major build. Activations times activations and one-row style projections keep their layout; equal
    lifted weights (ALBERT's one layer used 12 times) are one tensor."""
    from kokoro_tvm.compiler.passes import PackMatmulWeights
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, lift_weight_transforms, matmul_panel_columns

    assert matmul_panel_columns(AVX2) == 16
    assert matmul_panel_columns({"kind": "llvm", "mcpu": "znver4"}) == 32
    assert matmul_panel_columns({"kind": "cuda", "arch": "sm_80"}) is None
    packed = PackMatmulWeights(16)(_linear_module(40, 96, 64)).script()
    assert packed.count("panel_matmul(") == 1 and "(4, 96, 16)" in packed  # the weight's matmul only
    assert "panel_matmul" not in PackMatmulWeights(16)(_linear_module(1, 96, 64)).script()  # one row: stays
    rng = np.random.default_rng(5)
    x = rng.standard_normal((40, 96)).astype(np.float32)
    w, b = rng.standard_normal((64, 96)).astype(np.float32), rng.standard_normal(64).astype(np.float32)
    outputs = {}
    for name, target in (("panels", AVX2), ("row-major", None)):
        lifted = lift_weight_transforms(_linear_module(40, 96, 64), target=target)
        runner = compile_and_load(lifted, AVX2, params=[w, b], transform_params=TRANSFORM_PARAMS)
        outputs[name] = runner(x)
    assert np.array_equal(outputs["panels"][0], outputs["row-major"][0])
    np.testing.assert_allclose(outputs["panels"][0], x @ w.T + b, rtol=1e-5, atol=1e-5)  # float32 sums of 96


def test_equal_lifted_weights_are_one_tensor():
    """Two uses of one weight's transpose (as ALBERT's 12 layers use its one layer) lift to one tensor."""
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, lift_weight_transforms

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((8, 16), "float32"))
    w = relax.Var("w", relax.TensorType((16, 16), "float32"))
    with bb.function("main", [x, w], attrs={"num_input": 1}):
        with bb.dataflow():
            h = bb.emit(relax.op.matmul(x, relax.op.permute_dims(w, [1, 0])))
            out = bb.emit_output(relax.op.matmul(h, relax.op.permute_dims(w, [1, 0])))
        bb.emit_func_output(out)
    transform = lift_weight_transforms(bb.get())[TRANSFORM_PARAMS]
    assert transform.script().count("R.permute_dims(") == 1
