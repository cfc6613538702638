"""Real-weights tier: `--buckets dynamic`, one symbolic-length build per component (kokoro_tvm.compiler.symbolic)
for every length, against pt.dynamic with the same explicit noise. The five builds land in the user's cache
once per run (locked, atomic) and every test here reuses them at whatever lengths its text needs."""

import json

import numpy as np
import pytest

from kokoro_tvm import marks
from kokoro_tvm.commands.compare import compare_text
from kokoro_tvm.components import FRAMES, LENGTH_TILE, NAMES, SYMBOLIC_MAX_LENGTH, component
from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.evaluation.metrics import pesq_wb, stoi
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.runtime.buckets import round_up
from kokoro_tvm.synthesis import synthesize

pytestmark = pytest.mark.real

SEED = 3
TILE = LENGTH_TILE
# the bounds of tests/test_parity_real.py: encoder-side stages within 1e-5 relative L2 of PyTorch fp32
FP32_STAGE_BOUND = 1e-5
FP32_STAGES = ("d_en", "d", "duration_logits", "en", "F0", "N", "t_en", "asr")
LIBRARY_BUDGET = 50e6  # bytes for all five libraries (our bound for the symbolic builds)


def test_compile_builds_five_symbolic_artifacts_then_finds_them_cached(capsys):
    from kokoro_tvm.cli import main

    for expect_cached in (None, True):
        assert main(["-q", "compile", "--buckets", "dynamic"]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert sorted(r["component"] for r in records) == sorted(NAMES)
        for r in records:
            assert r["symbolic"] and r["length"] == SYMBOLIC_MAX_LENGTH[component(r["component"]).axis]
        assert 0 < sum(r["library_bytes"] for r in records) <= LIBRARY_BUDGET
        if expect_cached:
            assert all(r["cached"] for r in records)


@pytest.mark.parametrize("text", ["Hello world.", "The birch canoe slid on the smooth planks."])
def test_float32_dynamic_matches_stage_by_stage_and_perceptually(text):
    record = compare_text(text, precision="fp32", buckets="dynamic")
    assert record["shapes"] == {"tokens": round_up(record["tokens"], TILE), "frames": round_up(record["frames"], TILE)}
    assert record["durations_equal"]
    worst = {s: record["stages"][s] for s in FP32_STAGES if record["stages"][s] > FP32_STAGE_BOUND}
    assert not worst, worst
    assert record["audio_pesq_wb"] >= marks.FP32_PESQ_WB and record["audio_stoi"] >= marks.FP32_STOI


@pytest.fixture(scope="module")
def long_speech():
    text = " ".join(load_sentences()[-2:])  # 547 phonemes: two chunks (258 and 288) of different lengths
    return (
        synthesize(text, backend="tvm", buckets="dynamic", noise=SEED),
        synthesize(text, backend="torch", noise=SEED),
    )


def test_long_text_runs_in_the_symbolic_builds_with_nothing_lost(long_speech):
    tvm, torch_ = long_speech
    assert len(tvm.chunks) == 2
    shapes = tvm.metadata["tvm"]["shapes"]
    for (t_shape, f_shape), chunk, durations in zip(shapes, tvm.chunks, tvm.durations, strict=True):
        assert t_shape == round_up(len(chunk.padded_ids), TILE) and f_shape == round_up(int(durations.sum()), TILE)
    for ours, theirs in zip(tvm.durations, torch_.durations, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    frames = sum(int(d.sum()) for d in tvm.durations)
    assert tvm.audio.shape == torch_.audio.shape == (frames * SAMPLES_PER_FRAME,)
    assert pesq_wb(torch_.audio, tvm.audio) >= marks.FP32_PESQ_WB and stoi(torch_.audio, tvm.audio) >= marks.FP32_STOI
    join = int(tvm.durations[0].sum()) * SAMPLES_PER_FRAME
    steps = np.abs(np.diff(tvm.audio))
    # a click is a step at the join larger than the waveform's own large steps (its 99.9th percentile)
    assert abs(float(tvm.audio[join]) - float(tvm.audio[join - 1])) <= np.quantile(steps, 0.999)


def test_an_utterance_past_the_symbolic_bound_is_refused_in_one_line(capsys, tmp_path, monkeypatch, kmodel):
    """The bound is 5120 frames (128 s in one chunk: the corpus's longest sentence, 288 phonemes, is 713 frames at
    speed 1 with af_heart), so the path is exercised with the bound lowered to one tile: "Hello world." needs more
    (PyTorch's durations say how many)."""
    import functools

    from kokoro_tvm.cli import main
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.frontend.voices import load_voice
    from kokoro_tvm.reference.pt_dynamic import predict_durations
    from kokoro_tvm.runtime import buckets

    (chunk,) = prepare(text="Hello world.")
    style = load_voice().style(len(chunk.phonemes))
    frames = int(predict_durations(kmodel[0], chunk.padded_ids, style, 1.0).sum())
    assert frames > TILE

    monkeypatch.setattr(buckets, "DynamicLengths", functools.partial(buckets.DynamicLengths, max_frames=TILE))
    out = tmp_path / "x.wav"
    assert main(["-q", "say", "Hello world.", "--backend", "tvm", "--buckets", "dynamic", "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("kokoro-tvm: error:"), err
    assert f"needs {frames} frames" in err[0] and f"at most {TILE} (" in err[0]
    assert not out.exists()  # nothing written, nothing cut


@pytest.mark.parametrize(
    ("text", "speed"),
    [
        ("Hello world.", 1.0),  # in `make test`: the float64 proof of the default runtime, 63 frames in 64
        pytest.param("Hi.", 1.0, marks=pytest.mark.slow),
        pytest.param("Hello world.", 0.3, marks=pytest.mark.slow),
    ],
)
def test_float64_dynamic_is_exact(text, speed):
    record = compare_text(text, precision="fp64", buckets="dynamic", speed=speed)
    assert record["durations_equal"] and record["audio_snr_db"] >= marks.FP64_SNR_DB
    assert max(record["stages"].values()) < 1e-9


@pytest.mark.slow
def test_float64_dynamic_is_exact_at_its_longest_length():
    """The corpus's longest one-chunk sentence (288 phonemes) at speed 0.1389 (5113 frames with af_heart): the last
    frame tile of the bound."""
    record = compare_text(load_sentences()[225], precision="fp64", buckets="dynamic", speed=0.1389)
    bound = SYMBOLIC_MAX_LENGTH[FRAMES]
    assert bound - TILE < record["frames"] <= bound and record["shapes"]["frames"] == bound
    assert record["durations_equal"] and record["audio_snr_db"] >= marks.FP64_SNR_DB
