"""What every Relax rewrite of kokoro_tvm.compiler.passes (and the packed-conv rewrites of compiler.bf16 and
compiler.int8) shares: the module-pass wrappers (a Relax rewrite, one operator's Relax rewrite, a TIR rewrite),
shapes read off expressions, the conv alignment arithmetic, the parameter names an expression is computed
from."""

from __future__ import annotations

import tvm
from tvm import relax, tirx
from tvm.relax.expr_functor import PyExprMutator, mutator

from kokoro_tvm.compiler.sizes import static_value

ALIGN = 32  # a whole number of the conv kernel's column tiles (one or two AVX-512 float32 vectors)
OPAQUE = 8  # TVM's OpPatternKind kOpaque, as a PrimFunc's "op_pattern": FuseOps never fuses it with its neighbours


def rewriting_pass(name: str, make_rewriter):
    """A module pass that runs the PyExprMutator `make_rewriter(mod)` over every Relax function."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        rewriter = make_rewriter(mod)
        for gvar, func in list(mod.functions_items()):
            if isinstance(func, relax.Function):
                rewriter.builder_.update_func(gvar, rewriter.visit_expr(func))
        return rewriter.builder_.get()

    return _pass


def call_rewriting_pass(name: str, op_name: str, rewrite, with_mutator: bool = False):
    """A Relax rewrite of one operator: every call of `op_name` (its arguments already rewritten) becomes
    `rewrite(call)`, which returns the call itself where it changes nothing; `with_mutator`: `rewrite(call,
    mutator)`, for one that emits or adds PrimFuncs through `mutator.builder_` or asks what an operand is
    computed from (`from_weights_alone`)."""

    @mutator
    class _CallRewriter(PyExprMutator):
        def __init__(self, mod):
            super().__init__(mod)
            self.op = tvm.ir.Op.get(op_name)
            self.weights: set[str] = set()  # the current function's weights (weight_names)

        def visit_function_(self, func):
            self.weights = weight_names(func)
            return super().visit_function_(func)

        def visit_call_(self, call):
            call = super().visit_call_(call)
            if not call.op.same_as(self.op):
                return call
            return rewrite(call, self) if with_mutator else rewrite(call)

    return rewriting_pass(name, _CallRewriter)


def primfunc_pass(name: str, rewrite):
    """A module pass that replaces every PrimFunc by `rewrite(func)` (which returns `func` itself where it changes
    nothing)."""

    @tvm.transform.module_pass(opt_level=0, name=name)
    def _pass(mod, _ctx):
        updates = {}
        for gvar, func in mod.functions_items():
            if isinstance(func, tirx.PrimFunc):
                rewritten = rewrite(func)
                if not rewritten.same_as(func):
                    updates[gvar] = rewritten
        for gvar, func in updates.items():
            mod[gvar] = func
        return mod

    return _pass


def ints(values) -> list[int]:
    return [int(v) for v in values]


def static_shape(expr) -> list[int] | None:
    try:
        return ints(expr.ty.shape)
    except (AttributeError, TypeError, ValueError):
        return None


def shape_of(expr) -> list | None:
    """The shape with static sizes as ints and symbolic ones (a length of k tiles) as TIR expressions."""
    shape = getattr(expr.ty, "shape", None)
    if shape is None:
        return None
    return [int(d) if isinstance(d, tvm.tirx.IntImm) else d for d in shape.values]


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


def weight_names(func) -> set[str]:
    """The names of a Relax function's weights: its parameters after the first `num_input` (none without it)."""
    inputs = func.attrs.get("num_input") if func.attrs is not None else None
    return {p.name for p in func.params[int(inputs) :]} if inputs is not None else set()


def from_weights_alone(mutator: PyExprMutator, expr) -> bool:
    """Whether `expr` is computed from some of the weights of the function `mutator` (a call_rewriting_pass's,
    with_mutator) is in, and nothing else: its work can be lifted to load."""
    names = parameter_names(mutator, expr)
    return bool(names) and names <= mutator.weights


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
