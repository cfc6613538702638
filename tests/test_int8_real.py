"""Real-weights tier: the int8 build (`--precision int8`: the registry's INT8_CONVOLUTIONS, the generator's
resblocks, as per-call int8 convs; the rest of BF16_CONVOLUTIONS in bf16) against pt.dynamic in float32 with the
same noise. Its int8 decoder is built once into the user's cache; the text encoder is the bf16 build's, the
albert, duration and f0n builds the float32 ones (shared with tests/test_bf16_real.py, test_dynamic_real.py)."""

import pytest

from kokoro_tvm import marks
from kokoro_tvm.commands.compare import compare_text
from kokoro_tvm.compiler.bf16 import host_supports_bf16
from kokoro_tvm.compiler.int8 import host_supports_int8

pytestmark = pytest.mark.real

# the same bars as the bf16 build (NOTES/performance.md): perceptually the same speech
INT8_PESQ, INT8_STOI = marks.REDUCED_PESQ_WB, marks.REDUCED_STOI
# stages computed by float32 components (the duration path, F0N) are the float32 build's, within its bound
FP32_STAGES, FP32_STAGE_BOUND = ("d_en", "d", "duration_logits", "en", "F0", "N"), 1e-5
# int8 activations have 8 bits per channel and call: the audio's relative L2 error against float32 is ~0.066 in
# emulation (23.6 dB audio SNR, median of 24 texts), where bf16 keeps <= 0.011 (>= 38.9 dB) on the same texts;
# 0.02 (34 dB) lies between, so a build that had quietly stayed bf16 (or float32) fails it
INT8_AUDIO_FLOOR = 2e-2


@pytest.mark.skipif(not (host_supports_bf16() and host_supports_int8()), reason="needs AVX512_BF16 and VNNI")
def test_int8_build_keeps_durations_and_sounds_the_same():
    record = compare_text("The birch canoe slid on the smooth planks.", precision="int8", buckets="dynamic")
    assert record["precision"] == "int8" and record["durations_equal"]
    worst = {s: record["stages"][s] for s in FP32_STAGES if record["stages"][s] > FP32_STAGE_BOUND}
    assert not worst, worst
    assert record["stages"]["audio"] > INT8_AUDIO_FLOOR, record["stages"]  # int8 really
    assert record["audio_pesq_wb"] >= INT8_PESQ and record["audio_stoi"] >= INT8_STOI


# Each int8 conv quantizes with its input's channel ranges over the whole call, padded tail included: the tail
# must hold zeros there (the padding-invariant decoder re-zeroes it), or a longer padding would move the scales
# and with them the valid audio. Same inputs, same build, three paddings: the valid audio must be the same bits
# (measured: 0.0 difference at +16, +64 and +160 frames).
PADDINGS = (16, 64, 160)  # extra frames: two more tiles, eight, more than the utterance's own 122


@pytest.mark.skipif(not (host_supports_bf16() and host_supports_int8()), reason="needs AVX512_BF16 and VNNI")
def test_int8_ranges_do_not_see_the_padding():
    import numpy as np
    import torch

    from kokoro_tvm.compiled import compiled_kokoro
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
    from kokoro_tvm.reference.noise import SeededNoise
    from kokoro_tvm.runtime.buckets import parse_buckets
    from kokoro_tvm.weights.resolve import load_kmodel

    (chunk,) = prepare(text="The birch canoe slid on the smooth planks.")
    style = load_voice(DEFAULT_VOICE).style(len(chunk.phonemes))
    model, info = load_kmodel(None, dtype=torch.float32)
    runtime = compiled_kokoro(model, info.fingerprint, buckets=parse_buckets("dynamic"), precision="int8")
    natural = runtime.run_stages(chunk.padded_ids, style, noise=SeededNoise(0))
    for extra in PADDINGS:
        padded = runtime.run_stages(
            chunk.padded_ids, style, noise=SeededNoise(0), frame_bucket=natural.buckets[1] + extra
        )
        assert padded.buckets[1] == natural.buckets[1] + extra
        np.testing.assert_array_equal(padded.audio, natural.audio, err_msg=f"{extra} more frames of padding")
