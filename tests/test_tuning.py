"""The tuner (kokoro_tvm.compiler.tuning) on tiny shapes: the classes it finds, that every candidate schedule
computes the same conv, that a record's choice reaches the schedule and the packed rewrite, the record file,
and the budget. Nothing here tunes the model (`kokoro-tvm tune` does; its record for each CPU family measured is
committed under kokoro_tvm/data/tuning/)."""

import json

import numpy as np
import pytest
import tvm
from tvm import relax

from kokoro_tvm.compiler.passes.bf16_convolutions import Bf16Convolutions
from kokoro_tvm.compiler.pipeline import phases, schedule_passes
from kokoro_tvm.compiler.targets import cpu_geometry, host_target
from kokoro_tvm.compiler.tuning import measure, tuner
from kokoro_tvm.compiler.tuning import record as tuning
from kokoro_tvm.compiler.tuning.record import Choice, TuningRecord
from kokoro_tvm.errors import InputError
from kokoro_tvm.machine import cpu_identity

OUT, IN, TAPS, STEPS = 32, 16, 3, 128  # STEPS: whole column tiles, as passes.AlignConvLengths leaves the model's


def _conv_module(out_channels=OUT, in_channels=IN, taps=TAPS):
    """One conv1d + bias: what the model's fused conv functions look like, small."""
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, in_channels, STEPS), "float32"))
    w = relax.Var("decoder_conv_weight", relax.TensorType((out_channels, in_channels, taps), "float32"))
    b = relax.Var("decoder_conv_bias", relax.TensorType((1, out_channels, 1), "float32"))
    with bb.function("main", [x, w, b]):
        with bb.dataflow():
            y = bb.emit(relax.op.nn.conv1d(x, w, padding=taps // 2))
            out = bb.emit_output(bb.emit(relax.op.add(y, b)))
        bb.emit_func_output(out)
    return bb.get()


def _legalized(mod):
    target = host_target()
    with tvm.target.Target(target):
        for _, passes in phases(target)[:3]:
            mod = tvm.transform.Sequential(passes)(mod)
    return mod


@pytest.fixture(scope="module")
def conv_class():
    classes = measure.contraction_functions(_legalized(_conv_module()))
    assert len(classes) == 1
    ((key, functions),) = classes.items()
    return key, functions[0]


def test_a_conv_is_one_class_named_by_its_operands_rows_and_reduction(conv_class):
    key, function = conv_class
    assert key == f"float32xfloat32:{OUT}:{IN}x{TAPS}"
    assert function.multiply_adds == OUT * IN * TAPS * STEPS


def _run(kernel, args):
    out = tvm.runtime.tensor(np.zeros(args[-1].shape, "float32"))
    kernel(*args[:-1], out)
    return out.numpy()


def test_every_candidate_schedule_computes_the_same_conv(conv_class):
    """A choice changes how the conv is computed, never what: every candidate against the heuristic schedule
    and against numpy."""
    key, function = conv_class
    target = host_target()
    args = measure.arguments(function.func, measure.MEASURE_TILES)
    x, w, b = (a.numpy() for a in args[:3])
    padded = np.pad(x[0], ((0, 0), (TAPS // 2, TAPS // 2)))
    steps = x.shape[2]
    expected = np.einsum("oct,ctn->on", w, np.stack([padded[:, t : t + steps] for t in range(TAPS)], 1)) + b[0]
    heuristic = _run(measure.compile_function(function.func, target, None, function.name), args)
    # float32 sums of 48 products in another order: within a few ulps of the magnitude (|value| ~ 7)
    np.testing.assert_allclose(heuristic[0], expected, rtol=1e-5, atol=1e-4)
    applied = 0
    for choice in measure.candidates(cpu_geometry(target)):
        kernel = measure.kernel(function.func, target, choice, function.name)
        if kernel is None:  # a tile this shape cannot take (the rule then falls back): the tuner skips it
            continue
        np.testing.assert_allclose(_run(kernel, args), heuristic, rtol=1e-5, atol=1e-4)
        applied += 1
    assert applied >= len(measure.candidates(cpu_geometry(target))) // 2  # a 32-row conv takes most tiles


def test_a_record_choice_reaches_the_schedule(conv_class):
    key, function = conv_class
    target = host_target()

    def scheduled(record):
        mod = tvm.IRModule({function.name: function.func.with_attr("global_symbol", function.name)})
        with tvm.target.Target(target), tuning.using(record):
            return tvm.transform.Sequential(schedule_passes(target))(mod).script()

    identity = cpu_identity()
    narrow = TuningRecord(identity, {key: Choice(4, 1, True)})
    wide = TuningRecord(identity, {key: Choice(16, 1, False)})
    assert scheduled(narrow) != scheduled(wide)
    assert scheduled(TuningRecord(identity, {"float32xfloat32:1:1": Choice(4, 1, True)})) == scheduled(None)


def test_a_packed_conv_the_record_measured_slower_stays_float32():
    mod = _conv_module(OUT, IN, TAPS)
    packed_class = f"uint16xuint16:{OUT}:{IN // 2}x{TAPS}x2"

    def bf16_calls(record):
        with tuning.using(record):
            return Bf16Convolutions()(mod).script().count("bf16_conv1d")

    assert bf16_calls(None) > 0
    assert bf16_calls(TuningRecord(cpu_identity(), packed={packed_class: tuning.AVX512})) > 0
    assert bf16_calls(TuningRecord(cpu_identity(), packed={packed_class: tuning.FLOAT32})) == 0


def test_the_record_file_round_trips_and_its_digest_is_its_decisions(tmp_path):
    record = TuningRecord(
        cpu_identity(),
        {"float32xfloat32:256:256x7": Choice(8, 2, False)},
        {"uint16xuint16:256:128x7x2": tuning.FLOAT32},
        {"c128-k11-d1": [64, 48], "c128-k7-d5": None},
        {"float32xfloat32:256:256x7": {"seconds": {"heuristic": 0.05, "8x2c": 0.04}}},
        {"date": "2026-11-28", "precision_seconds": {"fp32": 2.0, "bf16": 2.1, "int8": 0.9}},
    )
    loaded = TuningRecord.load(record.save(tmp_path))
    assert loaded.decisions() == record.decisions() and loaded.digest() == record.digest()
    assert loaded.fastest_precision(["fp32", "bf16", "int8"]) == "int8"
    assert loaded.fastest_precision(["fp32", "bf16"]) == "fp32"
    assert loaded.frequency == {"c128-k11-d1": [64, 48], "c128-k7-d5": None}
    retimed = TuningRecord(record.cpu, record.choices, record.packed, record.frequency, {}, {"date": "2027-01-01"})
    assert retimed.digest() == record.digest()  # timings are not what a build computes from
    other = TuningRecord(record.cpu, {"float32xfloat32:256:256x7": Choice(8, 2, True)}, record.packed)
    assert other.digest() != record.digest()
    direct = TuningRecord(record.cpu, record.choices, record.packed, {"c128-k11-d1": None, "c128-k7-d5": None})
    assert direct.digest() != record.digest()
    assert tuning.find(record.cpu, (tmp_path,)).decisions() == record.decisions()


def test_an_unreadable_record_is_one_error_line(tmp_path, monkeypatch):
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(InputError, match="tuning record .*broken.json is unreadable"):
        TuningRecord.load(broken)
    monkeypatch.setenv("KOKORO_TVM_TUNING", str(broken))
    with pytest.raises(InputError, match="unreadable"):
        tuning.for_target(host_target())
    monkeypatch.setenv("KOKORO_TVM_TUNING", "off")
    assert tuning.for_target(host_target()) is None
    # another CPU's target never takes this machine's record
    monkeypatch.delenv("KOKORO_TVM_TUNING")
    assert tuning.for_target({"kind": "llvm", "mcpu": "haswell", "mtriple": "x86_64-linux-gnu"}) is None


def test_packed_classes_compare_with_their_float32_twin():
    assert tuner.float32_class("uint16xuint16:256:128x7x2") == "float32xfloat32:256:256x7"
    assert tuner.float32_class("int8xuint8:128:32x11x4") == "float32xfloat32:128:128x11"
    assert tuner.float32_class("uint16xuint16:1024:545x2") == "float32xfloat32:1024:1090"
    assert tuner.float32_class("float32xfloat32:5:11x4") is None

    def result(key, best, amx=None):
        return tuner.ClassResult(key, "f", 0.1, {"heuristic": best * 1.2, "8x2c": best}, None, amx_seconds=amx)

    packed = "uint16xuint16:256:128x7x2"
    results = {r.key: r for r in (result("float32xfloat32:256:256x7", 1.0), result(packed, 0.95))}
    assert tuner.packed_choices(results) == {packed: tuning.FLOAT32}  # not PACKED_MARGIN faster
    results[packed] = result(packed, 0.5)
    assert tuner.packed_choices(results) == {packed: tuning.AVX512}
    results[packed] = result(packed, 0.5, amx=0.45)  # faster alone, not by AMX_MARGIN (its epilogue is a pass)
    assert tuner.packed_choices(results) == {packed: tuning.AVX512}
    results[packed] = result(packed, 0.5, amx=0.2)
    assert tuner.packed_choices(results) == {packed: tuning.AMX}
    results[packed] = result(packed, 2.0, amx=0.5)  # the vector kernel loses to float32, the tiles do not
    assert tuner.packed_choices(results) == {packed: tuning.AMX}


def test_the_budget_bounds_the_classes_measured(conv_class):
    key, function = conv_class
    classes = {key: [function]}
    assert tuner.tune_functions(classes, host_target(), budget_s=-1) == []
    (result,) = tuner.tune_functions(classes, host_target(), budget_s=60)
    assert result.key == key and "heuristic" in result.seconds and len(result.seconds) > 2
    # the kept choice (if any) is the fastest candidate and beat the heuristic by the margin
    if result.choice is not None:
        assert result.seconds[result.choice.label] == min(v for k, v in result.seconds.items() if k != "heuristic")
        assert result.seconds[result.choice.label] < tuner.MARGIN * result.seconds["heuristic"]


def test_the_build_key_carries_the_records_decisions():
    from kokoro_tvm.compiler.build import BuildSpec, key_fields

    spec, target = BuildSpec("decoder", 16), host_target()
    record = TuningRecord(cpu_identity(), {"float32xfloat32:256:256x7": Choice(8, 2, False)})
    assert "tuning" not in key_fields(spec, "w", target)
    assert key_fields(spec, "w", target, record)["tuning"] == record.digest()


def test_committed_records_are_readable_and_name_their_cpu():
    from kokoro_tvm.machine import record_name
    from kokoro_tvm.paths import TUNING_RECORDS

    paths = sorted(TUNING_RECORDS.glob("*.json"))
    assert paths, "no committed tuning record"
    for path in paths:
        record = TuningRecord.load(path)
        assert path.name == record_name(record.cpu)
        assert record.tuned["precision_seconds"] and json.loads(path.read_text())["format"] == tuning.FORMAT


def test_the_long_convs_are_timed_both_ways_and_the_faster_kept():
    """The shapes the frequency-domain pass could take (7 taps or more; not the 3-tap conv), each built both ways
    and timed by the caller's timer (the runtime's VM, through kokoro_tvm.compiled); both builds compute the
    conv, and a record's entry is the frequency domain's tiles only where it beat the direct conv by MARGIN."""
    import torch

    from kokoro_tvm.compiled import compile_and_load, module_seconds
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS
    from kokoro_tvm.compiler.tuning import frequency

    length = tvm.tirx.Var("tiles", "int64")
    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, 64, 16 * length), "float32"))
    weights = [relax.Var(f"w{k}", relax.TensorType((64, 64, k), "float32")) for k in (11, 3, 7)]
    with bb.function("main", [x, *weights], attrs={"num_input": 1}):
        with bb.dataflow():
            y = x
            for w, dilation in zip(weights, (1, 1, 3), strict=True):
                span = dilation * (int(w.ty.shape[2]) - 1)
                y = bb.emit(relax.op.nn.conv1d(y, w, padding=span // 2, dilation=dilation))
            bb.emit_output(y)
        bb.emit_func_output(y)
    shapes = frequency.conv_shapes(bb.get(), host_target(), tuner.steps_at_measured_length)
    steps = 16 * measure.MEASURE_TILES
    assert shapes == [frequency.ConvShape(64, 11, 1, steps), frequency.ConvShape(64, 7, 3, steps)]

    # most multiply-adds first (the 11 taps, though given last), and nothing after the budget is spent: a thousandth
    # of a second lets one shape start and none after it (each takes far longer to build and time)
    decisions, measured = tuner.measure_frequency(
        shapes[::-1], host_target(), module_seconds, lambda items, _unit: items, budget_s=1e-3
    )
    assert list(measured) == ["c64-k11-d1"]
    assert tuner.measure_frequency(shapes, host_target(), module_seconds, lambda items, _unit: items, -1.0) == ({}, {})
    seconds = measured["c64-k11-d1"]["seconds"]
    faster = seconds["frequency"] < tuner.MARGIN * seconds["direct"]
    assert decisions == {"c64-k11-d1": [64, 48] if faster else None}
    builds, xs, ws = frequency.conv_builds(shapes[0], host_target())
    want = torch.nn.functional.conv1d(
        torch.tensor(xs, dtype=torch.float64), torch.tensor(ws, dtype=torch.float64), padding=5
    ).numpy()
    for way, mod in builds.items():
        lifted = TRANSFORM_PARAMS if TRANSFORM_PARAMS in {gv.name_hint for gv in mod.functions} else None
        got = compile_and_load(mod, params=[ws], transform_params=lifted)(xs)[0]
        # float32 against float64 over 704 products per output: the kernels' error is 4e-7 to 1e-6 of the norm
        # (tests/test_frequency_conv.py); 4e-6 is far below a wrong tap or tile (order 1)
        assert np.linalg.norm(got - want) / np.linalg.norm(want) < 4e-6, way


def test_the_frequency_domain_is_kept_only_beyond_the_margin():
    from kokoro_tvm.compiler.tuning import frequency

    shape = frequency.ConvShape(128, 11, 3, 30752)
    assert frequency.decide(shape, {"direct": 1.0, "frequency": 0.7}, tuner.MARGIN) == [128, 96]
    assert frequency.decide(shape, {"direct": 1.0, "frequency": 0.99}, tuner.MARGIN) is None  # within the spread
    assert frequency.decide(shape, {"direct": 1.0, "frequency": 1.5}, tuner.MARGIN) is None


def test_the_spectra_budget_keeps_the_most_time_saved_per_byte():
    """Three winners: 256 channels (17.3 MB of half spectra per conv at N = 64), 128 channels (8.6 MB), a loser.
    With room for one 256-channel conv's spectra only the 128-channel shapes fit, best saving per byte first."""
    from kokoro_tvm.compiler.tuning import frequency

    wide, narrow = frequency.ConvShape(256, 7, 1, 5120, convs=2), frequency.ConvShape(128, 11, 1, 30752, convs=4)
    dilated, slow = frequency.ConvShape(128, 11, 3, 30752), frequency.ConvShape(128, 7, 5, 30752)
    assert (
        frequency.spectrum_bytes(wide) == 2 * 33 * 256 * 512 * 4  # [Gr, -Gi]: O x 2C a bin
        and frequency.spectrum_bytes(dilated) == 65 * 256**2 * 4  # [[Gr, -Gi], [Gi, Gr]]: 2O x 2C a bin
    )
    seconds = {
        wide.key: {"direct": 0.022, "frequency": 0.015},  # saves 14 ms for 35 MB
        narrow.key: {"direct": 0.051, "frequency": 0.029},  # 88 ms for 35 MB
        dilated.key: {"direct": 0.050, "frequency": 0.036},  # 14 ms for 17 MB
        slow.key: {"direct": 0.033, "frequency": 0.047},
    }
    everything = frequency.within_budget([wide, narrow, dilated, slow], seconds, tuner.MARGIN, budget=2**40)
    assert everything == {wide.key: [64, 48], narrow.key: [64, 48], dilated.key: [128, 96], slow.key: None}
    budget = frequency.spectrum_bytes(narrow) + frequency.spectrum_bytes(dilated)
    chosen = frequency.within_budget([wide, narrow, dilated, slow], seconds, tuner.MARGIN, budget=budget)
    assert chosen == {wide.key: None, narrow.key: [64, 48], dilated.key: [128, 96], slow.key: None}
    assert frequency.within_budget([wide, narrow], seconds, tuner.MARGIN, budget=0) == dict.fromkeys(
        [wide.key, narrow.key]
    )
