import pytest

from kokoro_tvm.weights.onnx_int8 import module_path


@pytest.mark.parametrize(
    "node_name, expected",
    [
        ("/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant", "text_encoder.cnn.0.0"),
        (
            "/encoder/bert/encoder/albert_layer_groups.0/albert_layers.0/attention/query_3/MatMul_quant",
            "bert.encoder.albert_layer_groups.0.albert_layers.0.attention.query",
        ),
        ("/encoder/bert_encoder/MatMul_quant", "bert_encoder"),
        ("/encoder/F0.1/conv1/Conv", "predictor.F0.1.conv1"),
        ("/encoder/N_proj/Conv", "predictor.N_proj"),
        ("/encoder/shared/LSTM", "predictor.shared"),
        ("/encoder/predictor/lstm/LSTM", "predictor.lstm"),
        ("/decoder/decoder/generator/ups.0/ConvTranspose", "decoder.generator.ups.0"),
        ("/somewhere/else/Conv", None),
    ],
)
def test_module_path_from_node_scope(node_name, expected):
    assert module_path(node_name) == expected
