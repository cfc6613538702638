"""Shape-generic CPU schedules for the PrimFuncs Kokoro's Relax graphs legalize to (TVM 0.27 schedules none).

Rules tried in order on every fused PrimFunc (dlight's `ApplyDefaultSchedule` drives them):

- `Contraction`: one multiply-accumulate reduction (conv1d, conv-transpose, matmul) plus injective producers
  and an epilogue. A register-blocked direct kernel: the output is tiled ROWS x COLS (rows = output
  channels or matmul rows, cols = the contiguous output axis; 16 x 1 AVX-512 vector, or 8 x 2 where 16 weight
  rows would share one L1 set), accumulated in a local tile the compiler keeps in registers over the whole
  reduction, the epilogue (bias, masking, Snake, leaky ReLU...) applied to the tile while it is hot, and the
  tiles spread over the cores.
- `Elementwise`: injective functions inlined into one loop nest, parallel outside and vectorized inside.
- `RowReduction`: sums over the innermost axis (norm statistics): vector partial sums per row, rows in parallel;
  then dlight's CPU `Reduction`, and a last-resort `ParallelOuter` (parallel outermost loop of every block).

No tuning: the same decisions for every shape, so every bucket builds in seconds. The conv tile assumes the
contiguous output axis is a multiple of COLS; `kokoro_tvm.compiler.passes.AlignConvLengths` arranges that.
"""

from __future__ import annotations

import itertools
import logging
import re

import tvm
from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import ScheduleRule
from tvm.s_tir.dlight.base.common_schedules import try_inline
from tvm.s_tir.dlight.cpu import Reduction

from kokoro_tvm.compiler.symbolic import size_analyzer as _analyzer
from kokoro_tvm.compiler.targets import CPUGeometry, cpu_geometry
from kokoro_tvm.components import LENGTH_TILE

log = logging.getLogger(__name__)

# Register tiles (rows x vectors of columns) for targets with 32 vector registers (AVX-512, NEON), 16
# accumulators either way; targets with 16 registers (AVX2, SSE) get half as many rows. 16 x 1 measured faster
# than 8 x 2 on every generator conv on AVX-512 (one whole-cache-line input load per reduction step;
# NOTES/performance.md), but its 16 broadcast rows must not collide in L1: rows whose stride is a multiple of
# (L1 sets x line) bytes (4 KiB here: 1024 input channels x k3, 512 x k2) all map to one cache set and ran at
# half speed; those get 8 x 2. Vector width and cache geometry come from the target
# (kokoro_tvm.compiler.targets.cpu_geometry).
WIDE_TILE, NARROW_TILE = (16, 1), (8, 2)
ROW_CHOICES = (16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1)  # the largest divisor of the row extent


def _tiles(geometry: CPUGeometry) -> tuple[tuple[int, int], tuple[int, int]]:
    if geometry.vector_registers >= 32:
        return WIDE_TILE, NARROW_TILE
    return (WIDE_TILE[0] // 2, WIDE_TILE[1]), (NARROW_TILE[0] // 2, NARROW_TILE[1])


# A symbolic length is compiled as a multiple of a tile (kokoro_tvm.compiler.symbolic): a loop over it has an
# extent like 16 * k. The rules ask the same questions of it as of a number (does `lanes` divide it? is it at
# least this long?) and answer them by proof for every k >= 1, never by one value; only the choice between two
# equally valid tile orders looks at a size, and for a symbolic one it uses REPRESENTATIVE_LENGTH.
REPRESENTATIVE_LENGTH = 256  # tokens or frames, near the corpus median (NOTES/dynamic_shapes.md)


def _extent(sch: s_tir.Schedule, loop):
    """The loop's extent: an int when static, else the symbolic PrimExpr."""
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else ext


def _divides(factor: int, extent) -> bool:
    """True if `factor` divides `extent` (an int, or a symbolic extent for every value of its variables)."""
    if isinstance(extent, int):
        return extent % factor == 0
    analyzer = _analyzer(extent)
    return analyzer.can_prove_equal(tirx.floormod(extent, factor), 0)


def _at_least(extent, bound: int) -> bool:
    if isinstance(extent, int):
        return extent >= bound
    return _analyzer(extent).can_prove(extent >= bound)


def _representative(extent) -> int:
    """A static extent itself; a symbolic one at REPRESENTATIVE_LENGTH (its tile count bound to that length's)."""
    if isinstance(extent, int):
        return extent
    analyzer = sym.Analyzer()
    for var in tirx.analysis.undefined_vars(extent):
        analyzer.bind(var, tirx.IntImm(str(var.ty), REPRESENTATIVE_LENGTH // LENGTH_TILE))
    return int(analyzer.simplify(extent))


def _is_multiply_accumulate(sch: s_tir.Schedule, block) -> bool:
    """out = out + a * b with a and b read from two different buffers."""
    stmt = sch.get(block)
    body = stmt.body
    if not isinstance(body, tirx.BufferStore) or not isinstance(body.value, tirx.Add):
        return False
    update = body.value.b if isinstance(body.value.a, tvm.ir.TensorLoad) else body.value.a
    while isinstance(update, tirx.Cast):
        update = update.value
    if not isinstance(update, tirx.Mul):
        return False
    return len({r.source.name for r in stmt.reads} - {stmt.writes[0].source.name}) >= 2


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
    import importlib

    stmt = sch.get(block)
    operands = tuple(sorted(str(r.source.dtype) for r in stmt.reads if r.source.name != stmt.writes[0].source.name))
    if lanes != 16 or len(reduce) < 2 or len(operands) != 2:
        return None
    name = PACKED_STEPS.get((operands, str(stmt.writes[0].source.dtype), _extent(sch, reduce[-1])))
    return importlib.import_module(name) if name else None


def _vectorize_inner(sch: s_tir.Schedule, block, lanes: int) -> None:
    inner = sch.get_loops(block)[-1]
    ext = _extent(sch, inner)
    if isinstance(ext, int) and ext < 2:
        return
    if isinstance(ext, int) and ext <= lanes:
        sch.vectorize(inner)
    elif _divides(lanes, ext):
        sch.vectorize(sch.split(inner, [None, lanes])[1])
    elif _divides(lanes // 2, ext):  # 8k steps: half-width vectors (see Contraction)
        sch.vectorize(sch.split(inner, [None, lanes // 2])[1])


def _elementwise_loops(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Parallel over all but the innermost loop (fused), vectorized innermost."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
        _vectorize_inner(sch, block, lanes)
    elif loops:
        ext = _extent(sch, loops[0])
        if _at_least(ext, 4 * lanes) and _divides(lanes, ext):
            outer, inner = sch.split(loops[0], [None, lanes])
            sch.parallel(outer)
            sch.vectorize(inner)


def _buffer_name(sch: s_tir.Schedule, block) -> str:
    return sch.get(block).writes[0].source.name


def _loads(sch: s_tir.Schedule, name: str, blocks) -> int:
    """How many times the bodies of `blocks` read buffer `name` (an expression used twice counts twice)."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\[")
    return sum(len(pattern.findall(str(sch.get(b).body))) for b in blocks)


def _inline_single_use(sch: s_tir.Schedule, blocks: list) -> list:
    """Inline every block whose value is read exactly once (repeatedly, as inlining changes the counts);
    return the rest. A value read twice (x + sin(x)^2, leaky ReLU) is kept: inlining it would evaluate its
    whole expression tree again, and chains of such blocks grow exponentially."""
    remaining = list(blocks)
    changed = True
    while changed:
        changed = False
        for info in list(remaining):
            consumers = sch.get_consumers(info.block_rv)
            if _loads(sch, _buffer_name(sch, info.block_rv), consumers) != 1:
                continue
            try:
                sch.compute_inline(info.block_rv)
            except s_tir.ScheduleError:
                continue
            remaining.remove(info)
            changed = True
    return remaining


def _outputs(sch: s_tir.Schedule, block):
    """How many outputs the block's loops cover: an int, or a symbolic product."""
    extent = 1
    for loop in sch.get_loops(block):
        extent = extent * _extent(sch, loop)
    return extent


def _fewer(a, b) -> bool:
    """a < b for every value of the tile counts (False where that cannot be proved)."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return _analyzer(a, b).can_prove(a < b)


def _compute_at_tile(sch: s_tir.Schedule, blocks: list, loop, size: int, lanes: int) -> list:
    """Compute each block (output-sized, read several times) per tile under `loop`, last producer first; smaller
    ones (per-channel scales, masks) stay at the root, computed once. Returns the blocks left at the root."""
    at_root = []
    for info in reversed(blocks):
        consumers = sch.get_consumers(info.block_rv)
        if _fewer(_outputs(sch, info.block_rv), size) or not all(
            _same_positions(sch, c, info.block_rv) for c in consumers
        ):
            at_root.append(info)  # per-channel values, or read at other positions (a shift, a transpose): a
            continue  # per-tile copy would have to recompute a whole row or the whole buffer for every tile
        try:
            sch.compute_at(info.block_rv, loop, preserve_unit_loops=True)
        except s_tir.ScheduleError:
            at_root.append(info)  # e.g. a transpose: its loops do not follow the output's
            continue
        _vectorize_inner(sch, info.block_rv, lanes)
    return at_root


def _same_positions(sch: s_tir.Schedule, consumer, producer) -> bool:
    """True if `consumer` computes exactly one output per output of `producer`, at the same position (it reads
    producer[v...] with its own iteration variables, over the same non-unit extents). Then computing it per
    tile of the producer covers every output; otherwise (a pad to a longer axis, a shift) it must run after."""
    produced = sch.get(producer).writes[0].source.name
    stmt, main = sch.get(consumer), sch.get(producer)
    reads = [r for r in stmt.reads if r.source.name == produced]
    if len(reads) != 1:
        return False
    variables = [iv.var for iv in stmt.iter_vars]
    for rng in reads[0].region:
        if not isinstance(rng.extent, tirx.IntImm) or int(rng.extent) != 1:
            return False
        if not (isinstance(rng.min, tirx.IntImm) and int(rng.min) == 0) and not any(
            rng.min.same_as(v) for v in variables
        ):
            return False

    def extents(block):
        return [str(iv.dom.extent) for iv in block.iter_vars if iv.iter_type == 0 and str(iv.dom.extent) != "1"]

    return extents(stmt) == extents(main)


class _CPURule(ScheduleRule):
    """A rule for LLVM targets on a normalizable PrimFunc; a primitive that refuses means "not this rule"."""

    def apply(self, func, target, tunable):
        if not isinstance(func, tirx.PrimFunc) or target.kind.name != "llvm":
            return None
        sch = s_tir.Schedule(func)
        infos = normalize_prim_func(sch)
        if infos is None:
            return None
        try:
            return self.schedule(sch, infos, cpu_geometry(target))
        except s_tir.ScheduleError:
            log.debug("%s does not apply to %s", type(self).__name__, func.attrs.get("global_symbol"))
            return None

    def schedule(self, sch: s_tir.Schedule, infos: list, geometry: CPUGeometry) -> s_tir.Schedule | None:
        raise NotImplementedError


def _operands(sch: s_tir.Schedule, block, spatial: int) -> dict | None:
    """For out[.., row, col] += A[..row..] * B[..col..]: the bytes of A (read along rows, broadcast) and of B
    (read along columns, vector loads), and A's stride between consecutive rows. None if not that shape."""
    stmt = sch.get(block)
    row_var, col_var = stmt.iter_vars[spatial - 2].var, stmt.iter_vars[spatial - 1].var
    written = stmt.writes[0].source.name
    found = {}
    for region in stmt.reads:
        buffer = region.source
        if buffer.name == written:
            continue
        text = [str(r.min) for r in region.region]
        row_dims = [i for i, t in enumerate(text) if re.search(rf"\b{re.escape(row_var.name)}\b", t)]
        col_dims = [i for i, t in enumerate(text) if re.search(rf"\b{re.escape(col_var.name)}\b", t)]
        shape = [_representative(int(d) if isinstance(d, tirx.IntImm) else d) for d in buffer.shape]
        size = buffer.dtype.bits // 8
        for d in shape:
            size *= d
        if row_dims and not col_dims:
            stride = buffer.dtype.bits // 8
            for d in shape[row_dims[-1] + 1 :]:
                stride *= d
            found["row"] = (size, stride)
        elif col_dims and not row_dims:
            found["col"] = (size, 0)
    if set(found) != {"row", "col"}:
        return None
    return {"row_bytes": found["row"][0], "row_stride_bytes": found["row"][1], "col_bytes": found["col"][0]}


def _set_collisions(stride_bytes: int, rows: int, geometry: CPUGeometry) -> int:
    """The most of `rows` rows, `stride_bytes` apart, that share one L1 cache set."""
    sets: dict[int, int] = {}
    for r in range(rows):
        index = (r * stride_bytes // geometry.cache_line) % geometry.l1_sets
        sets[index] = sets.get(index, 0) + 1
    return max(sets.values())


class Contraction(_CPURule):
    def schedule(self, sch, infos, geometry):
        reductions = [b for b in infos if b.is_reduction()]
        if len(reductions) != 1 or not _is_multiply_accumulate(sch, reductions[0].block_rv):
            return None
        main = reductions[0]
        kinds = main.dom_kind()
        if kinds.rstrip("R") != kinds.replace("R", "") or kinds.count("S") < 2:
            return None  # spatial axes must come first; we need a row and a column axis
        position = infos.index(main)
        producers, consumers = infos[:position], infos[position + 1 :]
        if any(not b.is_injective() for b in producers + consumers):
            return None
        loops = sch.get_loops(main.block_rv)
        spatial, reduce = loops[: kinds.count("S")], loops[kinds.count("S") :]
        *outer, row, col = spatial
        dtype_bits = sch.get(main.block_rv).writes[0].source.dtype.bits
        lanes = geometry.lanes(dtype_bits)
        col_extent, row_extent = _extent(sch, col), _extent(sch, row)
        operands = _operands(sch, main.block_rv, len(spatial))
        wide, narrow = _tiles(geometry)
        max_rows, vectors = wide
        if operands is not None and _set_collisions(operands["row_stride_bytes"], max_rows, geometry) > (
            geometry.l1_ways // 2
        ):
            max_rows, vectors = narrow
        cols = vectors * lanes
        while cols > lanes and not _divides(cols, col_extent):
            cols //= 2
        if not _divides(cols, col_extent) and _divides(lanes // 2, col_extent):
            # a length of 8k steps (the frame-rate convs of a symbolic build): half-width vectors, which this
            # CPU issues at the same FLOP rate (Zen 4 runs a 512-bit FMA as two 256-bit halves); the decoder
            # at 168 frames took 1.13 s, between its 1.10 s at 160 and 1.20 s at 176 (NOTES/dynamic_shapes.md)
            cols = lanes // 2
        if not _divides(cols, col_extent):
            return None  # a ragged vector axis would scalarize the whole kernel
        rows = next(r for r in ROW_CHOICES if _divides(r, row_extent) and r <= max_rows)
        # tile order: walk the rows of one column slab (the slab stays in cache, the row operand streams), unless
        # the row operand (conv weights) is the larger one: then walk the columns of one row slab
        rows_outer = operands is not None and operands["row_bytes"] > operands["col_bytes"]
        # bf16 pairs (kokoro_tvm.compiler.bf16) or int8 quads (compiler.int8): the channel-group axis goes
        # innermost, under the column vector, and the (16 columns x 1 group) step becomes one vdpbf16ps or
        # vpdpbusd (8 columns: the ymm form)
        packed = _packed_step(sch, main.block_rv, reduce, lanes)
        pairs = packed is not None
        if pairs:
            *reduce, pair = reduce

        # epilogue: fold the injective chain after the reduction into its last block, including side inputs
        # computed before the reduction (a residual, a mask) that only the epilogue reads
        main_inputs = {r.source.name for r in sch.get(main.block_rv).reads}
        side = [b for b in producers if sch.get(b.block_rv).writes[0].source.name not in main_inputs]
        producers = [b for b in producers if b not in side]
        # (inlined even when read twice: epilogues are a few cheap operations deep)
        if try_inline(sch, side + consumers[:-1]):
            return None
        row_o, row_i = sch.split(row, [None, rows])
        col_o, col_i = sch.split(col, [None, cols])
        if isinstance(row_extent, int) and isinstance(col_extent, int):
            first, second = (row_o, col_o) if rows_outer else (col_o, row_o)
            sch.reorder(*outer, first, second, *reduce, row_i, col_i, *([pair] if pairs else []))
            anchor = sch.fuse(*outer, first, second)  # one task per tile; neighbours share a slab
            sch.parallel(anchor)
        else:
            # A symbolic tile loop is never fused: dividing a fused index by a symbolic extent (4k + 2) is
            # beyond the region analysis, which then sized the accumulator as the whole output on the stack
            # (a 9 s kernel that overwrote memory). Static tile loops outside in parallel, the symbolic one
            # inside, and the tile's accumulator placed under it.
            only_cols_static = isinstance(col_extent, int) and not isinstance(row_extent, int)
            only_rows_static = isinstance(row_extent, int) and not isinstance(col_extent, int)
            single = all(isinstance(_extent(sch, loop), int) and _extent(sch, loop) == 1 for loop in outer)
            if only_rows_static and not rows_outer and single:
                # a conv over a symbolic length whose input outweighs its weights: walk the rows of one column
                # slab as a static build does (each input slab read once, the weights stay in cache), the
                # symbolic column-tile loop in parallel on its own. Rows outside instead stream the whole input
                # once per row slab: 102-104 against 131-133 GFLOP/s (128 ch, k7, 19,232 steps), 90 against 107
                # (512 ch, k3).
                first, second = col_o, row_o
                sch.reorder(*outer, first, second, *reduce, row_i, col_i, *([pair] if pairs else []))
                sch.parallel(first)
            else:
                first, second = (col_o, row_o) if only_cols_static else (row_o, col_o)
                sch.reorder(*outer, first, second, *reduce, row_i, col_i, *([pair] if pairs else []))
                # the leading static loops (both tile loops symbolic, as attention scores T x T: the outer ones)
                parallel = list(itertools.takewhile(lambda loop: isinstance(_extent(sch, loop), int), [*outer, first]))
                if parallel:
                    sch.parallel(sch.fuse(*parallel) if len(parallel) > 1 else parallel[0])
            anchor = second
        # decided before cache_write, which makes the main block write the accumulator instead of the buffer the
        # epilogue reads (checked after it, every epilogue ran as its own pass over the whole output)
        per_tile_epilogue = bool(consumers) and _same_positions(sch, consumers[-1].block_rv, main.block_rv)
        accumulator = sch.cache_write(main.block_rv, 0, "local")
        sch.reverse_compute_at(accumulator, anchor)
        if per_tile_epilogue:
            sch.reverse_compute_at(consumers[-1].block_rv, anchor)
            _vectorize_inner(sch, consumers[-1].block_rv, lanes)
            sch.compute_inline(accumulator)  # the epilogue reads the accumulator tile: no copy of it
        else:
            _vectorize_inner(sch, accumulator, lanes)
            if consumers:  # its own pass over the finished reduction
                _elementwise_loops(sch, consumers[-1].block_rv, lanes)
        sch.unroll(row_i)
        if not pairs:
            sch.vectorize(col_i)
        init = sch.decompose_reduction(main.block_rv, reduce[0])
        _vectorize_inner(sch, init, lanes)
        if pairs:
            vectors = sch.split(col_i, [None, packed.LANES]) if cols > packed.LANES else [col_i]
            if len(vectors) > 1:
                sch.unroll(vectors[0])
            sch.tensorize(vectors[-1], packed.register_intrinsic(min(cols, packed.LANES)))  # 8 columns: ymm
        for producer in producers:
            _elementwise_loops(sch, producer.block_rv, lanes)
        return sch


class Elementwise(_CPURule):
    def schedule(self, sch, infos, geometry):
        if not all(b.is_injective() for b in infos):
            return None
        remaining = _inline_single_use(sch, infos[:-1])
        anchor = infos[-1]
        while anchor is not None:
            remaining, anchor = self._tile(sch, remaining, anchor, geometry)
        return sch

    @staticmethod
    def _tile(sch, producers: list, anchor, geometry) -> tuple[list, object]:
        """Schedule `anchor` in vector tiles with the `producers` it reads at its own positions computed per
        tile. Returns (the producers left, the next anchor): where the anchor reads the rest at other positions
        (the bf16 packing reads two channels at a shift), the last of them becomes the tile of the ones before
        it, rather than every one a separate pass over the whole tensor (eight passes of 15 MB each in a Snake
        before a bf16 conv, the kernel memory-bound at 13 ms)."""
        block = anchor.block_rv
        lanes = geometry.lanes(sch.get(block).writes[0].source.dtype.bits)
        loops = sch.get_loops(block)
        inner = _extent(sch, loops[-1]) if loops else None
        if len(loops) < 2 or not _divides(lanes, inner):
            for info in producers + [anchor]:
                _elementwise_loops(sch, info.block_rv, lanes)
            return [], None
        sch.parallel(sch.fuse(*loops[:-1]))
        chunk, vector = sch.split(loops[-1], [None, lanes])
        sch.vectorize(vector)
        left = _compute_at_tile(sch, producers, chunk, _outputs(sch, block), lanes)
        order = [info for info in producers if info in left]
        sized = [info for info in order if not _fewer(_outputs(sch, info.block_rv), _outputs(sch, block))]
        if not sized:
            for info in order:
                _elementwise_loops(sch, info.block_rv, lanes)
            return [], None
        following = sized[-1]
        return [info for info in order if info is not following], following


class RowReduction(_CPURule):
    """Sums (and other commutative reductions) over the innermost axis: norm statistics over a whole
    utterance, up to 128 x 57,632 values. A scalar loop is one dependent add per element (latency-bound, ~9 GB/s
    here); instead each row keeps `lanes` partial results in a vector register (rfactor), and the rows are spread
    over the cores. Producers read once are inlined, so `sum(x * mask)` reads x once and writes nothing. The sum
    is taken in a different order than a serial loop (lane by lane, then across lanes): a float32 rounding
    difference, exact in float64 within its last bits; tests compare against torch with explicit tolerances."""

    def schedule(self, sch, infos, geometry):
        reductions = [b for b in infos if b.is_reduction()]
        if not reductions or not all(b.is_reduction() or b.is_injective() for b in infos):
            return None
        if any(b.dom_kind().count("R") != 1 or not b.dom_kind().endswith("R") for b in reductions):
            return None
        remaining = _inline_single_use(sch, [b for b in infos[:-1] if not b.is_reduction()])
        for info in reductions:
            self._rows(sch, info.block_rv, geometry)
        for info in remaining + ([] if infos[-1].is_reduction() else [infos[-1]]):
            _elementwise_loops(sch, info.block_rv, geometry.lanes(sch.get(info.block_rv).writes[0].source.dtype.bits))
        return sch

    @staticmethod
    def _rows(sch: s_tir.Schedule, block, geometry: CPUGeometry) -> None:
        """Parallel over the rows; within a row, `lanes` partial results in one vector, then combined."""
        lanes = geometry.lanes(sch.get(block).writes[0].source.dtype.bits)
        *spatial, reduce = sch.get_loops(block)
        extent = _extent(sch, reduce)
        if not spatial or not _divides(lanes, extent) or not _at_least(extent, 4 * lanes):
            if spatial:  # short or ragged rows: a plain loop per row, the rows in parallel
                sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
            return
        partial = sch.rfactor(sch.split(reduce, [None, lanes])[1], factor_axis=len(spatial))
        rows = sch.get_loops(block)[: len(spatial)]
        row = sch.fuse(*rows) if len(rows) > 1 else rows[0]
        sch.parallel(row)
        sch.compute_at(partial, row)
        *_, lane_axis, reduce_outer = sch.get_loops(partial)
        sch.reorder(reduce_outer, lane_axis)
        sch.vectorize(lane_axis)
        init = sch.decompose_reduction(partial, reduce_outer)
        sch.vectorize(sch.get_loops(init)[-1])
        sch.set_scope(partial, 0, "local")


class ParallelOuter(_CPURule):
    def schedule(self, sch, infos, geometry):
        for block in infos:
            loops = sch.get_loops(block.block_rv)
            spatial = [loop for loop, kind in zip(loops, block.dom_kind(), strict=True) if kind == "S"]
            if spatial and spatial == loops[: len(spatial)]:
                sch.parallel(sch.fuse(*spatial) if len(spatial) > 1 else spatial[0])
        return sch


def rules() -> list[ScheduleRule]:
    return [Contraction(), Elementwise(), RowReduction(), Reduction(), ParallelOuter()]
