"""Each custom converter against PyTorch, in float64 where the stock converter would lose precision."""

import pytest
import torch
import tvm

from kokoro_tvm.compiler.converters import CONVERTERS, unsupported_ops
from kokoro_tvm.compiler.ops.lstm import masked_lstm
from kokoro_tvm.studies.converter_cases import CONVERTER_CASE_NAMES, Lambda, check_converter_case, converter_case


@pytest.mark.parametrize("name", CONVERTER_CASE_NAMES)
def test_converter_float64_matches_torch(name):
    result = check_converter_case(name)
    assert result["dtype"] == "float64"
    # float64 end to end: only summation order differs, so agreement to ~1e-15 relative is expected
    assert result["max_abs_error"] <= 1e-12 * max(1.0, result["max_abs_value"])


def test_stock_clamp_still_fails_without_our_converter():
    """The reason for our clamp entry: without it, legalization of an int64 clamp with one bound dies."""
    from tvm.relax.frontend.torch import from_exported_program

    module = converter_case("linear_interpolate_clamp")[0]
    ep = torch.export.export(module, (torch.randn(1, 2, 12),))
    with pytest.raises(Exception, match="infinity"):
        tvm.compile(from_exported_program(ep), target=tvm.target.Target({"kind": "llvm"}))


def test_unsupported_ops_lists_every_gap_before_conversion():
    lstm = torch.nn.LSTM(3, 2, 1, batch_first=True, bidirectional=True)
    module = Lambda(lambda m, x: masked_lstm(x, torch.tensor([4]), m[0]), lstm)
    ep = torch.export.export(module, (torch.randn(1, 4, 3),))
    assert unsupported_ops(ep, converters={}) == ["masked_lstm.default"]
    assert unsupported_ops(ep) == []


def test_table_keys_are_exact_overload_names():
    """The importer looks converters up by `<op>.<overload>` as the exported graph names them: a key must be a
    real overload of an ATen op or of our own masked LSTM, with the overload spelled exactly."""
    from kokoro_tvm.compiler.ops.lstm import masked_lstm_op

    masked_lstm_op()  # registers torch.ops.kokoro_tvm.masked_lstm
    for key in CONVERTERS:
        op, overload = key.split(".")
        packet = getattr(torch.ops.aten, op, None) or getattr(torch.ops.kokoro_tvm, op)
        assert overload in packet.overloads(), (key, packet.overloads())
        assert getattr(packet, overload)._overloadname == overload


TAKE_CASES = [  # (data shape, indices shape, axis): ALBERT's embeddings, the upsampler's gather, a 2-D index
    ((178, 768), (1, 43), 0),
    ((1, 9, "n + 1"), ("2 * n",), -1),
    ((2, 5, 9), (3, 4), 1),
]


@pytest.mark.parametrize("data_shape, index_shape, axis", TAKE_CASES)
def test_our_take_is_tvms_fast_take_without_its_warning(data_shape, index_shape, axis, capfd):
    """The pipeline legalizes `relax.take` by compiler.ops.take: the PrimFunc must be the one TVM's own
    legalization gives (so no build's code changes) and TVM's per-take "Fast mode segfaults" line must be gone."""
    from tvm import relax, tirx

    from kokoro_tvm.compiler.pipeline import phases
    from kokoro_tvm.compiler.targets import host_target

    n = tirx.Var("n", "int64")
    size = {"n + 1": n + 1, "2 * n": 2 * n}

    def shape(dims):
        return [size.get(d, d) for d in dims]

    bb = relax.BlockBuilder()
    data = relax.Var("data", relax.TensorType(shape(data_shape), "float32"))
    indices = relax.Var("indices", relax.TensorType(shape(index_shape), "int64"))
    with bb.function("main", [data, indices]):
        bb.emit_func_output(bb.emit(relax.op.take(data, indices, axis=axis)))
    mod = bb.get()
    legalize = dict(phases(host_target()))["legalize"][0]
    capfd.readouterr()
    ours = legalize(mod)
    assert "Fast mode" not in capfd.readouterr().err
    stock = relax.transform.LegalizeOps()(mod)
    assert "Fast mode segfaults" in capfd.readouterr().err  # what it replaces: TVM's own line, one per take
    tvm.ir.assert_structural_equal(ours, stock)
