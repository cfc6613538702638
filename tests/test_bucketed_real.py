"""Real-weights tier: long text through the bucketed TVM runtime (the `say --backend tvm` default)."""

import numpy as np
import pytest

from kokoro_tvm.components import NAMES, lengths_for
from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.evaluation.metrics import pesq_wb, stoi
from kokoro_tvm.runtime.buckets import CANDIDATES, DEFAULT_SET
from kokoro_tvm.studies.bucket_choice import load_sentences
from kokoro_tvm.synthesis import synthesize

pytestmark = pytest.mark.real

SEED = 3  # the same explicit SineGen noise for both backends


@pytest.fixture(scope="module")
def long_speech():
    text = " ".join(load_sentences()[-3:])  # about 770 phonemes: two chunks
    return synthesize(text, backend="tvm", noise=SEED), synthesize(text, backend="torch", noise=SEED)


def test_long_text_runs_in_default_buckets_with_nothing_lost(long_speech):
    tvm, torch_ = long_speech
    assert len(tvm.chunks) == 2
    default = CANDIDATES[DEFAULT_SET]
    shapes = tvm.metadata["tvm"]["shapes"]
    for (t_bucket, f_bucket), chunk, durations in zip(shapes, tvm.chunks, tvm.durations, strict=True):
        assert t_bucket == default.token_bucket(len(chunk.padded_ids))
        assert f_bucket == default.frame_bucket(int(durations.sum()))
    for ours, theirs in zip(tvm.durations, torch_.durations, strict=True):
        np.testing.assert_array_equal(ours, theirs)
    frames = sum(int(d.sum()) for d in tvm.durations)
    assert tvm.audio.shape == torch_.audio.shape == (frames * SAMPLES_PER_FRAME,)


def test_long_text_sounds_like_pytorch_and_joins_without_a_click(long_speech):
    tvm, torch_ = long_speech
    # the fp32 bounds of tests/test_parity_real.py (the decoder is ill-conditioned in fp32: NOTES/compile.md)
    assert pesq_wb(torch_.audio, tvm.audio) >= 4.4 and stoi(torch_.audio, tvm.audio) >= 0.99
    join = int(tvm.durations[0].sum()) * SAMPLES_PER_FRAME
    steps = np.abs(np.diff(tvm.audio))
    # a click is a step at the join larger than the waveform's own large steps (its 99.9th percentile)
    assert abs(float(tvm.audio[join]) - float(tvm.audio[join - 1])) <= np.quantile(steps, 0.999)


def test_compile_precompiles_a_bucket_set_then_finds_it_cached(capsys):
    import json

    from kokoro_tvm.cli import main

    # the default set's smallest buckets: the notebooks and `say` build these too, so a run builds them once
    for expect_cached in (None, True):
        assert main(["-q", "compile", "--buckets", "tokens=32;frames=64"]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert sorted((r["component"], r["length"]) for r in records) == sorted(
            lengths_for(NAMES, tokens=32, frames=64).items()
        )
        assert all(r["library_bytes"] > 0 and r["build_seconds"] > 0 for r in records)
        if expect_cached:
            assert all(r["cached"] for r in records)
