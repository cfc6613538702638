"""`EpiloguePrefetch`: the lines a conv tile's epilogue will read and write, prefetched when the tile starts.

A register-blocked conv tile (kokoro_tvm.compiler.schedule.cpu.contraction) spends thousands of cycles in its
reduction, then its epilogue reads a residual and writes the output at 16 rows x 16 columns: 16 cache lines in
16 rows, each row a whole utterance long, so each line sits in another page and no hardware prefetcher has seen
it coming; the epilogue waits for all of them. The Contraction rule marks the tile's reduction loop (`MARK`: the
name of the epilogue block that follows it in the tile); this pass, run right after scheduling, puts before
that loop one prefetch per tile row of every buffer the epilogue reads or writes at its own positions (not a
per-channel vector), and drops the mark. A prefetch changes no value.
"""

from __future__ import annotations

import tvm_ffi
from tvm import s_tir, tirx

from kokoro_tvm.compiler.passes.base import primfunc_pass
from kokoro_tvm.compiler.schedule.cpu.contraction import PREFETCH_MARK as MARK

LOCALITY = 3  # keep in every cache level: the epilogue reads it a few thousand cycles later


def _loops_to_block(stmt, name: str):
    """(the loops from `stmt` down to the SBlockRealize of block `name`, that realize), or None."""
    loops = []
    while isinstance(stmt, tirx.For):
        loops.append(stmt)
        stmt = stmt.body
    if isinstance(stmt, s_tir.SBlockRealize) and stmt.block.name_hint == name:
        return loops, stmt
    return None


def _substitute(expr, values: list):
    def replace(var):
        return next((new for old, new in values if old.same_as(var)), var)

    return tvm_ffi.structural_map(expr, [(tirx.Var, replace)])


def _prefetches(loops: list, realize) -> list:
    """One unrolled loop over the tile's rows (the first of `loops`) prefetching the first element of each row
    of every buffer the block reads or writes at its own positions (each index one of its variables, in order,
    or a unit axis at 0); [] where the tile is not rows, then columns."""
    if len(loops) < 2:
        return []
    row = tirx.Var("prefetch_row", loops[0].loop_var.ty)
    values = [(loops[0].loop_var, row)] + [(loop.loop_var, tirx.const(0, loop.loop_var.ty)) for loop in loops[1:]]
    at = [_substitute(value, values) for value in realize.iter_values]
    block = realize.block
    own = [iv.var for iv in block.iter_vars]

    def first_of_row(region):
        indices = [r.min for r in region.region]
        named = [i for i in indices if isinstance(i, tirx.Var)]
        if region.source.scope() != "global" or len(named) != len(own):
            return None
        if not all(a.same_as(b) for a, b in zip(named, own, strict=True)):
            return None
        if not all(isinstance(i, tirx.Var) or (isinstance(i, tirx.IntImm) and int(i) == 0) for i in indices):
            return None
        return tirx.BufferLoad(region.source, [at[own.index(i)] if isinstance(i, tirx.Var) else i for i in indices])

    calls = []
    for regions, write in ((block.reads, 0), (block.writes, 1)):
        for load in (load for load in map(first_of_row, regions) if load is not None):
            address = tirx.op.address_of(load)
            calls.append(tirx.Evaluate(tirx.call_intrin("void", "tirx.prefetch", address, write, LOCALITY, 1)))
    if not calls:
        return []
    body = calls[0] if len(calls) == 1 else tirx.SeqStmt(calls)
    zero, rows = tirx.const(0, row.ty), loops[0].extent
    return [tirx.For(row, zero, rows, tirx.ForKind.UNROLLED, body)]


def _unmarked(loop: tirx.For) -> tirx.For:
    kept = {k: v for k, v in loop.annotations.items() if k != MARK}
    return tirx.For(loop.loop_var, loop.min, loop.extent, loop.kind, loop.body, loop.thread_binding, kept)


def _expand(seq: tirx.SeqStmt):
    items, changed = list(seq.seq), False
    out = []
    for i, stmt in enumerate(items):
        if isinstance(stmt, tirx.For) and MARK in stmt.annotations:
            name = str(stmt.annotations[MARK])
            found = next((f for f in (_loops_to_block(s, name) for s in items[i + 1 :]) if f is not None), None)
            out += _prefetches(*found) if found else []
            stmt, changed = _unmarked(stmt), True
        out.append(stmt)
    return tirx.SeqStmt(out) if changed else seq


def _strip(loop: tirx.For):
    return _unmarked(loop) if MARK in loop.annotations else loop


def prefetch_epilogues(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with every marked loop's prefetches in front of it and no mark left (module docstring)."""
    body = tvm_ffi.structural_map(func.body, [(tirx.SeqStmt, _expand)], order="post")
    body = tvm_ffi.structural_map(body, [(tirx.For, _strip)], order="post")  # a mark with no epilogue after it
    return func if body.same_as(func.body) else func.with_body(body)


def EpiloguePrefetch():  # noqa: N802 (TVM pass naming)
    """A module pass: `prefetch_epilogues` on every PrimFunc."""
    return primfunc_pass("EpiloguePrefetch", prefetch_epilogues)
