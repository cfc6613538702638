"""Real-weights tier: the int8 build (`--precision int8`: the registry's INT8_CONVOLUTIONS, the generator's
resblocks, as per-call int8 convs; the rest of BF16_CONVOLUTIONS in bf16) against pt.dynamic in float32 with the
same noise. Its int8 decoder is built once into the user's cache; the text encoder is the bf16 build's, the
albert, duration and f0n builds the float32 ones (shared with tests/test_bf16_real.py, test_dynamic_real.py)."""

import pytest

from kokoro_tvm.compiler.bf16 import host_supports_bf16
from kokoro_tvm.compiler.int8 import host_supports_int8
from kokoro_tvm.evaluation.parity import compare_text

pytestmark = pytest.mark.real

# the same bars as the bf16 build (NOTES/performance.md): perceptually the same speech
INT8_PESQ, INT8_STOI = 4.3, 0.99
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
