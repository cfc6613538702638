"""Facts about symbolic sizes, proved for every value of their variables.

A symbolic-length build (kokoro_tvm.compiler.symbolic) has sizes like `16 * k` with k a tile count >= 1. The
slice converter, the Relax rewrites and the CPU schedule rules ask the same questions of such a size as of a
number (does 16 divide it? is it at least 64? what is it modulo 32?) and answer them by proof, never by one
value of k. This module is the one place those proofs start; it imports nothing else of the package.
"""

from __future__ import annotations

import tvm
from tvm import sym, tirx


def size_analyzer(*exprs) -> sym.Analyzer:
    """TVM's arithmetic analyzer knowing that every free variable of `exprs` is a size of at least 1 (our
    symbolic sizes are tile counts, `Dim(min=1)`; torch.export specializes sizes 0 and 1 otherwise)."""
    analyzer = sym.Analyzer()
    for expr in exprs:
        if not isinstance(expr, int):
            for var in tirx.analysis.undefined_vars(expr):
                analyzer.bind(var, tvm.ir.Range.from_min_extent(1, 1 << 40))
    return analyzer


def static_value(expr) -> int | None:
    """A symbolic size expression reduced to a number, if it is one for every value of its variables."""
    if isinstance(expr, int):
        return expr
    simplified = size_analyzer(expr).simplify(expr)
    return int(simplified) if isinstance(simplified, tirx.IntImm) else None


def divides(factor: int, extent) -> bool:
    """True if `factor` divides `extent` (an int, or a symbolic extent for every value of its variables)."""
    if isinstance(extent, int):
        return extent % factor == 0
    return size_analyzer(extent).can_prove_equal(tirx.floormod(extent, factor), 0)


def at_least(extent, bound: int) -> bool:
    """extent >= bound for every value of its variables (False where that cannot be proved)."""
    if isinstance(extent, int):
        return extent >= bound
    return size_analyzer(extent).can_prove(extent >= bound)


def fewer(a, b) -> bool:
    """a < b for every value of the tile counts (False where that cannot be proved)."""
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return size_analyzer(a, b).can_prove(a < b)
