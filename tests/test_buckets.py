"""Bucket sets (unit tier, no torch or TVM): picking, overflow, specs, and the padded-compute measure."""

import numpy as np
import pytest

from kokoro_tvm.components import LENGTH_TILE
from kokoro_tvm.config import MAX_POSITIONS
from kokoro_tvm.runtime.buckets import (
    ALIGN,
    CANDIDATES,
    DEFAULT_SET,
    BucketSet,
    BucketSpecError,
    DynamicLengths,
    TooLongError,
    geometric,
    parse_buckets,
)
from kokoro_tvm.studies.bucket_choice import FlopModel, Polynomial, evaluate

SMALL = BucketSet("small", (32, 64, 512), (64, 128), overflow=256)


@pytest.mark.parametrize("n, expected", [(1, 32), (32, 32), (33, 64), (64, 64), (65, 512), (512, 512)])
def test_token_bucket_is_the_smallest_that_holds(n, expected):
    assert SMALL.token_bucket(n) == expected


@pytest.mark.parametrize("n, expected", [(1, 64), (64, 64), (65, 128), (129, 256), (256, 256), (257, 512)])
def test_frames_past_the_largest_bucket_round_up_never_truncate(n, expected):
    assert SMALL.frame_bucket(n) == expected


def test_tokens_past_the_last_bucket_round_to_align_within_albert_positions():
    only_small = BucketSet("t", (32,), (64,))
    assert only_small.token_bucket(33) == 64
    assert only_small.token_bucket(MAX_POSITIONS) == MAX_POSITIONS
    with pytest.raises(ValueError, match="1..512 tokens"):
        only_small.token_bucket(MAX_POSITIONS + 1)
    with pytest.raises(ValueError, match="at least one frame"):
        only_small.frame_bucket(0)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("nope", "unknown bucket set"),
        ("tokens=30;frames=64", "multiples of 32"),
        ("tokens=64,32;frames=64", "increasing"),
        ("tokens=64;frames=", "no frame buckets"),
        ("tokens=1024;frames=64", "stop at 512"),
        ("tokens=a;frames=64", "integers"),
    ],
)
def test_bad_bucket_specs_are_clear_errors(spec, message):
    with pytest.raises(BucketSpecError, match=message):
        parse_buckets(spec)


@pytest.mark.parametrize("n, expected", [(1, 8), (8, 8), (9, 16), (17, 24), (510, 512), (512, 512)])
def test_dynamic_lengths_pad_to_a_whole_tile(n, expected):
    assert LENGTH_TILE == 8  # the expected lengths above are whole 8-step tiles
    dynamic = parse_buckets("dynamic")
    assert isinstance(dynamic, DynamicLengths) and dynamic.symbolic and dynamic.artifacts == 5
    assert dynamic.token_bucket(n) == expected and dynamic.frame_bucket(n) == expected
    assert dynamic.frame_bucket(5120) == 5120


def test_dynamic_lengths_refuse_what_they_cannot_hold():
    dynamic = DynamicLengths()
    with pytest.raises(ValueError, match="1..512 tokens"):
        dynamic.token_bucket(MAX_POSITIONS + 1)
    with pytest.raises(TooLongError, match=r"needs 5121 frames.*at most 5120 \(128 s\)"):
        dynamic.frame_bucket(5121)  # refused in one line, never cut to 5120


def test_explicit_and_named_specs():
    custom = parse_buckets("tokens=64,512;frames=256,1024")
    assert custom.tokens == (64, 512) and custom.frames == (256, 1024) and custom.artifacts == 3 * 2 + 2 * 2
    assert parse_buckets("bucketed") == CANDIDATES[DEFAULT_SET] == parse_buckets(DEFAULT_SET)


def test_the_default_policy_is_the_symbolic_builds():
    """`--buckets default` (say, bench, compile, TVMKokoro) runs the five symbolic-length builds."""
    assert parse_buckets("default") == parse_buckets(" default ") == DynamicLengths()
    with pytest.raises(BucketSpecError, match="use one of default, bucketed, dynamic, pow2"):
        parse_buckets("defualt")


@pytest.mark.parametrize("ratio", [1.25, 1.5, 2.0])
def test_geometric_sets_are_aligned_and_grow_by_about_the_ratio(ratio):
    sizes = geometric(64, 2048, ratio)
    assert sizes[0] == 64 and sizes[-1] == 2048
    assert all(s % ALIGN == 0 for s in sizes)
    steps = np.array(sizes[1:]) / np.array(sizes[:-1])
    # rounding up to 32 can only enlarge a step by < 32/size; the last step may be merged up to 1.5 ratios
    assert steps[:-1].min() >= ratio - 1e-9 and steps[:-1].max() <= ratio + ALIGN / 64
    assert steps[-1] <= ratio * (1 + (ratio - 1) / 2) + ALIGN / 64


def test_every_candidate_is_valid_and_covers_albert():
    """Each candidate set's buckets rise strictly, each a whole number of length tiles (so a symbolic schedule's
    proofs hold for it too), and the last token bucket is ALBERT's limit: every utterance fits a bucket."""
    for name, buckets in CANDIDATES.items():
        for axis in (buckets.tokens, buckets.frames):
            assert list(axis) == sorted(set(axis)) and axis[0] > 0, name
            assert all(n % LENGTH_TILE == 0 for n in axis), name
        assert buckets.tokens[-1] == MAX_POSITIONS, name
        assert all(0 < n <= MAX_POSITIONS for n in buckets.tokens), name


def _linear_flops():
    return FlopModel(Polynomial((1.0, 0.0), 0.0), Polynomial((10.0, 0.0), 0.0), {})


def test_overhead_is_zero_when_every_length_is_a_bucket():
    lengths = [{"tokens": 32, "frames": 64}, {"tokens": 64, "frames": 128}]
    record = evaluate(SMALL, lengths, _linear_flops())
    assert record["mean_overhead"] == 0 and record["total_overhead"] == 0
    assert record["artifacts_used"] == 3 * 2 + 2 * 2


def test_overhead_counts_padded_compute_over_useful_compute():
    # tokens 16 -> 32 (cost 16 -> 32), frames 100 -> 128 (cost 1000 -> 1280): (32 + 1280) / (16 + 1000) - 1
    record = evaluate(SMALL, [{"tokens": 16, "frames": 100}], _linear_flops())
    assert record["mean_overhead"] == pytest.approx((32 + 1280) / (16 + 1000) - 1, rel=1e-12)
    assert record["token_padding"] == pytest.approx(1.0) and record["frame_padding"] == pytest.approx(0.28)


def test_every_corpus_sentence_is_speakable_in_one_chunk():
    from kokoro_tvm.frontend.corpus import load_sentences
    from kokoro_tvm.frontend.text import prepare

    sentences = load_sentences()
    assert len(sentences) >= 200
    assert all(len(prepare(text=s)) == 1 for s in sentences)  # each line is one utterance (<= 510 phonemes)


def test_dynamic_lengths_pad_less_than_any_bucket_set():
    # 8-step tiles: tokens 20 -> 24 (cost 20 -> 24), frames 100 -> 104 (cost 1000 -> 1040), 5 artifacts
    # whatever the corpus
    assert LENGTH_TILE == 8
    record = evaluate(DynamicLengths(), [{"tokens": 20, "frames": 100}], _linear_flops())
    assert record["mean_overhead"] == pytest.approx((24 + 1040) / (20 + 1000) - 1, rel=1e-12)
    assert record["artifacts"] == record["artifacts_used"] == 5 and record["frame_buckets"] == "multiples of 8"
    lengths = [{"tokens": t, "frames": f} for t, f in ((20, 300), (150, 700), (400, 1500))]
    for candidate in CANDIDATES.values():
        assert (
            evaluate(DynamicLengths(), lengths, _linear_flops())["total_overhead"]
            <= (evaluate(candidate, lengths, _linear_flops())["total_overhead"])
        )


def _build_records(lengths_by_component):
    # build seconds 10 + 0.01 per unit of length, library bytes 1000 per unit: a known line to recover
    return [
        {"component": c, "length": n, "build_seconds": 10 + 0.01 * n, "library_bytes": 1000 * n}
        for c, lengths in lengths_by_component.items()
        for n in lengths
    ]


def test_build_cost_model_fits_a_line_through_two_or_more_lengths():
    from kokoro_tvm.components import FRAME_COMPONENTS, NAMES, TOKEN_COMPONENTS
    from kokoro_tvm.studies.bucket_choice import build_cost_model, estimated_build_cost

    fits = build_cost_model(_build_records({c: (32, 64, 128) for c in NAMES}))
    assert all(fit["degree"] == 1 for fit in fits.values())
    cost = estimated_build_cost(SMALL, fits)
    expected_seconds = len(TOKEN_COMPONENTS) * sum(10 + 0.01 * n for n in SMALL.tokens) + len(FRAME_COMPONENTS) * sum(
        10 + 0.01 * n for n in SMALL.frames
    )
    assert cost["estimated_build_seconds"] == pytest.approx(expected_seconds, rel=1e-9)  # exact line: only rounding


def test_build_cost_model_from_one_length_is_a_labelled_constant():
    from kokoro_tvm.components import FRAME_COMPONENTS, NAMES, TOKEN_COMPONENTS
    from kokoro_tvm.studies.bucket_choice import build_cost_model, estimated_build_cost

    fits = build_cost_model(_build_records({c: (64,) for c in NAMES}))  # a FAST run measures one length
    assert all(fit["degree"] == 0 for fit in fits.values())
    cost = estimated_build_cost(SMALL, fits)
    artifacts = len(TOKEN_COMPONENTS) * len(SMALL.tokens) + len(FRAME_COMPONENTS) * len(SMALL.frames)
    assert cost["estimated_build_seconds"] == pytest.approx(artifacts * (10 + 0.64), rel=1e-9)
    with pytest.raises(ValueError, match="no build record of decoder"):
        build_cost_model(_build_records({c: (64,) for c in NAMES if c != "decoder"}))
