"""The frequency-domain conv (kokoro_tvm.compiler.passes.FrequencyDomainConvs) against a float64 conv: static
and symbolic lengths, the tiles it chooses, the builds that take it, its weight work lifted. Unit tier: 64
channels, a few hundred steps."""

import numpy as np
import pytest
import torch
import tvm
from tvm import relax

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.compiler.passes import FrequencyDomainConvs
from kokoro_tvm.compiler.passes.frequency_conv import dft_matrices, tiling
from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, frequency_domain_convs, lift_weight_transforms
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.compiler.tuning.frequency import conv_module

# float32 against float64: the DFT sums (64 or 128 terms) and the product's 2C-term sums each round to float32;
# the direct kernel's error on these shapes is 5e-7 to 1e-6 of the output's norm, the frequency one's 3.5e-7 to
# 5e-7 (`python -m kokoro_tvm.studies.frequency_convs`). 4e-6 leaves room for other shapes, far below a wrong tap
# or a lost tile (order 1).
REL_L2 = 4e-6
CHANNELS = 64


def _conv_module(length, taps: int, dilation: int, dtype: str = "float32"):
    return conv_module(CHANNELS, length, taps, dilation, dtype)


def _inputs(steps: int, taps: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, CHANNELS, steps)).astype("float32")
    return x, (rng.standard_normal((CHANNELS, CHANNELS, taps)) / np.sqrt(CHANNELS * taps)).astype("float32")


def _rel_l2(got, x, w, dilation: int) -> float:
    padding = dilation * (w.shape[2] - 1) // 2
    want = torch.nn.functional.conv1d(
        torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=padding, dilation=dilation
    ).numpy()
    assert got.shape == want.shape
    return float(np.linalg.norm(got - want) / np.linalg.norm(want))


def _lifted(mod, **options):
    """Lifted for this CPU, the frequency-domain conv forced on (an AVX-512 host would not take it)."""
    return lift_weight_transforms(mod, target=host_target(), **{"frequency_convs": True, **options})


def test_the_rule_takes_long_kernels_only():
    assert tiling(11, 1, 128) == (64, 48) and tiling(7, 1, 128) == (64, 48)
    assert tiling(11, 3, 128) == (128, 96)
    assert tiling(3, 1, 128) is None and tiling(7, 3, 128) is None and tiling(11, 5, 128) is None
    # wider convs: only the 11-tap undilated ones pay for their spectra
    assert tiling(11, 1, 256) == (64, 48) and tiling(7, 1, 256) is None and tiling(11, 3, 256) is None


@pytest.mark.parametrize("taps, dilation", [(11, 1), (7, 1), (11, 3)])
def test_a_static_conv_matches_float64(taps, dilation):
    steps = 301  # neither a whole number of tiles (48, 96) nor of column tiles (16)
    x, w = _inputs(steps, taps)
    lifted = _lifted(_conv_module(steps, taps, dilation))
    assert "spectral_product" in lifted.script()  # taken (the direct build is the control below)
    got = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)(x)[0]
    assert _rel_l2(got, x, w, dilation) <= REL_L2


def test_one_symbolic_build_serves_every_length():
    """A symbolic length: lengths shorter than one tile, not a multiple of anything, and many tiles long."""
    lifted = _lifted(_conv_module(tvm.tirx.Var("n", "int64"), 11, 1))
    assert "spectral_product" in lifted.script()
    w = _inputs(1, 11)[1]
    runner = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)
    for seed, steps in enumerate((5, 47, 49, 770)):
        x = _inputs(steps, 11, seed=seed + 1)[0]
        assert _rel_l2(runner(x)[0], x, w, 1) <= REL_L2, steps


@pytest.mark.parametrize("spectra", ["whole", "half"])
def test_a_batch_is_its_rows_alone(spectra):
    """A static batch of 3 at a symbolic length, through this CPU's pipeline (whole spectra at 64 channels) and
    with half spectra forced: the utterances' tiles side by side on one tile axis (frequency_conv._frames), each
    row the float64 conv of that row alone, and a zero row between random ones stays zero (no tile leaks into a
    neighbour's)."""
    batched = conv_module(CHANNELS, tvm.tirx.Var("n", "int64"), 11, 1, batch=3)
    if spectra == "whole":
        lifted = _lifted(batched)
    else:
        lifted = relax.transform.LiftTransformParams()(FrequencyDomainConvs(halved_above=0)(batched))
    assert "spectral_product" in lifted.script()
    w = _inputs(1, 11)[1]
    runner = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)
    for seed, steps in enumerate((301, 40)):
        rows = [_inputs(steps, 11, seed=seed + 1)[0], np.zeros((1, CHANNELS, steps), "float32")]
        x = np.concatenate([*rows, _inputs(steps, 11, seed=seed + 7)[0]])
        got = runner(x)[0]
        assert got.shape == x.shape and not np.any(got[1]), steps
        for row in (0, 2):
            assert _rel_l2(got[row : row + 1], x[row : row + 1], w, 1) <= REL_L2, (steps, row)


def test_the_weight_work_is_lifted_and_the_rows_padded():
    """main keeps the DFTs and the product; the kernel's spectrum (its matmuls by the tap phases and the
    [[Gr, -Gi], [Gi, Gr]] blocks) is made once, at load. With 6-row register tiles (AVX2) the product's rows are
    padded from 2 x 64 to 2 x 66."""
    lifted = FrequencyDomainConvs(rows=6)(_conv_module(200, 11, 1))
    lifted = relax.transform.LiftTransformParams()(lifted)
    main, transform = lifted["main"].script(), lifted[TRANSFORM_PARAMS].script()
    assert "R.concat" not in main and "R.concat" in transform
    assert "(33, 132, 128)" in transform  # 33 bins, 2 x 66 rows, 2 x 64 channels
    x, w = _inputs(200, 11)
    got = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)(x)[0]
    assert _rel_l2(got, x, w, 1) <= REL_L2


@pytest.mark.parametrize("rows", [None, 6])
def test_half_spectra_give_the_same_conv(rows):
    """The 256-channel convs' form (frequency_conv.HALF_SPECTRA_ABOVE), forced on 64 channels: [Gr, -Gi] per bin,
    half the [[Gr, -Gi], [Gi, Gr]] block, and three forward rows a bin; with 6-row register tiles (AVX2) each
    half's rows are padded from 64 to 66, and the forward DFT's from 99 to 102. At a length of several tiles and
    at one shorter than a tile."""
    lifted = FrequencyDomainConvs(rows=rows, halved_above=0)(_conv_module(tvm.tirx.Var("n", "int64"), 11, 1))
    lifted = relax.transform.LiftTransformParams()(lifted)
    transform = lifted[TRANSFORM_PARAMS].script()
    assert f"(33, {66 if rows else 64}, 128)" in transform and "(33, 132, 128)" not in transform
    # the forward DFT: Re, Im, -Re of 33 bins, 99 rows; on AVX2 padded to 102, whole 6-row tiles
    assert f"R.Tensor((64, {102 if rows else 99}, " in lifted["main"].script()
    w = _inputs(1, 11)[1]
    runner = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)
    for seed, steps in enumerate((301, 40)):
        x = _inputs(steps, 11, seed=seed + 1)[0]
        assert _rel_l2(runner(x)[0], x, w, 1) <= REL_L2, steps


def test_the_work_before_the_conv_stays_out_of_the_frames():
    """A Snake before the conv is computed once per sample in its own kernel; the frames only gather (fused into
    the frames it ran 4/3 times per sample). Values as the conv of the Snake, in float64."""
    from kokoro_tvm.compiler.pipeline import lower

    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, CHANNELS, 200), "float32"))
    w = relax.Var("w", relax.TensorType((CHANNELS, CHANNELS, 11), "float32"))
    with builder.function("main", [x, w], attrs={"num_input": 1}):
        with builder.dataflow():
            wave = builder.emit(relax.op.sin(x))
            snake = builder.emit(relax.op.add(x, relax.op.multiply(wave, wave)))
            out = builder.emit_output(relax.op.nn.conv1d(snake, w, padding=5))
        builder.emit_func_output(out)
    lifted = _lifted(builder.get())
    names = [
        gv.name_hint for gv, f in lower(lifted, host_target()).functions_items() if isinstance(f, tvm.tirx.PrimFunc)
    ]
    assert any(n.startswith("frames") for n in names) and not any("frames" in n and "fused" in n for n in names)
    xs, ws = _inputs(200, 11)
    got = compile_and_load(lifted, params=[ws], transform_params=TRANSFORM_PARAMS)(xs)[0]
    assert _rel_l2(got, xs + np.sin(xs.astype(np.float64)) ** 2, ws, 1) <= REL_L2


AVX2 = {"kind": "llvm", "mtriple": "x86_64-pc-linux-gnu", "mcpu": "haswell"}


def test_without_a_measured_record_full_precision_x86_builds_take_it():
    """The heuristic, where it was measured: AVX2 (the Zen 2) and AVX-512 (the Zen 4, whose tuner chose the
    heuristic's shapes). NEON and GPUs keep the direct conv, bf16 / int8 builds their packed one."""
    assert frequency_domain_convs(AVX2, "full") and frequency_domain_convs({"kind": "llvm", "mcpu": "znver4"}, "full")
    assert not frequency_domain_convs(AVX2, "bf16") and not frequency_domain_convs(AVX2, "int8")
    neon = {"kind": "llvm", "mtriple": "aarch64-linux-gnu", "mcpu": "neoverse-n1"}
    assert not frequency_domain_convs(neon, "full")
    assert not frequency_domain_convs({"kind": "cuda", "arch": "sm_80"}, "full")
    direct = _lifted(_conv_module(200, 11, 1), frequency_convs=False).script()
    assert "spectral_product" not in direct
    float64 = FrequencyDomainConvs()(_conv_module(200, 11, 1, dtype="float64")).script()
    assert "spectral_product" not in float64  # the parity builds keep the direct conv
    short = FrequencyDomainConvs()(_conv_module(200, 3, 1)).script()
    assert "spectral_product" not in short


def test_the_dft_matrices_are_numpys_rfft():
    """D times a signal is numpy's rfft (re / im interleaved); E takes a spectrum back to the first m samples."""
    forward, inverse = dft_matrices(64, 48)
    signal = np.random.default_rng(3).standard_normal(64)
    spectrum = np.fft.rfft(signal)
    assert np.allclose(forward @ signal, np.stack([spectrum.real, spectrum.imag], axis=1).reshape(-1), atol=1e-12)
    assert np.allclose(inverse.T @ (forward @ signal), signal[:48], atol=1e-12)


def test_a_records_measured_decisions_replace_the_heuristic():
    """A record that timed the convs decides shape by shape, on any CPU: the 11-tap conv the AVX2 heuristic takes
    stays direct where the record measured direct faster, the 7-tap one goes to the frequency domain where it
    measured that faster, and a shape the record did not time stays direct."""
    from kokoro_tvm.compiler.tuning.record import TuningRecord, using
    from kokoro_tvm.machine import cpu_identity

    def taken(taps: int, dilation: int) -> bool:
        return "spectral_product" in FrequencyDomainConvs()(_conv_module(200, taps, dilation)).script()

    assert taken(11, 1) and not taken(7, 3)  # the heuristic
    decided = {f"c{CHANNELS}-k11-d1": None, f"c{CHANNELS}-k7-d1": [64, 48], f"c{CHANNELS}-k7-d5": None}
    with using(TuningRecord(cpu_identity(), frequency=decided)):
        assert not taken(11, 1) and taken(7, 1) and not taken(7, 3)
        assert frequency_domain_convs({"kind": "llvm", "mcpu": "znver4"}, "full")
        assert not frequency_domain_convs({"kind": "llvm", "mcpu": "znver4"}, "bf16")
    with using(TuningRecord(cpu_identity(), frequency=dict.fromkeys(decided))):
        assert not frequency_domain_convs(AVX2, "full")  # measured direct everywhere: not even AVX2 takes it


def test_the_heuristic_takes_only_shapes_the_zen_4_measured_faster():
    """The claim behind the AVX-512 heuristic (pipeline.frequency_domain_convs): every shape the heuristic takes,
    the committed Zen 4 record took too, with the same tiles (shapes at the 3% margin may join the record's
    between runs; a re-tune that drops one of the heuristic's must revisit the heuristic)."""
    from kokoro_tvm.compiler.passes.frequency_conv import MEASURED_TILINGS
    from kokoro_tvm.compiler.tuning.record import TuningRecord
    from kokoro_tvm.paths import TUNING_RECORDS

    record = TuningRecord.load(TUNING_RECORDS / "amd-f25-m17-2ebdda08.json")
    assert len(record.frequency) == 12  # the decoder's shapes of 7 or 11 taps, each dilation, 128 or 256 channels
    taken = []
    for key, tiles in record.frequency.items():
        channels, taps, dilation = (int(part[1:]) for part in key.split("-"))
        heuristic = tiling(taps, dilation, channels)
        if heuristic is not None:
            assert tiles is not None and tuple(tiles) == heuristic == MEASURED_TILINGS[dilation], key
            taken.append(key)
    assert len(taken) == 4, taken  # 128 channels: 11 taps undilated and at dilation 3, 7 undilated; 256: 11 undilated
