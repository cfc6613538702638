"""Real-weights tier: the embedded int8 export recovered onto KModel, checked against the ONNX file itself."""

import numpy as np
import pytest
import torch

from kokoro_tvm.paths import cache_dir
from kokoro_tvm.weights import onnx_int8
from kokoro_tvm.weights.resolve import EMBEDDED_FINGERPRINT, embedded_state_dicts, fingerprint, kmodel_skeleton

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def embedded():
    path, state_dicts = embedded_state_dicts()
    return state_dicts


@pytest.fixture(scope="module")
def onnx_initializers():
    import onnx
    from onnx import numpy_helper

    path = onnx_int8.assemble_embedded_onnx(cache_dir() / "weights" / "kokoro-v1.0.int8.onnx")
    graph = onnx.load(str(path)).graph
    return {t.name: numpy_helper.to_array(t) for t in graph.initializer}, graph


def test_fingerprint_and_counts(embedded):
    assert fingerprint(embedded) == EMBEDDED_FINGERPRINT
    assert sum(len(sd) for sd in embedded.values()) == 688
    assert sum(t.numel() for sd in embedded.values() for t in sd.values()) == 81_810_022


def test_strict_load_has_exactly_kmodels_keys(embedded):
    skeleton = kmodel_skeleton(disable_complex=False)
    for top, sd in embedded.items():
        result = getattr(skeleton, top).load_state_dict(sd, strict=True)
        assert not result.missing_keys and not result.unexpected_keys
        assert all(torch.isfinite(t).all() for t in sd.values()), f"non-finite values in {top}"


def _consumer(graph, op_type, scope_fragment):
    return next(n for n in graph.node if n.op_type == op_type and scope_fragment in n.name)


def test_matmul_integer_weight_is_onnx_arithmetic(embedded, onnx_initializers):
    """bert_encoder: int8 [in, out], per-column scale, zero point 0 -> weight = ((q - zp) * scale).T"""
    inits, graph = onnx_initializers
    node = _consumer(graph, "MatMulInteger", "/bert_encoder/")
    q, zp = inits[node.input[1]].astype(np.float32), inits[node.input[3]].astype(np.float32)
    scale = inits[node.input[1].removesuffix("_quantized") + "_scale"]
    assert not zp.any() and scale.shape == (q.shape[1],)
    np.testing.assert_array_equal(embedded["bert_encoder"]["weight"].numpy(), ((q - zp) * scale).T)


def test_conv_integer_weight_norm_reproduces_the_folded_weight(embedded, onnx_initializers):
    """text_encoder.cnn.0.0: uint8 per-tensor; g * v / |v| must give back the dequantized weight."""
    inits, graph = onnx_initializers
    node = _consumer(graph, "ConvInteger", "/text_encoder/cnn.0/")
    q, zp = inits[node.input[1]].astype(np.float32), inits[node.input[3]].astype(np.float32)
    scale = inits[node.input[1].removesuffix("_quantized") + "_scale"]
    expected = (q - zp) * scale
    sd = embedded["text_encoder"]
    v, g = sd["cnn.0.0.weight_v"], sd["cnn.0.0.weight_g"]
    effective = torch._weight_norm(v, g, 0).numpy()
    # one float32 division and multiplication per element: a few ulp of the largest weight
    np.testing.assert_allclose(effective, expected, rtol=0, atol=4 * np.finfo(np.float32).eps * np.abs(expected).max())


def test_lstm_gates_are_reordered_from_onnx_iofc(embedded, onnx_initializers):
    """DynamicQuantizeLSTM W [2, in, 4H] (gates i, o, f, c) -> weight_ih [4H, in] (gates i, f, g, o)."""
    inits, graph = onnx_initializers
    node = _consumer(graph, "DynamicQuantizeLSTM", "/text_encoder/lstm/")
    w_q = inits[node.input[1]].astype(np.float32)
    w_scale, w_zero = inits[node.input[8]], inits[node.input[9]].astype(np.float32)
    hidden = w_q.shape[2] // 4
    for direction, suffix in [(0, ""), (1, "_reverse")]:
        w = ((w_q[direction] - w_zero[direction]) * w_scale[direction]).T  # [4H, in] in i, o, f, c
        i, o, f, c = (w[k * hidden : (k + 1) * hidden] for k in range(4))
        got = embedded["text_encoder"][f"lstm.weight_ih_l0{suffix}"].numpy()
        np.testing.assert_array_equal(got, np.concatenate([i, f, c, o]))


def test_embedding_is_dequantized_after_gather(embedded, onnx_initializers):
    inits, graph = onnx_initializers
    node = next(n for n in graph.node if n.op_type == "Gather" and "/text_encoder/embedding/" in n.name)
    dequant = next(n for n in graph.node if n.op_type == "DequantizeLinear" and node.output[0] in n.input)
    q = inits[node.input[0]].astype(np.float32)
    expected = (q - inits[dequant.input[2]].astype(np.float32)) * inits[dequant.input[1]]
    np.testing.assert_array_equal(embedded["text_encoder"]["embedding.weight"].numpy(), expected)


def test_dead_weight_norm_channels_are_zero_not_nan(embedded):
    dead = 0
    for sd in embedded.values():
        for key, g in sd.items():
            if key.endswith("weight_g"):
                zero = g.reshape(-1) == 0
                dead += int(zero.sum())
                v = sd[key.removesuffix("_g") + "_v"]
                assert torch.isfinite(torch._weight_norm(v, g, 0)).all(), key
    assert dead == 94


def test_corrupt_cache_is_detected_and_rebuilt(tmp_path, monkeypatch, caplog):
    from kokoro_tvm.weights import resolve as weights

    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path))
    first_path, _ = weights.embedded_state_dicts()
    data = bytearray(first_path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # flip one byte in the middle of the tensors
    first_path.write_bytes(bytes(data))
    with caplog.at_level("WARNING"):
        path, state_dicts = weights.embedded_state_dicts()
    assert fingerprint(state_dicts) == EMBEDDED_FINGERPRINT
    assert any("rebuilding" in r.message for r in caplog.records)
