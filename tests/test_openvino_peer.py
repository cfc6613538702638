"""The OpenVINO peer (kokoro_tvm.peers.openvino) and bench's quality columns (kokoro_tvm.evaluation.quality)."""

from __future__ import annotations

import numpy as np
import pytest


def _sine_model():
    import openvino as ov
    import openvino.opset15 as ops

    x = ops.parameter([4096], np.float32, name="x")
    return ov.Model([ops.sin(x)], [x], "sine")


@pytest.mark.parametrize("scale", [1.0, 100.0])
def test_polynomial_sine_matches_sin(scale):
    """Snake's alpha x sits within a few radians and the inverse STFT's phases within +-1; 100 covers both with
    room. Tolerance 2e-6: the Taylor tail is <= 5.7e-8 and the reduction by pi adds float32 rounding of k * pi,
    about |k| * 2^-24 * pi <= 32 * 1.9e-7 = 6e-6 relative to the reduced argument at |x| = 100, which the sine's
    slope (<= 1) carries into the result; we bar a quarter of that plus float32 rounding of the result."""
    import openvino as ov

    from kokoro_tvm.peers.openvino import polynomial_sine

    model = _sine_model()
    assert polynomial_sine(model) == 1
    assert "Sin" not in {node.get_type_name() for node in model.get_ordered_ops()}
    x = np.linspace(-scale, scale, 4096, dtype=np.float32)
    got = ov.Core().compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32"})([x])[0]
    error = np.abs(got - np.sin(x.astype(np.float64))).max()
    assert error <= (2e-7 if scale == 1.0 else 2e-6), error


def test_exact_length_lstms_is_undone_even_on_error():
    from kokoro_tvm.compiler import export
    from kokoro_tvm.peers.openvino import exact_length_lstms

    masked = export.masked_lstm
    with pytest.raises(RuntimeError), exact_length_lstms():
        assert export.masked_lstm is not masked
        raise RuntimeError("inside")
    assert export.masked_lstm is masked


def test_bad_settings_are_one_error_before_any_work():
    from kokoro_tvm.errors import InputError
    from kokoro_tvm.peers.openvino import OpenVinoKokoro

    for precision, sine in (("int8", "polynomial"), ("f32", "taylor")):
        with pytest.raises(InputError, match="OpenVINO precision"):
            OpenVinoKokoro(model=None, precision=precision, sine=sine)


def _record(peers: dict, tvm: dict, quality: dict) -> dict:
    return {
        "peers": {n: {"s": s} for n, s in peers.items()},
        "tvm_policies": {n: {"s": s} for n, s in tvm.items()},
        "quality": quality,
    }


def test_lead_counts_own_noise_peers_and_bars_same_noise_ones():
    from kokoro_tvm.evaluation.quality import lead_over_peers

    quality = {
        "openvino_bf16": {"same_noise": True, "pesq_wb": 4.1},  # fastest, but below the bar with our noise
        "openvino_f32": {"same_noise": True, "pesq_wb": 4.6},
        "ort_int8": {"same_noise": False, "pesq_wb": 3.9},  # its own noise: counted whatever its PESQ
    }
    record = _record(
        {"openvino_bf16": 2.0, "openvino_f32": 3.6, "ort_int8": 3.0}, {"tvm": 3.5, "tvm[int8]": 1.5}, quality
    )
    assert lead_over_peers(record) == {"tvm": "tvm[int8]", "peer": "ort_int8", "ratio": 2.0}
    quality["ort_int8"]["same_noise"] = True
    assert lead_over_peers(record)["peer"] == "openvino_f32"
    quality["openvino_f32"]["pesq_wb"] = None  # lengths differed: no aligned comparison, not qualified
    assert lead_over_peers(record) is None


@pytest.mark.real
def test_openvino_f32_speaks_like_pytorch(kmodel, default_voice):
    """OpenVINO f32 on "Hello world." against pt.dynamic fp32, both given bench's seeded noise through the peer
    catalog (PyTorch's own zero-noise audio scores PESQ-WB 4.22 and log-mel L1 0.011 against that reference, so a
    peer left on zero noise fails both checks): the same durations and audio as close as TVM fp32's
    (PESQ-WB tops out at 4.64; 4.5, above the fp32 bar of 4.4, leaves room for float32 reordering)."""
    from kokoro_tvm.evaluation.quality import audio_quality
    from kokoro_tvm.frontend.text import one_chunk
    from kokoro_tvm.peers.catalog import make_peer
    from kokoro_tvm.peers.openvino import PARTS
    from kokoro_tvm.reference.noise import SeededNoise
    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.runtime.devices import cpu_share

    model, info = kmodel
    chunk = one_chunk("Hello world.", "a", "test")
    style = default_voice.style(len(chunk.phonemes))
    peer = make_peer("openvino_f32", model, info.fingerprint, cpu_share(), default_voice, SeededNoise(0))
    audio = peer.speak(chunk.padded_ids, style)
    quality = audio_quality(run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(0)), audio, peer.durations)
    assert quality["durations_equal"] and quality["length_equal"], quality
    assert quality["pesq_wb"] >= 4.5 and quality["log_mel_l1"] < 0.01, quality
    assert peer.compile_s > 0 and {part for part, _length in peer.compiled} == set(PARTS)


@pytest.mark.real
def test_pytorch_bf16_is_judged_against_stock_fp32_drawing_the_same_noise(kmodel, default_voice, monkeypatch):
    """torch_seeded_quality's premise, checked: seeded alike, stock fp32 and autocast bf16 draw SineGen's noise
    (torch.rand, torch.randn_like) identically, in float32; only torch_bf16 is judged that way."""
    import torch

    from kokoro_tvm.evaluation.quality import torch_seeded_quality
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.peers.catalog import TorchBf16, TorchEager

    model, _ = kmodel
    (chunk,) = prepare(text="Seven small boats.")  # autocast keeps its durations ("Hello world." loses 600 samples)
    style = default_voice.style(len(chunk.phonemes))
    draws = []
    for name in ("rand", "randn_like"):
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda *a, _real=real, **k: draws.append(_real(*a, **k)) or draws[-1])

    def seeded(peer):  # as bench speaks each peer's untimed first call
        torch.manual_seed(3)
        return peer.speak(chunk.padded_ids, style)

    alone = {"torch_bf16": seeded(TorchBf16(model))}  # the judge speaks stock fp32 itself, after the same seed
    quality = torch_seeded_quality(model, chunk.padded_ids, style, alone, seed=3)
    assert list(quality) == ["torch_bf16"]
    half = len(draws) // 2  # the peer's draws, then the reference's
    assert half >= 3 and len(draws) == 2 * half
    pairs = zip(draws[:half], draws[half:], strict=True)
    assert all(a.dtype == b.dtype == torch.float32 and torch.equal(a, b) for a, b in pairs)
    q = quality["torch_bf16"]
    assert q["same_noise"] and q["length_equal"] and q["durations_equal"] is None
    # bf16 rounding of every matmul and conv: audibly different (PESQ-WB 3.77 on the bench sentence), never equal
    assert q["log_mel_l1"] > 0 and q["pesq_wb"] < 4.6
    # with the `torch` peer's own seeded audio the judge reuses it: the same verdict, and fp32 eager is not judged
    both = {"torch": seeded(TorchEager(model)), **alone}
    assert torch_seeded_quality(model, chunk.padded_ids, style, both, seed=3) == quality
