"""`Contraction`: one multiply-accumulate reduction (conv1d, conv-transpose, matmul) plus injective producers and
an epilogue, as a register-blocked direct kernel. The output is tiled ROWS x COLS (rows = output channels or
matmul rows, cols = the contiguous output axis; 16 x 1 AVX-512 vector, or 8 x 2 where 16 weight rows would share
one L1 set; AVX2: 6 x 2 or 4 x 2), accumulated in a local tile the compiler keeps in registers over the whole
reduction, the epilogue (bias, masking, Snake, leaky ReLU...) applied to the tile while it is hot, and the tiles
spread over the cores. Packed bf16 / int8 convs (kokoro_tvm.compiler.bf16, compiler.int8) have their (columns x
channel group) step tensorized as one vdpbf16ps or vpdpbusd.

The conv tile assumes the contiguous output axis is a multiple of COLS; kokoro_tvm.compiler.passes.align_conv_lengths'
`AlignConvLengths` arranges that. `Contraction.schedule` reads as its steps: match, tile choice, epilogue
folding, loop order, epilogue placement, vector and tensorized steps, and the mark that has the epilogue's
lines prefetched as each tile starts (kokoro_tvm.compiler.passes.EpiloguePrefetch).
"""

from __future__ import annotations

import importlib
import itertools
from dataclasses import dataclass

import tvm
from tvm import s_tir, tirx
from tvm.s_tir.dlight.base.common_schedules import try_inline

from kokoro_tvm.compiler.schedule.cpu.base import (
    CPURule,
    elementwise_loops,
    extent,
    operand_bytes,
    same_positions,
    vectorize_inner,
)
from kokoro_tvm.compiler.sizes import divides
from kokoro_tvm.compiler.targets import CPUGeometry
from kokoro_tvm.compiler.tuning import record as tuning

# Register tiles (rows x vectors of columns) for targets with 32 vector registers (AVX-512, NEON), 16
# accumulators either way; targets with 16 registers (AVX2, SSE) get SMALL_TILE, 8 accumulators. 16 x 1 measured faster
# than 8 x 2 on every generator conv on AVX-512 (one whole-cache-line input load per reduction step;
# NOTES/performance.md), but its 16 broadcast rows must not collide in L1: rows whose stride is a multiple of
# (L1 sets x line) bytes (4 KiB here: 1024 input channels x k3, 512 x k2) all map to one cache set and ran at
# half speed; those get 8 x 2. Vector width and cache geometry come from the target
# (kokoro_tvm.compiler.targets.cpu_geometry).
WIDE_TILE, NARROW_TILE = (16, 1), (8, 2)
# 16 registers: 6 rows x 2 vectors, 12 accumulators (+ 2 column vectors + 1 broadcast row): an FMA takes 5 cycles
# and two issue per cycle, so 10 independent sums keep both pipes busy; 8 (4 x 2) reach 4/5 of that (Zen 2: 83
# against 107 GFLOP/s a core). Rows not a multiple of 6 keep 4 x 2, whose step (2 column loads, 4 broadcasts per
# 8 FMAs) two load ports issue in time, unlike 8 x 1's 9 loads; `passes.AlignConvRows` pads the convs' channels
# to a multiple of 6 on these targets (NOTES/performance.md, "Zen 2"). 16 accumulators do not fit.
SMALL_TILE, ALIGNED_SMALL_TILE = (4, 2), (6, 2)
PREFETCH_MARK = "kokoro_prefetch_epilogue"  # on a tile's reduction loop: the epilogue block whose lines to prefetch
ROW_CHOICES = (16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)  # the largest divisor of the row extent


def _tiles(geometry: CPUGeometry, row_extent) -> tuple[tuple[int, int], tuple[int, int]]:
    if geometry.vector_registers >= 32:
        return WIDE_TILE, NARROW_TILE
    small = ALIGNED_SMALL_TILE if divides(ALIGNED_SMALL_TILE[0], row_extent) else SMALL_TILE
    return small, small  # 4 or 6 rows: no L1 set collisions to avoid


def _is_multiply_accumulate(sch: s_tir.Schedule, block) -> bool:
    """out = out + a * b with a and b read from two different buffers."""
    stmt = sch.get(block)
    if not isinstance(body := stmt.body, tirx.BufferStore) or not isinstance(body.value, tirx.Add):
        return False
    update = body.value.b if isinstance(body.value.a, tvm.ir.TensorLoad) else body.value.a
    while isinstance(update, tirx.Cast):
        update = update.value
    return isinstance(update, tirx.Mul) and len({r.source.name for r in stmt.reads} - {stmt.writes[0].source.name}) >= 2


# Packed dot-product steps: (operand dtypes, accumulator dtype, channels per lane) -> the module whose
# register_intrinsic(lanes) names the tensor intrinsic of one (columns x channel group) step
PACKED_STEPS = {
    (("uint16", "uint16"), "float32", 2): "kokoro_tvm.compiler.bf16",  # vdpbf16ps
    (("int8", "uint8"), "int32", 4): "kokoro_tvm.compiler.int8",  # vpdpbusd
}


def _packed_step(sch: s_tir.Schedule, block, reduce: list, lanes: int):
    """For a kokoro_tvm.compiler.bf16 conv (two uint16 bf16 bit patterns, float32 accumulation, channel pairs)
    or a compiler.int8 conv (uint8 x int8, int32 accumulation, channel quads), with the channel-group axis last
    and 16 lanes (AVX-512): the module that registers its step's tensor intrinsic. None otherwise."""
    stmt = sch.get(block)
    operands = tuple(sorted(str(r.source.dtype) for r in stmt.reads if r.source.name != stmt.writes[0].source.name))
    if lanes != 16 or len(reduce) < 2 or len(operands) != 2:
        return None
    name = PACKED_STEPS.get((operands, str(stmt.writes[0].source.dtype), extent(sch, reduce[-1])))
    return importlib.import_module(name) if name else None


def _set_collisions(stride_bytes: int, rows: int, geometry: CPUGeometry) -> int:
    """The most of `rows` rows, `stride_bytes` apart, that share one L1 cache set."""
    sets: dict[int, int] = {}
    for r in range(rows):
        index = (r * stride_bytes // geometry.cache_line) % geometry.l1_sets
        sets[index] = sets.get(index, 0) + 1
    return max(sets.values())


@dataclass
class _Match:
    """The reduction block and the loops around it, as `Contraction` found them."""

    main: object  # the reduction's BlockInfo
    producers: list
    consumers: list
    outer: list
    row: object
    col: object
    reduce: list


@dataclass
class _Tile:
    rows: int
    cols: int
    lanes: int
    rows_outer: bool  # walk the columns of one row slab (the row operand is the larger)
    packed: object  # the bf16 / int8 module whose step is tensorized, or None


def match_contraction(sch: s_tir.Schedule, infos: list) -> _Match | None:
    """One multiply-accumulate reduction with its spatial axes first (a row and a column axis at least), and only
    injective blocks before and after it."""
    reductions = [b for b in infos if b.is_reduction()]
    if len(reductions) != 1 or not _is_multiply_accumulate(sch, reductions[0].block_rv):
        return None
    main = reductions[0]
    kinds = main.dom_kind()
    if kinds.rstrip("R") != kinds.replace("R", "") or kinds.count("S") < 2:
        return None
    position = infos.index(main)
    producers, consumers = infos[:position], infos[position + 1 :]
    if any(not b.is_injective() for b in producers + consumers):
        return None
    loops = sch.get_loops(main.block_rv)
    spatial, reduce = loops[: kinds.count("S")], loops[kinds.count("S") :]
    *outer, row, col = spatial
    return _Match(main, producers, consumers, outer, row, col, reduce)


def contraction_class(sch: s_tir.Schedule, found: _Match) -> str | None:
    """What a tuning record keys this reduction's schedule by: operand dtypes, row extent, reduction extents
    ("float32xfloat32:256:256x7"); None for a symbolic row or reduction extent (kokoro_tvm.compiler.tuning)."""
    rows, reduce = extent(sch, found.row), [extent(sch, r) for r in found.reduce]
    if not isinstance(rows, int) or not all(isinstance(r, int) for r in reduce):
        return None
    stmt = sch.get(found.main.block_rv)
    operands = sorted(str(r.source.dtype) for r in stmt.reads if r.source.name != stmt.writes[0].source.name)
    return f"{'x'.join(operands)}:{rows}:{'x'.join(str(r) for r in reduce)}"


def _choose_tile(sch: s_tir.Schedule, found: _Match, geometry: CPUGeometry) -> _Tile | None:
    """The register tile (rows x columns), its walking order and the packed step, or None for a ragged column
    axis (which would scalarize the whole kernel). Where the tuning record in use (kokoro_tvm.compiler.tuning)
    has this class, its measured tile and order; else the heuristics below, on the target's geometry."""
    block = found.main.block_rv
    lanes = geometry.lanes(sch.get(block).writes[0].source.dtype.bits)
    col_extent, row_extent = extent(sch, found.col), extent(sch, found.row)
    operands = operand_bytes(sch, block, len(found.outer) + 2)
    record = tuning.active()
    tuned = record.choice(key) if record is not None and (key := contraction_class(sch, found)) else None
    wide, narrow = _tiles(geometry, row_extent)
    max_rows, vectors = (tuned.rows, tuned.vectors) if tuned else wide
    if (
        tuned is None
        and operands is not None
        and _set_collisions(operands["row_stride_bytes"], max_rows, geometry) > (geometry.l1_ways // 2)
    ):
        max_rows, vectors = narrow
    cols = vectors * lanes
    while cols > lanes and not divides(cols, col_extent):
        cols //= 2
    if not divides(cols, col_extent) and divides(lanes // 2, col_extent):
        # a length of 8k steps (the frame-rate convs of a symbolic build): half-width vectors, which this
        # CPU issues at the same FLOP rate (Zen 4 runs a 512-bit FMA as two 256-bit halves); the decoder
        # at 168 frames took 1.13 s, between its 1.10 s at 160 and 1.20 s at 176 (NOTES/dynamic_shapes.md)
        cols = lanes // 2
    if not divides(cols, col_extent):
        return None
    rows = next(r for r in ROW_CHOICES if divides(r, row_extent) and r <= max_rows)
    # fewer rows than the tile holds (a symbolic row axis divides by 8 only: ALBERT's and the projections'
    # matmuls over tokens): more column vectors instead, so the tile keeps its accumulators busy; ALBERT's
    # feed-forward matmul (768 -> 2048, 176 tokens, its 12 layers) took 44 ms as 8 x 1 vectors, 34 ms as 8 x 2
    # (`python -m kokoro_tvm.studies.dynamic_shapes --kernels albert:176`)
    accumulators = wide[0] * wide[1]
    if tuned is None and accumulators // 4 <= rows and rows * (cols // lanes) < accumulators:
        wider = accumulators // rows * lanes
        if divides(wider, col_extent):
            cols = wider
    # tile order: walk the rows of one column slab (the slab stays in cache, the row operand streams), unless
    # the row operand (conv weights) is the larger one: then walk the columns of one row slab
    rows_outer = operands is not None and operands["row_bytes"] > operands["col_bytes"]
    if tuned is not None:
        rows_outer = tuned.rows_outer
    # bf16 pairs (kokoro_tvm.compiler.bf16) or int8 quads (compiler.int8): the channel-group axis goes
    # innermost, under the column vector, and the (16 columns x 1 group) step becomes one vdpbf16ps or
    # vpdpbusd (8 columns: the ymm form)
    packed = _packed_step(sch, block, found.reduce, lanes)
    return _Tile(rows, cols, lanes, rows_outer, packed)


def _fold_epilogue(sch: s_tir.Schedule, found: _Match) -> bool:
    """Fold the injective chain after the reduction into its last block, including side inputs computed before
    the reduction (a residual, a mask) that only the epilogue reads; those leave `found.producers`. False where
    that fails. (Inlined even when read twice: epilogues are a few cheap operations deep.)"""
    main_inputs = {r.source.name for r in sch.get(found.main.block_rv).reads}
    side = [b for b in found.producers if sch.get(b.block_rv).writes[0].source.name not in main_inputs]
    found.producers = [b for b in found.producers if b not in side]
    return not try_inline(sch, side + found.consumers[:-1])


def _order_loops(sch: s_tir.Schedule, found: _Match, tile: _Tile, reduce: list, pair: list):
    """Split the output into tiles and order the loops: tile loops (the outer ones in parallel), the reduction,
    then the register tile. Returns (the loop the accumulator lives under, row_i, col_i)."""
    row_extent, col_extent = extent(sch, found.row), extent(sch, found.col)
    row_o, row_i = sch.split(found.row, [None, tile.rows])
    col_o, col_i = sch.split(found.col, [None, tile.cols])
    outer = found.outer
    if isinstance(row_extent, int) and isinstance(col_extent, int):
        first, second = (row_o, col_o) if tile.rows_outer else (col_o, row_o)
        sch.reorder(*outer, first, second, *reduce, row_i, col_i, *pair)
        anchor = sch.fuse(*outer, first, second)  # one task per tile; neighbours share a slab
        sch.parallel(anchor)
        return anchor, row_i, col_i
    # A symbolic tile loop is never fused: dividing a fused index by a symbolic extent (4k + 2) is beyond the
    # region analysis, which then sized the accumulator as the whole output on the stack (a 9 s kernel that
    # overwrote memory). Static tile loops outside in parallel, the symbolic one inside, and the tile's
    # accumulator placed under it.
    only_cols_static = isinstance(col_extent, int) and not isinstance(row_extent, int)
    only_rows_static = isinstance(row_extent, int) and not isinstance(col_extent, int)
    # static outer loops (a build's batch, 1 or B utterances): each utterance's conv walked as batch 1's is, one
    # after another; with the batch in the parallel rows-outside order a batch-4 decoder ran 3.3x slower than four
    # batch-1 calls (python -m kokoro_tvm.studies.batching --batches 1,4 --sentences 6 --rounds 1, Emerald Rapids)
    static_outer = all(isinstance(extent(sch, loop), int) for loop in outer)
    if only_rows_static and not tile.rows_outer and static_outer:
        # a conv over a symbolic length whose input outweighs its weights: walk the rows of one column slab as a
        # static build does (each input slab read once, the weights stay in cache), the symbolic column-tile
        # loop in parallel on its own. Rows outside instead stream the whole input once per row slab: 102-104
        # against 131-133 GFLOP/s (128 ch, k7, 19,232 steps), 90 against 107 (512 ch, k3).
        first, second = col_o, row_o
        sch.reorder(*outer, first, second, *reduce, row_i, col_i, *pair)
        sch.parallel(first)
        return second, row_i, col_i
    first, second = (col_o, row_o) if only_cols_static else (row_o, col_o)
    sch.reorder(*outer, first, second, *reduce, row_i, col_i, *pair)
    # the leading static loops (both tile loops symbolic, as attention scores T x T: the outer ones)
    parallel = list(itertools.takewhile(lambda loop: isinstance(extent(sch, loop), int), [*outer, first]))
    if parallel:
        sch.parallel(sch.fuse(*parallel) if len(parallel) > 1 else parallel[0])
    return second, row_i, col_i


def _place_epilogue(sch: s_tir.Schedule, found: _Match, anchor, lanes: int) -> bool:
    """The accumulator tile under `anchor`, and the epilogue applied to it there when it reads the reduction at
    its own positions; otherwise the epilogue is its own pass over the finished reduction."""
    consumers = found.consumers
    # decided before cache_write, which makes the main block write the accumulator instead of the buffer the
    # epilogue reads (checked after it, every epilogue ran as its own pass over the whole output)
    per_tile_epilogue = bool(consumers) and same_positions(sch, consumers[-1].block_rv, found.main.block_rv)
    accumulator = sch.cache_write(found.main.block_rv, 0, "local")
    sch.reverse_compute_at(accumulator, anchor)
    if per_tile_epilogue:
        sch.reverse_compute_at(consumers[-1].block_rv, anchor)
        vectorize_inner(sch, consumers[-1].block_rv, lanes)
        sch.compute_inline(accumulator)  # the epilogue reads the accumulator tile: no copy of it
    else:
        vectorize_inner(sch, accumulator, lanes)
        if consumers:
            elementwise_loops(sch, consumers[-1].block_rv, lanes)
    return per_tile_epilogue


def _mark_prefetch(sch: s_tir.Schedule, epilogue, reduce_outer) -> None:
    """Mark the tile's reduction loop with the name of the epilogue computed after it in the same tile:
    kokoro_tvm.compiler.passes.EpiloguePrefetch (after scheduling) prefetches the lines that epilogue reads and
    writes before the loop, so they arrive while the reduction runs."""
    sch.annotate(reduce_outer, PREFETCH_MARK, sch.get(epilogue).name_hint)


def _vector_steps(sch: s_tir.Schedule, found: _Match, tile: _Tile, reduce: list, row_i, col_i) -> None:
    """The register tile unrolled over rows, its columns one vector (or, for a packed conv, the tensorized
    step), the accumulator's initialization vectorized."""
    sch.unroll(row_i)
    if tile.packed is None:
        sch.vectorize(col_i)
    init = sch.decompose_reduction(found.main.block_rv, reduce[0])
    vectorize_inner(sch, init, tile.lanes)
    if tile.packed is not None:
        step = tile.packed.LANES
        vectors = sch.split(col_i, [None, step]) if tile.cols > step else [col_i]
        if len(vectors) > 1:
            sch.unroll(vectors[0])
        sch.tensorize(vectors[-1], tile.packed.register_intrinsic(min(tile.cols, step)))  # 8 columns: ymm


class Contraction(CPURule):
    def schedule(self, sch, infos, geometry):
        # Step 1. One multiply-accumulate reduction with injective work around it.
        found = match_contraction(sch, infos)
        if found is None:
            return None
        # Step 2. The register tile, its order, and the packed step (whose channel-group axis goes innermost).
        tile = _choose_tile(sch, found, geometry)
        if tile is None:
            return None
        reduce, pair = (found.reduce[:-1], found.reduce[-1:]) if tile.packed is not None else (found.reduce, [])
        # Step 3. The epilogue folded into one block.
        if not _fold_epilogue(sch, found):
            return None
        # Step 4. Tiles and loop order.
        anchor, row_i, col_i = _order_loops(sch, found, tile, reduce, pair)
        # Step 5. The accumulator and the epilogue per tile.
        per_tile = _place_epilogue(sch, found, anchor, tile.lanes)
        # Step 6. Vector and tensorized steps; the producers as parallel vector loops.
        _vector_steps(sch, found, tile, reduce, row_i, col_i)
        for producer in found.producers:
            elementwise_loops(sch, producer.block_rv, tile.lanes)
        # Step 7. The epilogue's lines prefetched as each tile starts (a per-tile epilogue only).
        if per_tile:
            _mark_prefetch(sch, found.consumers[-1].block_rv, reduce[0])
        return sch
