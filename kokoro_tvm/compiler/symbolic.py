"""Symbolic-length export: one Relax module per component for every length that is a whole number of tiles.

The length axis is exported as `LENGTH_TILE * k` with `k` a torch.export `Dim` (inputs at 2F and 600F as
`2 * LENGTH_TILE * k` and `600 * LENGTH_TILE * k`: the registry's length relations). Every loop over the
length then has an extent like `16 * k`, which the CPU schedule rules (kokoro_tvm.compiler.schedule.cpu, proving with
compiler.sizes) can
prove divisible by their vector and register tiles for every k, so they tile and vectorize as they do a
static bucket; the padding a caller adds is at most LENGTH_TILE - 1 steps, masked exactly as in a bucket.

The Relax VM binds a symbolic size only from a plain dimension, never from `16 * k`, so the module gains one
input after the user inputs: `tiles`, the shape `(k,)` (`add_tile_count`); a caller passes it with the inputs
(`tile_count`). Memory planning gets k's upper bound from the `Dim` (`tir_var_upper_bound`).

TVM's buffer compaction does not know that k >= 1, so it sized a conv tile's register accumulator
`min(3840 * k + 32, 8)` instead of 8: a variable-size buffer that LLVM cannot keep in registers (the generator's
last stage ran at 37 instead of 99 GFLOP/s). `passes.CompactSymbolicBuffers` compacts the buffers of every PrimFunc
with a symbolic shape before TVM's lowering, without clipping to the buffer's extent (the schedule rules only
tile loops they proved divisible, so no tile runs past the end).

A symbolic build also holds the VM's `shape_func` (shape arithmetic on a heap of sizes), the one PrimFunc
without the `tirx.noalias` attribute. Compiled into the same LLVM module, it cost every kernel its alias
information (TVM's LLVM code generation: a measured effect, not a documented one): the conv accumulators were
stored to memory after every multiply-add and the inputs reloaded, half the static build's speed.
`passes.RestrictShapeFunctions` marks such a function noalias when it has a single buffer parameter (nothing it
could alias).
"""

from __future__ import annotations

from dataclasses import dataclass

from kokoro_tvm.components import LENGTH_TILE, SYMBOLIC_MAX_LENGTH, component

TILE_INPUT = "tiles"


@dataclass(frozen=True)
class SymbolicShape:
    """One component exported with its length symbolic: `tiles` * LENGTH_TILE steps, 1 <= tiles <= max."""

    component: str
    max_tiles: int
    batch: int = 1  # a fixed batch: B utterances of up to max_length steps each, every one with its own length

    @property
    def max_length(self) -> int:
        return self.max_tiles * LENGTH_TILE


def default_shape(name: str) -> SymbolicShape:
    return SymbolicShape(name, SYMBOLIC_MAX_LENGTH[component(name).axis] // LENGTH_TILE)


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
    inputs = example_inputs(ComponentShape(shape.component, 2 * LENGTH_TILE, shape.batch), dtype)
    with export_patches(model), torch.no_grad(), default_dtype(dtype):
        return torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes(shape))


def add_tile_count(mod):
    """`main` with one more input after the user inputs, `tiles: R.Shape([k])`, for the symbolic variable
    that the inputs' shapes only hold as multiples (the VM cannot solve `16 * k` for k). No-op for a module
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
