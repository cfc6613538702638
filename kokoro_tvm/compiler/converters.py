"""torch.export -> Relax: one converter table, passed to `from_exported_program(custom_convert_map=...)`.

Each key is the exact ATen overload name the importer looks up (`node.target.__name__`), each value a
`(node, importer) -> relax.Var` function. `unsupported_ops` lists every gap before conversion starts.
Which TVM 0.27 gaps still exist, with minimal reproductions, is in NOTES/tvm_gaps.md.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable

import torch
from tvm import relax, tirx
from tvm.relax.frontend.torch import from_exported_program
from tvm.relax.frontend.torch.exported_program_translator import ExportedProgramImporter

from kokoro_tvm.compiler.ops.lstm import ATEN_TARGET_NAME as MASKED_LSTM_TARGET
from kokoro_tvm.compiler.ops.lstm_tir import emit_masked_lstm
from kokoro_tvm.compiler.sizes import size_analyzer

Converter = Callable[[torch.fx.Node, object], relax.Var]


def _masked_lstm(node: torch.fx.Node, importer) -> relax.Var:
    x, lengths, *weights = (importer.env[a] for a in node.args)
    return emit_masked_lstm(importer.block_builder, x, lengths, weights)


def _clamp(node: torch.fx.Node, importer) -> relax.Var:
    """clamp(x, min=None|v, max=None|v) as maximum/minimum, so a missing bound is no bound.

    The stock converter turns a missing bound into +-inf, and LegalizeOps then fails on integer tensors
    ("Cannot convert infinity to BigInt"): upsample_linear1d's decomposition clamps int64 indices this way.
    """
    x = importer.env[node.args[0]]
    lower = node.args[1] if len(node.args) > 1 else node.kwargs.get("min")
    upper = node.args[2] if len(node.args) > 2 else node.kwargs.get("max")
    dtype = x.ty.dtype
    if lower is not None:
        x = importer.block_builder.emit(relax.op.maximum(x, _bound(lower, dtype, importer)))
    if upper is not None:
        x = importer.block_builder.emit(relax.op.minimum(x, _bound(upper, dtype, importer)))
    return x


def _bound(value, dtype: str, importer) -> relax.Expr:
    """A clamp bound as a scalar tensor: a number, or a symbolic size (an fx node the importer holds as a TIR
    expression: a replicate pad clamps its gather index to L - 1), made a tensor by a one-element arange."""
    if isinstance(value, torch.fx.Node):
        size = importer.env[value]
        ramp = importer.block_builder.emit(relax.op.arange(size, size + 1, 1, dtype))
        return importer.block_builder.match_cast(ramp, relax.TensorType([1], dtype))  # arange leaves it unknown
    return relax.const(value, dtype)


def _dtype_of(value) -> str:
    return str(value.ty.dtype)


def _matmul(node: torch.fx.Node, importer) -> relax.Var:
    """mm / bmm / matmul in the inputs' dtype (TVM 0.27's converters force out_dtype="float32")."""
    a, b = importer.retrieve_args(node)[:2]
    return importer.block_builder.emit(relax.op.matmul(a, b, out_dtype=_dtype_of(a)))


def _addmm(node: torch.fx.Node, importer) -> relax.Var:
    """beta * bias + alpha * (x @ w) in the inputs' dtype."""
    bias, x, w = importer.retrieve_args(node)[:3]
    alpha, beta = node.kwargs.get("alpha", 1), node.kwargs.get("beta", 1)
    dtype = _dtype_of(x)
    emit = importer.block_builder.emit
    product = emit(relax.op.matmul(x, w, out_dtype=dtype))
    if alpha != 1:
        product = emit(relax.op.multiply(product, relax.const(alpha, dtype)))
    if beta == 0:
        return product
    if beta != 1:
        bias = emit(relax.op.multiply(bias, relax.const(beta, dtype)))
    return emit(relax.op.add(bias, product))


def _linear(node: torch.fx.Node, importer) -> relax.Var:
    args = importer.retrieve_args(node)
    x, weight, bias = args[0], args[1], args[2] if len(args) > 2 else None
    return importer.block_builder.emit(relax.op.linear(x, weight, bias, out_dtype=_dtype_of(x)))


def _convolution(node: torch.fx.Node, importer) -> relax.Var:
    """1-D convolution and transposed convolution (all Kokoro has) in the inputs' dtype."""
    args = importer.retrieve_args(node)
    x, weight, bias, stride, padding, dilation, transposed, output_padding, groups = args[:9]
    if len(x.ty.shape) != 3:
        raise NotImplementedError(f"kokoro_tvm's convolution converter is 1-D only, got input {x.ty.shape}")
    common = dict(strides=stride, padding=padding, dilation=dilation, groups=groups, out_dtype=_dtype_of(x))
    if transposed:
        out = relax.op.nn.conv1d_transpose(
            x, weight, output_padding=output_padding, data_layout="NCW", kernel_layout="IOW", **common
        )
    else:
        out = relax.op.nn.conv1d(x, weight, data_layout="NCW", kernel_layout="OIW", **common)
    out = importer.block_builder.emit(out)
    if bias is None:
        return out
    return importer.block_builder.emit(relax.op.add(out, relax.op.reshape(bias, (1, -1, 1))))


def _normalize(importer, x, axes: list[int], eps: float) -> relax.Var:
    """(x - mean) / sqrt(var + eps) over `axes` with plain Relax arithmetic, in x's dtype.

    TVM 0.27 legalizes nn.layer_norm and nn.instance_norm for float32/float16 only; this form serves every
    dtype, so the float64 verification build checks the very graph the float32 build runs.
    """
    emit = importer.block_builder.emit
    dtype = _dtype_of(x)
    mean = emit(relax.op.mean(x, axes, keepdims=True))
    centered = emit(relax.op.subtract(x, mean))
    variance = emit(relax.op.mean(relax.op.multiply(centered, centered), axes, keepdims=True))
    return emit(relax.op.multiply(centered, relax.op.rsqrt(relax.op.add(variance, relax.const(eps, dtype)))))


def _affine(importer, x, weight, bias, shape) -> relax.Var:
    emit = importer.block_builder.emit
    if weight is not None:
        x = emit(relax.op.multiply(x, relax.op.reshape(weight, shape)))
    if bias is not None:
        x = emit(relax.op.add(x, relax.op.reshape(bias, shape)))
    return x


def _native_layer_norm(node: torch.fx.Node, importer) -> relax.Var:
    """native_layer_norm(x, normalized_shape, weight, bias, eps); the graph only reads output 0."""
    x = importer.env[node.args[0]]
    normalized = tuple(node.args[1])
    weight, bias = (importer.env.get(a) if a is not None else None for a in node.args[2:4])
    axes = list(range(-len(normalized), 0))
    return _affine(importer, _normalize(importer, x, axes, node.args[4]), weight, bias, normalized)


def _instance_norm(node: torch.fx.Node, importer) -> relax.Var:
    """_native_batch_norm_legit.no_stats(x [1, B*C, ...], weight, bias, training, momentum, eps): InstanceNorm
    as torch decomposes it; statistics over every axis but the channel axis 1."""
    x = importer.env[node.args[0]]
    weight, bias = (importer.env.get(a) if a is not None else None for a in node.args[1:3])
    eps = node.args[5] if len(node.args) > 5 else node.kwargs.get("eps", 1e-5)
    ndim = len(x.ty.shape)
    normalized = _normalize(importer, x, [0, *range(2, ndim)], eps)
    return _affine(importer, normalized, weight, bias, (1, -1) + (1,) * (ndim - 2))


def _float_unary(op: Callable) -> Converter:
    """sqrt / rsqrt in the dtype torch gave the result (node.meta["val"]): for an integer input torch promotes
    to the default dtype, while TVM 0.27's converters always cast to float32."""

    def convert(node: torch.fx.Node, importer) -> relax.Var:
        x = importer.env[node.args[0]]
        dtype = str(node.meta["val"].dtype).removeprefix("torch.")
        if _dtype_of(x) != dtype:
            x = importer.block_builder.emit(relax.op.astype(x, dtype))
        return importer.block_builder.emit(op(x))

    return convert


def _div_mode(node: torch.fx.Node, importer) -> relax.Var:
    """div(a, b, rounding_mode=None|'floor'|'trunc') with a Python scalar operand in the tensor's dtype.

    TVM 0.27 makes a scalar divisor an int32 constant, which an int64 tensor (frame lengths) cannot divide.
    """
    a, b = importer.retrieve_args(node)[:2]
    mode = node.kwargs.get("rounding_mode", node.args[2] if len(node.args) > 2 else None)
    emit = importer.block_builder.emit
    if not isinstance(b, relax.Expr):
        b = relax.const(b, _dtype_of(a))
    if not isinstance(a, relax.Expr):
        a = relax.const(a, _dtype_of(b))
    if mode == "floor":
        return emit(relax.op.floor_divide(a, b))
    quotient = emit(relax.op.divide(a, b))
    if mode == "trunc":
        return emit(relax.op.trunc(quotient))
    if mode is None:
        return quotient
    raise NotImplementedError(f"div rounding_mode {mode!r}")


def _slice(node: torch.fx.Node, importer) -> relax.Var:
    """x[start:end] on one axis; with symbolic bounds, a slice whose bounds are proved in range.

    With a symbolic length TVM 0.27 writes a slice's length as nested min/max/if_then_else of its bounds
    (`x[..., L - 1:]` becomes `min(max(if_then_else(k < 1, ...)))`): shape checks cannot match that to the
    plain length of the next operand (a `where` loses its shape, the next reshape fails) and
    LiftTransformParams cannot even copy it (`prim.if_then_else` has no type rule). Every symbolic size
    here is at least 1 (torch.export specializes sizes 0 and 1; our length tiles start at 1), so where the
    analyzer proves 0 <= start <= end <= size under that, the slice is emitted as in-bounds and its length
    is the simplified end - start. Anything else goes to the stock converter."""

    x = importer.env[node.args[0]]
    dim = node.args[1] if len(node.args) > 1 else 0
    bounds = [node.args[i] if len(node.args) > i else None for i in (2, 3)]
    step = node.args[4] if len(node.args) > 4 else 1
    start, end = (importer.env[v] if isinstance(v, torch.fx.Node) else v for v in bounds)
    shape = x.ty.shape
    if step != 1 or shape is None or all(isinstance(v, int | None) for v in (start, end)):
        return importer._slice(node)
    axis = dim % len(shape.values)
    size = shape.values[axis]
    start = 0 if start is None else start
    end = size if end is None or (isinstance(end, int) and end >= sys.maxsize) else end
    analyzer = size_analyzer(size, start, end)
    start, end = (tirx.const(v, "int64") if isinstance(v, int) else v for v in (start, end))
    if not analyzer.can_prove(tirx.all(start >= 0, start <= end, end <= size)):
        return importer._slice(node)
    start, end = analyzer.simplify(start), analyzer.simplify(end)
    if analyzer.can_prove_equal(start, 0) and analyzer.can_prove_equal(end, size):
        return x
    return importer.block_builder.emit(relax.op.strided_slice(x, [axis], [start], [end], assume_inbound=True))


CONVERTERS: dict[str, Converter] = {
    "slice.Tensor": _slice,
    "div.Tensor_mode": _div_mode,
    "sqrt.default": _float_unary(relax.op.sqrt),
    "rsqrt.default": _float_unary(relax.op.rsqrt),
    "native_layer_norm.default": _native_layer_norm,
    "_native_batch_norm_legit.no_stats": _instance_norm,
    MASKED_LSTM_TARGET: _masked_lstm,
    "clamp.default": _clamp,
    "mm.default": _matmul,
    "bmm.default": _matmul,
    "matmul.default": _matmul,
    "addmm.default": _addmm,
    "linear.default": _linear,
    "convolution.default": _convolution,
}


@functools.cache
def _builtin_ops() -> frozenset[str]:

    return frozenset(ExportedProgramImporter().create_convert_map())


def graph_ops(exported_program: torch.export.ExportedProgram, decompose: bool = True) -> set[str]:
    """Every call_function target name in the (decomposed, as the importer sees it) graph."""
    ep = exported_program.run_decompositions() if decompose else exported_program
    return {n.target.__name__ for n in ep.graph.nodes if n.op == "call_function"}


def missing_ops(ops: set[str], converters: dict[str, Converter] | None = None) -> list[str]:
    """Of `ops` (a decomposed graph's, `graph_ops`), those neither TVM's importer nor `converters` (default: our
    table) handle, sorted. One decomposition serves several tables: it is most of an import's time."""
    table = CONVERTERS if converters is None else converters
    return sorted(ops - _builtin_ops() - set(table))


def unsupported_ops(
    exported_program: torch.export.ExportedProgram, converters: dict[str, Converter] | None = None
) -> list[str]:
    """Ops that neither TVM's importer nor `converters` (default: our table) handle, sorted."""
    return missing_ops(graph_ops(exported_program), converters)


def to_relax(
    exported_program: torch.export.ExportedProgram, keep_params_as_input: bool = False, decomposed: bool = False
):
    """Import with our converter table; fails first with the full list of unsupported ops, if any.
    With keep_params_as_input the weights stay function parameters (after the user inputs); `decomposed`: the
    program has had PyTorch's decompositions run already (`build.decomposed_program`)."""

    # PyTorch's decompositions run once, here: the check and the importer read the same decomposed graph
    # (run twice, they were half of every import: 16 of ALBERT's 35 s, more for the decoder)
    program = exported_program if decomposed else exported_program.run_decompositions()
    missing = missing_ops(graph_ops(program, decompose=False))
    if missing:
        raise NotImplementedError(f"no converter for {len(missing)} op(s): {', '.join(missing)}")
    return from_exported_program(
        program,
        custom_convert_map=CONVERTERS,
        keep_params_as_input=keep_params_as_input,
        run_ep_decomposition=False,
    )
