"""Real-weights tier: the bf16 build (`--precision bf16`: the registry's BF16_CONVOLUTIONS as vdpbf16ps) against
pt.dynamic in float32 with the same noise, and our own fp32 ONNX export as a benchmark peer. The bf16 decoder and
text encoder are built once into the user's cache (the float32 albert, duration and f0n builds are shared with
tests/test_dynamic_real.py)."""

import numpy as np
import pytest

from kokoro_tvm import marks
from kokoro_tvm.commands.compare import compare_text
from kokoro_tvm.compiler.bf16 import host_supports_bf16

pytestmark = pytest.mark.real

# the bf16 build's bars against pt.dynamic fp32 (same noise), NOTES/performance.md: perceptually the same speech
BF16_PESQ, BF16_STOI = marks.REDUCED_PESQ_WB, marks.REDUCED_STOI
# stages computed by float32 components (the duration path, F0N) are the float32 build's, within its bound
FP32_STAGES, FP32_STAGE_BOUND = ("d_en", "d", "duration_logits", "en", "F0", "N"), 1e-5
# the text encoder's convs in bf16: operands rounded to 8 significant bits (relative error <= 2^-9 = 0.2% each,
# partly averaging out over 2560 products per output); measured 5e-4 on the bench sentence
BF16_STAGES, BF16_STAGE_BOUND = ("t_en", "asr"), 3e-3


@pytest.mark.skipif(not host_supports_bf16(), reason="this CPU has no AVX512_BF16")
def test_bf16_build_keeps_durations_and_sounds_the_same():
    record = compare_text("The birch canoe slid on the smooth planks.", precision="bf16", buckets="dynamic")
    assert record["precision"] == "bf16" and record["durations_equal"]
    worst = {s: record["stages"][s] for s in FP32_STAGES if record["stages"][s] > FP32_STAGE_BOUND}
    assert not worst, worst
    assert all(1e-6 < record["stages"][s] <= BF16_STAGE_BOUND for s in BF16_STAGES), record["stages"]  # bf16 really
    assert record["audio_pesq_wb"] >= BF16_PESQ and record["audio_stoi"] >= BF16_STOI


def test_our_fp32_onnx_export_speaks_with_pytorchs_durations(kmodel):
    """The ONNX Runtime fp32 peer runs the same weights: its audio has PyTorch's length (the same durations) on
    two utterances of different lengths (the export's token axis is dynamic), and the export is cached."""
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
    from kokoro_tvm.peers.catalog import OrtFp32, onnx_fp32_export
    from kokoro_tvm.reference.pt_dynamic import stock_forward
    from kokoro_tvm.runtime.devices import cpu_share

    model, info = kmodel
    peer = OrtFp32(model, info.fingerprint, threads=cpu_share())
    assert not any(m.training for m in model.modules())  # the export (where this made it) left the model in eval
    pack = load_voice(DEFAULT_VOICE)
    for text in ("Hello world.", "A pot of tea helps to pass the evening, and the soft cushion broke his fall."):
        chunk = prepare(text=text)[0]
        style = pack.style(len(chunk.phonemes))
        audio = peer.speak(chunk.padded_ids, style)
        reference, _ = stock_forward(model, chunk.padded_ids, style)
        assert audio.shape == reference.shape and np.isfinite(audio).all()
        assert 0.5 < np.abs(audio).max() / np.abs(reference).max() < 2  # speech at the same level, not silence
    modified = peer.path.stat().st_mtime_ns
    assert onnx_fp32_export(model, info.fingerprint) == peer.path and peer.path.stat().st_mtime_ns == modified


@pytest.mark.slow
def test_bench_times_every_peer_in_one_process():
    """`bench` with every peer on a short text (torch.compile compiles for a minute or two: slow tier)."""
    from kokoro_tvm.commands.bench import backend_rows, bench
    from kokoro_tvm.peers.catalog import PEERS

    record = bench("Hello world.", runs=1, warmup=1, components=False)
    assert set(record["peers"]) == set(PEERS) and record["peers"]["torch_compile"]["setup_s"] > 0
    assert {row["backend"] for row in backend_rows(record)} == {*PEERS, "tvm"}
    assert all(value > 0 for value in record["tvm_vs"].values())
