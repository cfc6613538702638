"""Symbolic-length builds (kokoro_tvm.compiler.symbolic): the export rewrites keep PyTorch's values, the CPU
schedule rules tile a `16 * k` extent, and one float64 build runs several lengths like PyTorch, with garbage
in the padded tail invisible. Random weights, float64; each symbolic artifact is built once per module."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from kokoro_tvm.compiler.export import linear_resample
from kokoro_tvm.compiler.ops.masked_norm import nearest_repeat
from kokoro_tvm.compiler.symbolic import LENGTH_TILE, SymbolicShape, tile_count


@pytest.mark.parametrize("length", [2, 128, 2048])
def test_linear_resample_is_torch_interpolate(length):
    """SineGen's x300 and /300 linear interpolations rewritten as a gather: torch's own arithmetic, in float32
    bit for bit (the source position and the fused final mix rounded as its CPU kernel rounds them)."""
    g = torch.Generator().manual_seed(length)
    for dtype in (torch.float64, torch.float32):
        x = torch.randn(1, 9, length, generator=g, dtype=dtype).cumsum(-1) * 300  # a phase-like ramp
        up = F.interpolate(x, scale_factor=300, mode="linear")
        if dtype == torch.float32:
            assert torch.equal(linear_resample(x, 300 * length, 300), up)
        else:  # float64 keeps the plain expression, torch's kernel may fuse it: ulps of the output's magnitude
            assert (linear_resample(x, 300 * length, 300) - up).abs().max() <= 1e-14 * up.abs().max()
        y = torch.randn(1, 9, 300 * length, generator=g, dtype=dtype)
        down = F.interpolate(y, scale_factor=1 / 300, mode="linear")
        assert torch.equal(linear_resample(y, length, 1 / 300), down)  # weights exactly 1/2: exact


def test_the_compiled_phase_upsampling_is_torchs_bit_for_bit():
    """SineGen's phase reaches 1e6 rad after the x300 upsampling, where a float32 ulp is 0.06-0.125 rad: the
    compiled resample (converter table, our CPU pipeline) gives F.interpolate's float32 values exactly, where
    the plain expression (as the export wrote it before, and as LLVM contracts it) differs on a fifth of them."""
    import tvm
    from tvm import relax

    from kokoro_tvm.compiler.converters import to_relax
    from kokoro_tvm.compiler.pipeline import relax_pipeline
    from kokoro_tvm.compiler.targets import host_target

    class PhaseUpsample(torch.nn.Module):
        def forward(self, phase):
            return linear_resample(phase * 300, phase.shape[-1] * 300, 300)

    rng = np.random.default_rng(0)  # SineGen's 9 harmonics of a 120-360 Hz voice, 713 frames (2 steps each)
    increments = rng.uniform(0.005, 0.015, (1, 9, 1426)) * np.arange(1, 10)[None, :, None]
    phase = torch.from_numpy((np.cumsum(increments, axis=-1) * 2 * np.pi).astype(np.float32))
    target = tvm.target.Target(host_target())
    mod = to_relax(torch.export.export(PhaseUpsample(), (phase,)), keep_params_as_input=False)
    vm = relax.VirtualMachine(tvm.compile(mod, target=target, relax_pipeline=relax_pipeline(target)), tvm.cpu())
    out = vm["main"](tvm.runtime.tensor(phase.numpy()))
    got = (out[0] if isinstance(out, tvm.ir.Array) else out).numpy()
    expected = F.interpolate(phase * 300, scale_factor=300, mode="linear").numpy()
    np.testing.assert_array_equal(got, expected)
    # the plain mix rounds differently: the test would fail on the export as it was
    position = np.maximum((np.arange(expected.shape[-1]) + 0.5) * np.float64(np.float32(1 / 300)) - 0.5, 0)
    position = position.astype(np.float32)
    left = np.floor(position).astype(np.int64)
    weight = position - left.astype(np.float32)
    source = np.concatenate([phase.numpy() * 300, phase.numpy()[..., -1:] * 300], axis=-1)
    plain = source[..., left] * (np.float32(1) - weight) + source[..., left + 1] * weight
    assert np.mean(plain != expected) > 0.05


def test_nearest_rewrites_are_exact():
    x = torch.randn(2, 3, 50, dtype=torch.float64)
    assert torch.equal(nearest_repeat(x, 300), F.interpolate(x, scale_factor=300, mode="nearest"))
    assert torch.equal(nearest_repeat(x, 2), F.interpolate(x, scale_factor=2, mode="nearest"))


def test_alignment_pad_is_one_number_for_every_tile_count():
    """A conv output of 16k + c steps is padded to whole column tiles by the same number of steps for every k:
    to a multiple of 16 (to 32 it would depend on k's parity); 8k + c to a multiple of 8; 320k + c (a generator
    stage) reaches 32."""
    import tvm

    from kokoro_tvm.compiler.passes.base import alignment_pad

    k = tvm.tirx.Var("k", "int64")
    assert [alignment_pad(16 * k + c) for c in (0, 4, 15)] == [0, 12, 1]
    assert alignment_pad(8 * k + 3) == 5 and alignment_pad(320 * k + 1) == 31 and alignment_pad(100) == 28


def test_tile_count():
    tile = LENGTH_TILE
    assert [tile_count(n) for n in (1, tile, tile + 1, 512)] == [1, 1, 2, 512 // tile]
    with pytest.raises(ValueError):
        tile_count(0)


def _assert_accumulators_stay_in_registers(mod):
    """x86: the multiply-add loop of the compiled conv stores nothing. With the VM's shape function compiled
    beside it and not marked noalias, LLVM lost the kernels' alias information and wrote the accumulators to
    memory after every multiply-add (half the speed)."""
    from kokoro_tvm.compiler.pipeline import compile_relax
    from kokoro_tvm.compiler.targets import host_target

    executable = compile_relax(mod, host_target())
    asm = "\n".join(m.inspect_source("asm") for m in executable.mod.imports)
    blocks = re.split(r"\n(?=\.LBB)", asm)
    hot = max(blocks, key=lambda block: block.count("vfmadd"))
    if "vfmadd" not in hot:
        pytest.skip("no x86 FMA instructions in this target's code")
    loop = re.split(r"\n\s*j\w+\s", hot)[0]  # the loop body: up to its branch back
    stores = [line for line in loop.splitlines() if re.match(r"\s*vmov\w*\s+%[xyz]mm\d+, [^%]", line)]
    assert not stores, stores[:3]


@pytest.mark.parametrize(
    "tile, taps, padding",
    [
        (32, 5, (2, 34)),  # 32k + 32 output steps: a padded generator stage has that form
        (8, 3, (1, 1)),  # 8k steps, odd k included: a frame-rate conv, which 16-lane vectors do not divide
    ],
)
def test_conv_rule_tiles_a_symbolic_length(tile, taps, padding):
    """Contraction takes a conv over a symbolic length (proved divisible for every k) and it runs right. Over 8k
    steps it takes 8-column tiles (ymm registers on AVX-512) instead of leaving the kernel to the default
    schedule, a plain loop (the decoder took 4.4 s at 168 frames that way, 1.1 s tiled)."""
    from tvm import relax, tirx

    from kokoro_tvm.compiled import compile_and_load

    k = tirx.Var("k", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType([1, 64, tile * k], "float32"))
    tiles = relax.Var("tiles", relax.ShapeType([k]))
    w = relax.Var("w", relax.TensorType([64, 64, taps], "float32"))
    with bb.function("main", [x, tiles, w]):
        with bb.dataflow():
            y = bb.emit_output(bb.emit(relax.op.nn.conv1d(x, w, padding=padding)))
        bb.emit_func_output(y)
    coverage: dict = {}
    from kokoro_tvm.compiler.pipeline import lower
    from kokoro_tvm.compiler.targets import host_target

    lowered = lower(bb.get(), host_target(), coverage)
    conv = next(f for gv, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc) and "conv" in gv.name_hint)
    script = conv.script()
    assert "T.parallel" in script and "T.vectorized" in script
    # the register tile's accumulator, compacted by our pipeline (CompactSymbolicBuffers), has a fixed size:
    # TVM's own compaction sized it min(<length in k>, <tile>), a variable-size buffer LLVM cannot keep in
    # registers (the generator's last stage ran at a third of its static speed)
    (accumulator,) = [line for line in script.splitlines() if 'scope="local"' in line]
    sizes = re.search(r"alloc_buffer\(\((.*?)\), scope", accumulator).group(1)
    assert re.fullmatch(r"(T\.int64\(\d+\)(, )?)+", sizes), accumulator
    # every PrimFunc is marked noalias, the VM's shape function included (RestrictShapeFunctions)
    funcs = [f for _, f in lowered.functions_items() if isinstance(f, tirx.PrimFunc)]
    assert any(gv.name_hint == "shape_func" for gv, _ in lowered.functions_items())
    assert all(f.attrs and f.attrs.get("tirx.noalias") for f in funcs)
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((64, 64, taps)).astype(np.float32)
    _assert_accumulators_stay_in_registers(bb.get())
    runner = compile_and_load(bb.get())
    for steps in (tile, 3 * tile):
        data = rng.standard_normal((1, 64, steps)).astype(np.float32)
        got = runner.vm["main"](*runner.device_inputs(data), runner.shape(steps // tile), *runner.device_inputs(weight))
        want = F.conv1d(F.pad(torch.from_numpy(data).double(), padding), torch.from_numpy(weight).double()).numpy()
        # float32 sums of 64 x taps products in another order than float64: relative error of a few 1e-7
        assert np.linalg.norm(got.numpy() - want) / np.linalg.norm(want) < 1e-6


@pytest.fixture(scope="module")
def symbolic_runners(random_model64):
    """One float64 symbolic build per component tested here (export, import, compile once)."""
    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.build import symbolic_relax_module
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS

    runners = {}
    for name, max_tiles in (("text_encoder", 4), ("f0n", 3)):
        mod, exported, _ = symbolic_relax_module(random_model64, SymbolicShape(name, max_tiles))
        named = dict(exported.named_parameters())
        params = [named[p].detach().numpy() for p in exported.graph_signature.parameters]
        runners[name] = (mod, compile_and_load(mod, params=params, transform_params=TRANSFORM_PARAMS))
    return runners


def _inputs(name: str, steps: int, valid: int, garbage: bool):
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs
    from kokoro_tvm.components import component

    xs = list(example_inputs(ComponentShape(name, steps), torch.float64))
    g = torch.Generator().manual_seed(steps)
    for i, spec in enumerate(component(name).inputs):
        if spec.values == "lengths":
            xs[i] = torch.full_like(xs[i], valid)
        elif garbage and spec.length_axis is not None:  # junk past the valid prefix
            tail = xs[i].narrow(spec.length_axis, valid * spec.length_multiple, (steps - valid) * spec.length_multiple)
            tail.copy_(
                torch.randint(0, 178, tail.shape, generator=g)
                if spec.values == "ids"
                else torch.randn(tail.shape, generator=g, dtype=tail.dtype) * 1e3
            )
    return xs


@pytest.mark.parametrize("name", ["text_encoder", "f0n"])
def test_one_symbolic_build_runs_every_length(name, symbolic_runners, random_model64):
    """float64: the symbolic build equals PyTorch at 1, 2 and 3 tiles, and at a length that is not a whole
    tile (padded to one by the caller) the valid prefix is bit-identical whatever the padded tail holds."""
    from kokoro_tvm.compiler.export import component_module
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    mod, runner = symbolic_runners[name]
    bounds = mod["main"].attrs["tir_var_upper_bound"]
    assert [int(v) for v in bounds.values()] == [3 if name == "f0n" else 4]  # planned memory has a bound
    module = component_module(random_model64, name)
    for steps in (LENGTH_TILE, 2 * LENGTH_TILE, 3 * LENGTH_TILE):
        xs = _inputs(name, steps, steps, garbage=False)
        with torch.no_grad(), export_patches(random_model64), default_dtype(torch.float64):  # kokoro's rsqrt(2)
            want = module(*xs)
        want = want if isinstance(want, tuple) else (want,)
        got = runner(*(x.numpy() for x in xs), runner.shape(tile_count(steps)))
        for g, w in zip(got, want, strict=True):
            # float64 throughout, sums in another order: relative error near 1e-15; 1e-12 leaves room
            assert np.linalg.norm(g - w.numpy()) / np.linalg.norm(w.numpy()) < 1e-12
    valid, steps = LENGTH_TILE + 7, 2 * LENGTH_TILE  # a partial second tile, padded to a whole one
    clean = runner(*(x.numpy() for x in _inputs(name, steps, valid, garbage=False)), runner.shape(2))
    dirty = runner(*(x.numpy() for x in _inputs(name, steps, valid, garbage=True)), runner.shape(2))
    scale = 2 if name == "f0n" else 1  # F0 and N come out at twice the frame rate
    for c, d in zip(clean, dirty, strict=True):
        assert np.array_equal(c[..., : valid * scale], d[..., : valid * scale])


@pytest.mark.slow
def test_symbolic_decoder_float64(random_model64):
    """The decoder, one float64 symbolic build (about 4 minutes: export, an 85 s import, compile), equals
    PyTorch at 1, 2 and 3 tiles of frames (600F audio samples each)."""
    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.build import symbolic_relax_module
    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    mod, exported, _ = symbolic_relax_module(random_model64, SymbolicShape("decoder", 3))
    named = dict(exported.named_parameters())
    params = [named[p].detach().numpy() for p in exported.graph_signature.parameters]
    runner = compile_and_load(mod, params=params, transform_params=TRANSFORM_PARAMS)
    module = component_module(random_model64, "decoder")
    for steps in (LENGTH_TILE, 2 * LENGTH_TILE, 3 * LENGTH_TILE):
        xs = example_inputs(ComponentShape("decoder", steps), torch.float64)
        with torch.no_grad(), export_patches(random_model64), default_dtype(torch.float64):
            want = module(*xs).numpy()
        (got,) = runner(*(x.numpy() for x in xs), runner.shape(tile_count(steps)))
        # measured 2e-12 to 4e-12 at 1-3 tiles of 8, 3e-11 at 96 frames (the SineGen phase, thousands of
        # radians, amplifies last-bit differences);
        # a real error (a wrong tap, a misplaced tail) is >= 1e-3
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-9
