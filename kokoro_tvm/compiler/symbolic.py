"""Symbolic-length export: one Relax module per component for every length that is a whole number of tiles.

The length axis is exported as `LENGTH_TILE * k` with `k` a torch.export `Dim` (inputs at 2F and 600F as
`2 * LENGTH_TILE * k` and `600 * LENGTH_TILE * k`: the registry's length relations). Every loop over the
length then has an extent like `32 * k`, which the CPU schedule rules (kokoro_tvm.compiler.schedule.cpu) can
prove divisible by their vector and register tiles for every k, so they tile and vectorize as they do a
static bucket; the padding a caller adds is at most LENGTH_TILE - 1 steps, masked exactly as in a bucket.

The Relax VM binds a symbolic size only from a plain dimension, never from `32 * k`, so the module gains one
input after the user inputs: `tiles`, the shape `(k,)` (`add_tile_count`); a caller passes it with the inputs
(`tile_count`). Memory planning gets k's upper bound from the `Dim` (`tir_var_upper_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_tvm.components import TOKENS, component
from kokoro_tvm.config import MAX_PHONEMES

LENGTH_TILE = 32  # the CPU conv kernel's column tile and the row tile's largest choice: every split divides
MAX_TOKEN_TILES = -(-MAX_PHONEMES // LENGTH_TILE)  # one utterance's tokens, pads included, fit
MAX_FRAME_TILES = 160  # 5120 aligned frames: the longest bucket the fp64 parity checks cover
TILE_INPUT = "tiles"


@dataclass(frozen=True)
class SymbolicShape:
    """One component exported with its length symbolic: `tiles` * LENGTH_TILE steps, 1 <= tiles <= max."""

    component: str
    max_tiles: int

    @property
    def max_length(self) -> int:
        return self.max_tiles * LENGTH_TILE


def size_analyzer(*exprs):
    """TVM's arithmetic analyzer knowing that every free variable of `exprs` is a size of at least 1 (our
    symbolic sizes are tile counts, `Dim(min=1)`; torch.export specializes sizes 0 and 1 otherwise). The
    schedule rules, the Relax rewrites and the slice converter prove their facts with it."""
    import tvm
    from tvm import sym, tirx

    analyzer = sym.Analyzer()
    for expr in exprs:
        if not isinstance(expr, int):
            for var in tirx.analysis.undefined_vars(expr):
                analyzer.bind(var, tvm.ir.Range.from_min_extent(1, 1 << 40))
    return analyzer


def default_shape(name: str) -> SymbolicShape:
    return SymbolicShape(name, MAX_TOKEN_TILES if component(name).axis == TOKENS else MAX_FRAME_TILES)


def tile_count(length: int) -> int:
    """How many tiles a length needs (the caller pads to tile_count * LENGTH_TILE)."""
    if length < 1:
        raise ValueError(f"length must be positive, got {length}")
    return -(-length // LENGTH_TILE)


def dynamic_shapes(shape: SymbolicShape) -> tuple:
    """torch.export dynamic_shapes for the component: every length axis a multiple of one tile count."""
    from torch.export import Dim

    tiles = Dim("tiles", min=1, max=shape.max_tiles)
    return tuple(
        None if i.length_axis is None else {i.length_axis: (LENGTH_TILE * i.length_multiple) * tiles}
        for i in component(shape.component).inputs
    )


def export_symbolic(model, shape: SymbolicShape):
    """torch.export the component with a symbolic length, under export_patches, in the model's dtype."""
    import torch

    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    dtype = next(model.parameters()).dtype
    module = component_module(model, shape.component)
    inputs = example_inputs(ComponentShape(shape.component, 2 * LENGTH_TILE), dtype)
    with export_patches(model), torch.no_grad(), default_dtype(dtype):
        return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes(shape))


def add_tile_count(mod):
    """`main` with one more input after the user inputs, `tiles: R.Shape([k])`, for the symbolic variable
    that the inputs' shapes only hold as multiples (the VM cannot solve `32 * k` for k). No-op for a module
    whose input shapes are static or plain variables."""
    import tvm
    from tvm import relax, tirx

    func = mod["main"]
    inputs = int(func.attrs["num_input"])
    plain, scaled = set(), set()
    for param in func.params[:inputs]:
        for size in getattr(param.ty, "shape", None).values if getattr(param.ty, "shape", None) else ():
            if isinstance(size, tirx.Var):
                plain.add(size.name)
            elif not isinstance(size, tirx.IntImm):
                scaled.update((v.name, v) for v in tirx.analysis.undefined_vars(size))
    missing = sorted({name: var for name, var in scaled if name not in plain}.items())
    if not missing:
        return mod
    if len(missing) > 1:
        raise ValueError(f"expected one symbolic length, found {[name for name, _ in missing]}")
    tiles = relax.Var(TILE_INPUT, relax.ShapeType([missing[0][1]]))
    params = [*func.params[:inputs], tiles, *func.params[inputs:]]
    updated = relax.Function(params, func.body, func.ret_ty, func.is_pure, func.attrs, func.span)
    mod = tvm.IRModule(dict(mod.functions_items()), attrs=mod.attrs)
    mod["main"] = updated.with_attr("num_input", inputs + 1)
    return mod


def symbolic_relax_module(model, shape: SymbolicShape):
    """Export and import one component with a symbolic length: (module, exported program, seconds)."""
    import time

    from kokoro_tvm.compiler.converters import to_relax
    from kokoro_tvm.compiler.pipeline import lift_weight_transforms
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    t0 = time.perf_counter()
    exported = export_symbolic(model, shape)
    t1 = time.perf_counter()
    with default_dtype(next(model.parameters()).dtype):
        mod = lift_weight_transforms(add_tile_count(to_relax(exported, keep_params_as_input=True)))
    return mod, exported, {"export": t1 - t0, "import": time.perf_counter() - t1}
