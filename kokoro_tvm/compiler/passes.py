"""Relax-level rewrites for speed. Each computes the same values as the graph it replaces (in exact arithmetic:
only the order of additions can change), and each is a plain Relax module pass used by kokoro_tvm.compiler.build.

- `PolyphaseConvTranspose`: TOPI lowers ConvTranspose1d(stride s) to a convolution over the input dilated with
  s-1 zeros between samples, so s-1 of every s multiply-adds are by zero (the generator's x10 and x6
  upsamplers, the iSTFT's hop-5 overlap-add). Written as one ordinary conv with s*C_out output channels (one
  phase of the output per group of channels) and an interleave, it does only the useful work.
- `AlignConvLengths`: the CPU conv kernel (kokoro_tvm.compiler.schedule.cpu) tiles the output time axis in whole
  vectors; a length that is not a multiple of the tile would scalarize the kernel. The conv's right padding
  is extended so its output length is a multiple of ALIGN, and the extra outputs are sliced off (they read
  only zeros past the end, so the kept outputs are unchanged).
- `VectorizableSine`: TVM lowers float32 `sin` to a scalar libm call per element (LLVM has no vector sin),
  and Snake evaluates one per element of every generator activation. It is replaced by elementwise
  arithmetic that vectorizes: argument reduction by pi and a Taylor polynomial, both in float64, rounded to
  float32 at the end (truncation error < 1e-11 for |r| <= pi/2, far below float32's half ulp, so results are
  the correctly rounded sine except at rare rounding ties). float64 graphs keep the exact `sin`.
- `IntegerPowers`: `power(x, 2)` and `power(x, 3)` (ALBERT's tanh-GELU cubes every activation) become products,
  which is what PyTorch computes for these exponents; TVM called `powf` per element.
"""

from __future__ import annotations

import math

import tvm
from tvm import relax
from tvm.relax.expr_functor import PyExprMutator, mutator

ALIGN = 32  # a whole number of the conv kernel's column tiles (one or two AVX-512 float32 vectors)


def _ints(values) -> list[int]:
    return [int(v) for v in values]


def _static_shape(expr) -> list[int] | None:
    try:
        return _ints(expr.ty.shape)
    except (AttributeError, TypeError, ValueError):
        return None


def _shape(expr) -> list | None:
    """The shape with static sizes as ints and symbolic ones (a length of k tiles) as TIR expressions."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape.values]


def static_value(expr) -> int | None:
    """A symbolic size expression reduced to a number, if it is one for every value of its variables."""
    if isinstance(expr, int):
        return expr
    from kokoro_tvm.compiler.symbolic import size_analyzer

    simplified = size_analyzer(expr).simplify(expr)
    return int(simplified) if isinstance(simplified, tvm.tirx.IntImm) else None


def alignment_pad(length, align: int = ALIGN) -> int:
    """Steps to add to a conv's output `length` so it is a whole number of `align`-step column tiles. For a
    symbolic length the pad must be one number for every tile count: `16k` needs a different pad to reach a
    multiple of 32 for odd and even k, so the tile is halved until the pad is a number (`16k + c` has one to
    a multiple of 16, the column tile of one AVX-512 float32 vector; `8k + c` to a multiple of 8, half one)."""
    while align > 1:
        extra = static_value(-length % align)
        if extra is not None:
            return extra
        align //= 2
    return 0


def slice_last_axis(x, begin, end):
    """x[..., begin:end] on the last axis, bounds known to be in range (no clamping terms in a symbolic
    length: they would leave shapes the later passes cannot match)."""
    return relax.op.strided_slice(x, axes=[2], begin=[begin], end=[end], assume_inbound=True)


@mutator
class _ConvRewriter(PyExprMutator):
    def __init__(self, mod, polyphase: bool, align: int | None):
        super().__init__(mod)
        self.polyphase, self.align = polyphase, align
        self.conv1d = tvm.ir.Op.get("relax.nn.conv1d")
        self.conv1d_transpose = tvm.ir.Op.get("relax.nn.conv1d_transpose")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        rewritten = None
        if self.polyphase and call.op.same_as(self.conv1d_transpose):
            rewritten = self._polyphase(call)
        elif self.align and call.op.same_as(self.conv1d):
            rewritten = self._aligned(call)
        return call if rewritten is None else rewritten

    def _aligned(self, call):
        attrs = call.attrs
        x_shape, w_shape = _shape(call.args[0]), _static_shape(call.args[1])
        if x_shape is None or w_shape is None or attrs.data_layout != "NCW" or attrs.kernel_layout != "OIW":
            return None
        (stride,), (dilation,) = _ints(attrs.strides), _ints(attrs.dilation)
        left, right = _ints(attrs.padding)
        length = (x_shape[2] + left + right - dilation * (w_shape[2] - 1) - 1) // stride + 1
        extra = alignment_pad(length, self.align)
        if not extra:
            return None
        wide = self.builder_.emit(
            relax.op.nn.conv1d(
                call.args[0],
                call.args[1],
                strides=stride,
                padding=(left, right + extra * stride),
                dilation=dilation,
                groups=int(attrs.groups),
                out_dtype=attrs.out_dtype,
            )
        )
        return slice_last_axis(wide, 0, length)

    def _polyphase(self, call):
        attrs = call.attrs
        x_shape, w_shape = _shape(call.args[0]), _static_shape(call.args[1])
        if x_shape is None or w_shape is None or int(attrs.groups) != 1:
            return None
        if attrs.data_layout != "NCW" or attrs.kernel_layout != "IOW" or _ints(attrs.dilation) != [1]:
            return None
        (s,) = _ints(attrs.strides)
        if s == 1:
            return None
        left, right = _ints(attrs.padding)
        (output_padding,) = _ints(attrs.output_padding)
        _, steps = x_shape[0], x_shape[2]
        c_in, c_out, k = w_shape
        length = (steps - 1) * s - left - right + k + output_padding
        taps = -(-(k + max(0, output_padding - right)) // s)  # taps per phase: ceil
        emit, op = self.builder_.emit, relax.op
        w = call.args[1]
        if taps * s > k:  # zero taps so every phase has the same count
            w = emit(op.nn.pad(w, pad_width=[0, 0, 0, 0, 0, taps * s - k]))
        # w[ci, co, j*s + r] -> W[co*s + r, ci, taps-1-j]
        w = emit(op.reshape(w, (c_in, c_out, taps, s)))
        w = emit(op.permute_dims(w, [1, 3, 0, 2]))
        w = emit(op.flip(w, axis=3))
        w = emit(op.reshape(w, (c_out * s, c_in, taps)))
        phases = emit(
            op.nn.conv1d(call.args[0], w, padding=(taps - 1, taps - 1), out_dtype=attrs.out_dtype)
        )  # [B, c_out*s, Q] with Q = steps + taps - 1; output y = q*s + r - left
        q = steps + taps - 1
        z = emit(op.reshape(phases, (x_shape[0], c_out, s, q)))
        z = emit(op.permute_dims(z, [0, 1, 3, 2]))
        z = emit(op.reshape(z, (x_shape[0], c_out, q * s)))
        return slice_last_axis(z, left, left + length)


def parameter_names(mutator: PyExprMutator, expr, depth: int | None = None) -> set[str]:
    """Names of the function parameters `expr` is computed from (within `depth` bindings, if given), through the
    bindings `mutator` has emitted so far."""
    names, stack = set(), [(expr, 0)]
    while stack:
        node, level = stack.pop()
        if depth is not None and level > depth:
            continue
        if isinstance(node, relax.Var):
            bound = mutator.lookup_binding(node)
            if bound is None:
                names.add(node.name)
                continue
            node, level = bound, level + 1
        if isinstance(node, relax.Call):
            stack.extend((arg, level) for arg in node.args)
        elif isinstance(node, relax.Tuple):
            stack.extend((field, level) for field in node.fields)
        elif isinstance(node, relax.TupleGetItem):
            stack.append((node.tuple_value, level))
    return names


# Taylor terms r - r^3/3! + ...: in float64, 9 (to r^17/17!: |error| <= (pi/2)^19 / 19! < 1e-11); in float32,
# for a sine whose result is rounded to bf16 next (kokoro_tvm.compiler.bf16), 6 (to r^11/11!: (pi/2)^13 / 13!
# < 6e-8, float32's half ulp at 1; bf16 keeps 8 bits)
SINE_TAYLOR_TERMS = {"float64": 9, "float32": 6}


@mutator
class _SineRewriter(PyExprMutator):
    def __init__(self, mod, arithmetic: str = "float64", select=None):
        super().__init__(mod)
        self.sin = tvm.ir.Op.get("relax.sin")
        self.arithmetic, self.select = arithmetic, select

    def visit_call_(self, call):
        call = super().visit_call_(call)
        if not call.op.same_as(self.sin) or str(call.args[0].ty.dtype) != "float32":
            return call
        if self.select is not None and not self.select(self, call.args[0]):
            return call
        op, emit = relax.op, self.builder_.emit
        arithmetic = self.arithmetic

        def const(v):
            return relax.const(v, arithmetic)

        x = emit(op.astype(call.args[0], arithmetic)) if arithmetic != "float32" else call.args[0]
        turns = emit(op.round(op.multiply(x, const(1 / math.pi))))  # k: nearest multiple of pi
        r = emit(op.subtract(x, op.multiply(turns, const(math.pi))))  # |r| <= pi/2
        r2 = emit(op.multiply(r, r))
        poly = const(0.0)
        for n in range(SINE_TAYLOR_TERMS[arithmetic] - 1, 0, -1):  # Horner in r^2 on the coefficients of r^(2n+1)
            poly = op.multiply(r2, op.add(const((-1) ** n / math.factorial(2 * n + 1)), poly))
        sine = op.add(r, op.multiply(r, poly))
        parity = op.subtract(turns, op.multiply(const(2.0), op.floor(op.multiply(turns, const(0.5)))))
        sign = op.subtract(const(1.0), op.multiply(const(2.0), parity))  # sin(r + k pi) = (-1)^k sin(r)
        result = emit(op.multiply(sign, sine))
        return op.astype(result, "float32") if arithmetic != "float32" else result


def VectorizableSine():  # noqa: N802
    return _rewriting_pass("VectorizableSine", _SineRewriter)


@mutator
class _PowerRewriter(PyExprMutator):
    def __init__(self, mod):
        super().__init__(mod)
        self.power = tvm.ir.Op.get("relax.power")

    def visit_call_(self, call):
        call = super().visit_call_(call)
        exponent = call.args[1] if call.op.same_as(self.power) else None
        if not isinstance(exponent, tvm.ir.expr.Constant) or exponent.value.numpy().size != 1:
            return call
        value = float(exponent.value.numpy().reshape(()))
        x = call.args[0]
        if value == 2.0:
            return relax.op.multiply(x, x)
        if value == 3.0:  # PyTorch's order for pow(x, 3): (x * x) * x
            return relax.op.multiply(relax.op.multiply(x, x), x)
        return call


def IntegerPowers():  # noqa: N802
    return _rewriting_pass("IntegerPowers", _PowerRewriter)


def _rewriting_pass(name: str, make_rewriter):
    """A module pass that runs the PyExprMutator `make_rewriter(mod)` over every Relax function."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        rewriter = make_rewriter(mod)
        for gvar, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return _pass


def PolyphaseConvTranspose():  # noqa: N802 (TVM pass naming)
    return _rewriting_pass("PolyphaseConvTranspose", lambda mod: _ConvRewriter(mod, polyphase=True, align=None))


def AlignConvLengths(align: int = ALIGN):  # noqa: N802
    return _rewriting_pass("AlignConvLengths", lambda mod: _ConvRewriter(mod, polyphase=False, align=align))
