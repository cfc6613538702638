"""bf16 convolutions (kokoro_tvm.compiler.bf16): the rounding, the kernel's arithmetic and code, which layers the
rewrites touch, and the refusals. Random data, small shapes; the tests that run the kernel need a CPU with
AVX512_BF16, those that read its code build it for a Zen 4 where this CPU lacks it (kernel_asm.code_target)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest
import torch
import tvm
from kernel_asm import code_target, executable_asm, hot_loop
from tvm import relax

from kokoro_tvm.compiler import bf16, packed
from kokoro_tvm.compiler.passes import SnakeSine
from kokoro_tvm.compiler.passes.bf16_convolutions import Bf16Convolutions
from kokoro_tvm.compiler.targets import host_target

needs_bf16 = pytest.mark.skipif(not bf16.host_supports_bf16(), reason="this CPU has no AVX512_BF16")
CODE_TARGET = code_target(bf16.host_supports_bf16())  # where the tests that only read the kernel's code build it
needs_code = pytest.mark.skipif(CODE_TARGET is None, reason="no x86-64 code to read on this machine")


def _bf16_round(a: np.ndarray) -> np.ndarray:
    return a.astype(ml_dtypes.bfloat16).astype(np.float32)


def test_packing_rounds_to_nearest_even_like_ml_dtypes():
    from tvm import te

    values = np.array(
        [0.0, -0.0, 1.0, 1.00390625, 1.01171875, -3.14159, 1e-30, 3.4e38, 65504.0, 1 + 2**-8, 1 + 3 * 2**-9],
        dtype=np.float32,
    )  # 1 + 2^-8 and 1 + 3*2^-9 are ties: they go to the even neighbour
    values = np.concatenate([values, np.random.default_rng(0).standard_normal(1000).astype(np.float32)])
    x = te.placeholder(values.shape, "float32", "x")
    y = te.compute(values.shape, lambda i: bf16.to_bf16_bits(x[i]), name="y")
    back = te.compute(values.shape, lambda i: bf16.to_float(y[i]), name="back")
    func = tvm.tirx.build(te.create_prim_func([x, y, back]), target=host_target())
    bits, floats = tvm.runtime.tensor(np.zeros(values.shape, np.uint16)), tvm.runtime.tensor(np.zeros_like(values))
    func(tvm.runtime.tensor(values), bits, floats)
    np.testing.assert_array_equal(bits.numpy(), values.astype(ml_dtypes.bfloat16).view(np.uint16))
    np.testing.assert_array_equal(floats.numpy(), _bf16_round(values))


def _conv_module(channels: int, out_channels: int, taps: int, dilation: int, steps, epilogue: bool = True):
    """conv1d (+ bias + leaky ReLU) over `steps` (a number, or 32 * k with the tile count k as a last input)."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, steps), "float32"))
    w = relax.Var("w", relax.TensorType((out_channels, channels, taps), "float32"))
    b = relax.Var("b", relax.TensorType((1, out_channels, 1), "float32"))
    symbolic = not isinstance(steps, int)
    tiles = [relax.Var("tiles", relax.ShapeType(list(tvm.tirx.analysis.undefined_vars(steps))))] if symbolic else []
    with bb.function("main", [x, w, b, *tiles]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w, padding=dilation * (taps - 1) // 2, dilation=dilation))
            out = bb.emit_output(relax.op.nn.leakyrelu(relax.op.add(y, b), 0.1) if epilogue else y)
        bb.emit_func_output(out)
    return bb.get()


def _reference(x, w, b, dilation, taps):
    y = torch.nn.functional.conv1d(
        torch.from_numpy(x), torch.from_numpy(w), padding=dilation * (taps - 1) // 2, dilation=dilation
    )
    return torch.nn.functional.leaky_relu(y + torch.from_numpy(b), 0.1).numpy()


def _bf16_conv(target):
    """One bf16 conv (32 -> 48 channels, k5, dilation 2, with a bias + leaky ReLU epilogue), compiled for target."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    return compile_relax(Bf16Convolutions()(_conv_module(32, 48, 5, 2, 96)), target)


@pytest.fixture(scope="module")
def bf16_conv():
    """The bf16 conv built once for this CPU: a runner."""
    vm = relax.VirtualMachine(_bf16_conv(host_target()), tvm.cpu())
    return lambda *arrays: vm["main"](*[tvm.runtime.tensor(a) for a in arrays]).numpy()


@needs_bf16
def test_bf16_conv_is_the_conv_of_the_rounded_operands(bf16_conv):
    run = bf16_conv
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 96)).astype(np.float32)
    w = (rng.standard_normal((48, 32, 5)) * 0.2).astype(np.float32)
    b = rng.standard_normal((1, 48, 1)).astype(np.float32)
    got = run(x, w, b)
    exact = _reference(_bf16_round(x), _bf16_round(w), b, 2, 5)
    full = _reference(x, w, b, 2, 5)
    # products of bf16 values are exact in float32: only the order of the float32 additions differs (160 terms)
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 1e-6
    # and it is really bf16: 8 significant bits leave ~1e-3 against the float32 conv
    assert np.linalg.norm(got - full) / np.linalg.norm(full) > 1e-4


@needs_code
def test_the_kernel_is_vdpbf16ps_with_the_tile_in_registers():
    """The hot loop is vdpbf16ps with nothing stored: passing the operands by address once left the tile in
    memory (a store after every instruction, 78 GFLOP/s where the fp32 kernel runs at 200)."""
    count, stores = hot_loop(executable_asm(_bf16_conv(CODE_TARGET)), "vdpbf16ps")
    assert count >= 8
    assert stores == []


def _symbolic_bf16_conv(tile: int, target):
    """A bf16 conv over tile * k steps (k: the tile count, an input), compiled for target."""
    from kokoro_tvm.compiler.pipeline import compile_relax

    k = tvm.tirx.Var("k", "int64")
    return compile_relax(Bf16Convolutions()(_conv_module(16, 16, 3, 1, k * tile)), target)


@needs_code
@pytest.mark.parametrize("tile", [32, 8])  # 8k steps: 8 columns, the ymm form of the step (odd k included)
def test_a_symbolic_length_bf16_conv_steps_in_vectors_of_its_tile(tile):
    register = "ymm" if tile % bf16.LANES else "zmm"
    assert re.search(rf"vdpbf16ps\s.*%{register}", executable_asm(_symbolic_bf16_conv(tile, CODE_TARGET)))


@needs_bf16
@pytest.mark.parametrize("tile", [32, 8])
def test_a_symbolic_length_bf16_conv_runs_every_tile_count(tile):
    vm = relax.VirtualMachine(_symbolic_bf16_conv(tile, host_target()), tvm.cpu())
    rng = np.random.default_rng(2)
    w = rng.standard_normal((16, 16, 3)).astype(np.float32)
    b = np.zeros((1, 16, 1), np.float32)
    for tiles in (1, 3):
        x = rng.standard_normal((1, 16, tile * tiles)).astype(np.float32)
        got = vm["main"](*[tvm.runtime.tensor(a) for a in (x, w, b)], tvm.runtime.ShapeTuple([tiles])).numpy()
        exact = _reference(_bf16_round(x), _bf16_round(w), b, 1, 3)
        assert got.shape == exact.shape
        assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 1e-6


def _snake_conv_module(channels: int, steps: int, taps: int, dilation: int):
    """A per-channel affine, Snake (y + sin(a y)^2 / a) and a conv: the shape of every generator resblock step,
    whose elementwise work fuses into the bf16 packing of the conv's input."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels, steps), "float32"))
    g = relax.Var("g", relax.TensorType((1, channels, 1), "float32"))
    a = relax.Var("a", relax.TensorType((1, channels, 1), "float32"))
    w = relax.Var("w", relax.TensorType((channels, channels, taps), "float32"))
    with bb.function("main", [x, g, a, w]):
        with bb.dataflow():
            y = bb.emit(relax.op.add(relax.op.multiply(x, g), g))
            sine = bb.emit(relax.op.sin(relax.op.multiply(a, y)))
            z = bb.emit(relax.op.add(y, relax.op.divide(relax.op.multiply(sine, sine), a)))
            pad = dilation * (taps - 1) // 2
            out = bb.emit_output(relax.op.nn.conv1d(z, w, padding=pad, dilation=dilation))
        bb.emit_func_output(out)
    return bb.get()


def _root_loops(func) -> list:
    body = func.body.block.body
    return [s for s in (body.seq if isinstance(body, tvm.tirx.SeqStmt) else [body]) if isinstance(s, tvm.tirx.For)]


def test_the_packing_pass_is_vector_tiles_with_its_producers_per_tile():
    """k7 dilation 3 pads a row by 18 steps: rows of t + 18 words ran scalar, and the Snake before the packing
    ran as eight passes over the whole tensor (the packing reads it two channels at a time, shifted). Now the
    row is whole vectors of words and the Snake is computed per vector tile of its last value: two loop nests
    (0.53 s -> 0.10 s of the bf16 decoder at 472 frames)."""
    from kokoro_tvm.compiler.pipeline import lower

    mod = Bf16Convolutions()(_snake_conv_module(32, 480, 7, 3))
    lowered = lower(mod, host_target())
    (pack,) = [f for g, f in lowered.functions_items() if "bf16_pack_x" in g.name_hint]
    loops = _root_loops(pack)
    assert len(loops) == 2  # the Snake's last value per tile (its producers inside), then the packing
    for loop in loops:
        assert loop.kind == tvm.tirx.ForKind.PARALLEL and "T.vectorized" in str(loop)


@needs_bf16
def test_the_fused_snake_and_packing_compute_the_snake():
    from kokoro_tvm.compiler.pipeline import compile_relax

    executable = compile_relax(Bf16Convolutions()(_snake_conv_module(32, 480, 7, 3)), host_target())
    vm = relax.VirtualMachine(executable, tvm.cpu())
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 32, 480)).astype(np.float32)
    g = rng.standard_normal((1, 32, 1)).astype(np.float32)
    a = (rng.random((1, 32, 1)) + 0.5).astype(np.float32)
    w = (rng.standard_normal((32, 32, 7)) * 0.1).astype(np.float32)
    got = vm["main"](*[tvm.runtime.tensor(v) for v in (x, g, a, w)]).numpy()
    y = torch.from_numpy(x * g + g)
    snake = (y + torch.sin(torch.from_numpy(a) * y) ** 2 / torch.from_numpy(a)).numpy()
    exact = torch.nn.functional.conv1d(
        torch.from_numpy(_bf16_round(snake)), torch.from_numpy(_bf16_round(w)), padding=9, dilation=3
    ).numpy()
    # float32 sines may differ from torch's in the last bit, which moves an operand's bf16 rounding now and then
    # (one bf16 step, 2^-8 relative, in a handful of the 15,360 inputs): far below the 4e-3 of a wrong tile
    assert np.linalg.norm(got - exact) / np.linalg.norm(exact) < 1e-4


def test_only_selected_even_channel_convs_are_rewritten():
    def rewritten(mod, select):
        out = Bf16Convolutions(select)(mod)
        return sum(1 for gv in out.functions if gv.name_hint.startswith("bf16_conv1d"))

    assert rewritten(_conv_module(32, 48, 5, 2, 96), lambda names: True) == 1
    assert rewritten(_conv_module(32, 48, 5, 2, 96), lambda names: False) == 0
    assert rewritten(_conv_module(1, 48, 3, 1, 96), lambda names: True) == 0  # one input channel: no pairs
    select = bf16.selected_by_name(("decoder.generator.",))
    assert select({"p_decoder_generator_resblocks_0_convs1_0_weight", "x"})
    assert not select({"p_predictor_F0_0_conv1_weight"})


def test_snake_sine_goes_float32_and_sinegen_sine_stays():
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 4, 8), "float32"))
    alpha = relax.Var("p_decoder_generator_resblocks_0_alpha1_0", relax.TensorType((1, 4, 1), "float32"))
    phase = relax.Var("phase", relax.TensorType((1, 4, 8), "float32"))
    with bb.function("main", [x, alpha, phase]):
        with bb.dataflow():
            snake = bb.emit(relax.op.sin(relax.op.multiply(alpha, x)))
            harmonic = bb.emit(relax.op.sin(phase))
            out = bb.emit_output(relax.op.add(snake, harmonic))
        bb.emit_func_output(out)
    text = SnakeSine(("decoder.generator.",), bf16.SNAKE_SINE_TERMS)(bb.get()).script()
    assert text.count("R.sin(") == 1  # SineGen's: untouched
    assert "float64" not in text  # Snake's: a float32 polynomial


def test_a_target_without_avx512_bf16_is_refused_in_one_line():
    with pytest.raises(bf16.Bf16Unsupported, match="AVX512_BF16") as caught:
        bf16.require_bf16({"kind": "llvm", "mcpu": "haswell"})
    assert "\n" not in str(caught.value)
    from kokoro_tvm.compiled import check_precision

    with pytest.raises(bf16.Bf16Unsupported, match="CPU"):
        check_precision("bf16", device="cuda")


def test_bf16_build_specs_keep_float32_keys_and_share_unreduced_components():
    from kokoro_tvm.compiler.build import BuildSpec, key_fields
    from kokoro_tvm.compiler.precompile import bucket_specs
    from kokoro_tvm.components import build_precision
    from kokoro_tvm.runtime.buckets import parse_buckets

    target = {"kind": "llvm", "mcpu": "znver4"}
    full = key_fields(BuildSpec.dynamic("decoder"), "w", target)
    reduced = key_fields(BuildSpec.dynamic("decoder", precision="bf16"), "w", target)
    assert "precision" not in full and reduced["precision"] == "bf16" and full != reduced
    assert build_precision("albert", "bf16") == "full"  # nothing to reduce: the float32 artifact
    specs = bucket_specs(parse_buckets("default"), precision="bf16")
    assert {s.component: s.precision for s in specs} == {
        "albert": "full",
        "duration": "full",
        "f0n": "full",
        "text_encoder": "bf16",
        "decoder": "bf16",
    }
    with pytest.raises(ValueError, match="float32"):
        BuildSpec("decoder", 64, "float64", precision="bf16")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["say", "Hello.", "--backend", "tvm", "--precision", "bf16"], "does not report"),
        (["say", "Hello.", "--backend", "torch", "--precision", "bf16"], "tvm backend only"),
        (["compile", "--precision", "bf16"], "does not report"),
        (["bench", "--precision", "bf16,fp16"], "fp32, bf16, int8"),
        (["bench", "--peers", "torch,tensorflow"], "peers are distinct names"),
    ],
)
def test_precision_and_peer_errors_are_one_line_before_any_work(args, expected, capsys, tmp_path, monkeypatch):
    """A CPU whose flags lack avx512_bf16 (simulated) is refused before weights load or anything builds."""
    from kokoro_tvm.cli import main

    monkeypatch.setattr(packed, "cpu_flag", lambda flag: False if flag == "avx512_bf16" else None)
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path / "cache"))
    if args[0] == "say":
        args = [*args, "-o", str(tmp_path / "x.wav")]
    if expected == "does not report" and not bf16.target_has_bf16(host_target()):
        expected = "has none"  # this CPU's LLVM model lacks it too (Zen 2, ...): the target's refusal comes first
    assert main(["-q", *args]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kokoro-tvm: error:") and expected in err and "\n" not in err, err
    assert not (tmp_path / "cache" / "artifacts").exists()


def test_peer_lists():
    from kokoro_tvm.compiled import runs_here
    from kokoro_tvm.peers.catalog import PEERS, PeerError, parse_peers

    assert parse_peers(None) == parse_peers("all")
    left_out = set(PEERS) - set(parse_peers("all"))
    assert left_out == (set() if runs_here("bf16") else {"openvino_bf16", "torch_bf16"})  # f32 under a bf16 name
    assert parse_peers("none") == ()
    assert parse_peers(" ort_int8, torch ") == ("ort_int8", "torch")
    for bad in ("torch,torch", "", "tensorflow"):
        with pytest.raises(PeerError):
            parse_peers(bad)


def test_the_torch_bf16_peer_speaks_in_bf16_and_hands_back_float32():
    """`bench`'s `torch_bf16` peer is KModel's own forward under CPU autocast: float32 audio of the fp32 forward's
    length, not the same samples (its convolutions ran in bf16), and a refusal by name where the CPU lacks bf16."""
    from kokoro_tvm.compiled import runs_here
    from kokoro_tvm.errors import KokoroTVMError
    from kokoro_tvm.peers.catalog import TorchBf16, TorchEager, make_peer
    from kokoro_tvm.weights.resolve import kmodel_skeleton

    torch.manual_seed(0)
    model = kmodel_skeleton().eval()  # untrained weights: the arithmetic, not the voice, is under test
    ids, style = [0, 50, 83, 54, 156, 0], np.random.default_rng(0).standard_normal(256).astype(np.float32)
    fp32, reduced = TorchEager(model).speak(ids, style), TorchBf16(model).speak(ids, style)
    assert reduced.dtype == torch.float32 and reduced.shape == fp32.shape and torch.isfinite(reduced).all()
    assert not torch.equal(reduced, fp32)
    if not runs_here("bf16"):
        with pytest.raises(KokoroTVMError, match="AVX512_BF16"):
            make_peer("torch_bf16", model, "w", threads=1)


@pytest.mark.parametrize(
    ("cpu", "flags", "mattr"),
    [
        ("rocketlake", {"avx512_bf16", "avx512_vnni"}, ["+avx512bf16"]),  # a guest LLVM names by its model number
        ("sapphirerapids", {"avx512_bf16", "avx512_vnni"}, None),  # the model has both: the bare model
        ("rocketlake", {"avx512_vnni"}, None),  # the CPU lacks bf16: nothing is added
        ("znver4", set(), None),
    ],
)
def test_host_target_adds_kernel_features_the_cpu_model_lacks(cpu, flags, mattr, monkeypatch):
    from tvm.target import codegen

    from kokoro_tvm.compiler import targets

    monkeypatch.setattr(codegen, "llvm_get_system_cpu", lambda: cpu)
    monkeypatch.setattr(targets, "cpu_flags", lambda: frozenset(flags))
    target = targets.host_target()
    assert target["mcpu"] == cpu and target.get("mattr") == mattr
    assert bf16.target_has_bf16(target) == ("avx512_bf16" in flags or cpu in ("sapphirerapids", "znver4"))
