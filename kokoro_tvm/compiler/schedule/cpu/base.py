"""What the CPU schedule rules share: the rule base (LLVM targets, normalized PrimFuncs, a refusing primitive
means "not this rule"), loop extents static or symbolic, vectorized and parallel loop nests, inlining of values
read once, and whether a consumer reads a producer at its own positions."""

from __future__ import annotations

import logging
import re

from tvm import s_tir, sym, tirx
from tvm.s_tir.dlight.analysis import normalize_prim_func
from tvm.s_tir.dlight.base import ScheduleRule

from kokoro_tvm.compiler.sizes import at_least, divides
from kokoro_tvm.compiler.targets import CPUGeometry, cpu_geometry
from kokoro_tvm.components import LENGTH_TILE

log = logging.getLogger(__name__)


def extent(sch: s_tir.Schedule, loop):
    """The loop's extent: an int when static, else the symbolic PrimExpr."""
    ext = sch.get(loop).extent
    return int(ext) if isinstance(ext, tirx.IntImm) else ext


def vectorize_inner(sch: s_tir.Schedule, block, lanes: int) -> None:
    inner = sch.get_loops(block)[-1]
    ext = extent(sch, inner)
    if isinstance(ext, int) and ext < 2:
        return
    if isinstance(ext, int) and ext <= lanes:
        sch.vectorize(inner)
    elif divides(lanes, ext):
        sch.vectorize(sch.split(inner, [None, lanes])[1])
    elif divides(lanes // 2, ext):  # 8k steps: half-width vectors (see Contraction)
        sch.vectorize(sch.split(inner, [None, lanes // 2])[1])


def elementwise_loops(sch: s_tir.Schedule, block, lanes: int) -> None:
    """Parallel over all but the innermost loop (fused), vectorized innermost."""
    loops = sch.get_loops(block)
    if len(loops) > 1:
        sch.parallel(sch.fuse(*loops[:-1]))
        vectorize_inner(sch, block, lanes)
    elif loops:
        ext = extent(sch, loops[0])
        if at_least(ext, 4 * lanes) and divides(lanes, ext):
            outer, inner = sch.split(loops[0], [None, lanes])
            sch.parallel(outer)
            sch.vectorize(inner)


def buffer_name(sch: s_tir.Schedule, block) -> str:
    return sch.get(block).writes[0].source.name


def _loads(sch: s_tir.Schedule, name: str, blocks) -> int:
    """How many times the bodies of `blocks` read buffer `name` (an expression used twice counts twice)."""
    pattern = re.compile(rf"(?<![\w.]){re.escape(name)}\[")
    return sum(len(pattern.findall(str(sch.get(b).body))) for b in blocks)


def inline_single_use(sch: s_tir.Schedule, blocks: list) -> list:
    """Inline every block whose value is read exactly once (repeatedly, as inlining changes the counts);
    return the rest. A value read twice (x + sin(x)^2, leaky ReLU) is kept: inlining it would evaluate its
    whole expression tree again, and chains of such blocks grow exponentially."""
    remaining = list(blocks)
    changed = True
    while changed:
        changed = False
        for info in list(remaining):
            consumers = sch.get_consumers(info.block_rv)
            if _loads(sch, buffer_name(sch, info.block_rv), consumers) != 1:
                continue
            try:
                sch.compute_inline(info.block_rv)
            except s_tir.ScheduleError:
                continue
            remaining.remove(info)
            changed = True
    return remaining


def outputs(sch: s_tir.Schedule, block):
    """How many outputs the block's loops cover: an int, or a symbolic product."""
    total = 1
    for loop in sch.get_loops(block):
        total = total * extent(sch, loop)
    return total


def same_positions(sch: s_tir.Schedule, consumer, producer) -> bool:
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


# Only the choice between two equally valid tile orders looks at a size (the rest is proved for every length);
# for a symbolic size it uses REPRESENTATIVE_LENGTH.
REPRESENTATIVE_LENGTH = 256  # tokens or frames, near the corpus median (NOTES/dynamic_shapes.md)


def representative(extent) -> int:
    """A static extent itself; a symbolic one at REPRESENTATIVE_LENGTH (its tile count bound to that length's)."""
    if isinstance(extent, int):
        return extent
    analyzer = sym.Analyzer()
    for var in tirx.analysis.undefined_vars(extent):
        analyzer.bind(var, tirx.IntImm(str(var.ty), REPRESENTATIVE_LENGTH // LENGTH_TILE))
    return int(analyzer.simplify(extent))


def operand_bytes(sch: s_tir.Schedule, block, spatial: int) -> dict | None:
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
        used = [tirx.analysis.undefined_vars(r.min) for r in region.region]
        row_dims = [i for i, variables in enumerate(used) if any(v.same_as(row_var) for v in variables)]
        col_dims = [i for i, variables in enumerate(used) if any(v.same_as(col_var) for v in variables)]
        shape = [representative(int(d) if isinstance(d, tirx.IntImm) else d) for d in buffer.shape]
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


class CPURule(ScheduleRule):
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
