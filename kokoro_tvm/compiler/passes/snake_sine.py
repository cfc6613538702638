"""`SnakeSine`: Snake's sin(alpha * x) (every generator activation, arguments of a few radians) in float32
arithmetic instead, twice the vector lanes and no conversions: pi in three parts (Cody-Waite: k * PI_PARTS[0] and
k * PI_PARTS[1] are exact for |k| < 2^12, so r = x - k pi keeps float32 accuracy up to |x| ~ 12,800) and a float32
Taylor polynomial; within 2 ulp (1.3e-7) of the correctly rounded sine (tests/test_cpu_schedule.py). SineGen's
sines (harmonics of F0: phases of thousands of radians, no alpha) stay with `VectorizableSine`. `terms` and
`prefixes` serve kokoro_tvm.compiler.bf16, whose Snake is rounded to bf16 next.
"""

from __future__ import annotations

from kokoro_tvm.compiler.passes.base import parameter_names, rewriting_pass
from kokoro_tvm.compiler.passes.vectorizable_sine import SineRewriter

SNAKE_ALPHA = "alpha"  # Snake's per-channel frequency parameters (alpha1 / alpha2 of the AdaIN resblocks)


def SnakeSine(prefixes: tuple[str, ...] = ("",), terms: int | None = None):  # noqa: N802 (TVM pass naming)
    """Snake's sin(alpha * x) in the layers of `prefixes` (every Snake by default), in float32 arithmetic with
    `terms` Taylor terms (module docstring)."""
    marks = tuple(p.replace(".", "_") for p in prefixes)

    def select(mutator, argument) -> bool:
        names = parameter_names(mutator, argument, depth=4)
        return any(SNAKE_ALPHA in name and any(mark in name for mark in marks) for name in names)

    return rewriting_pass("SnakeSine", lambda mod: SineRewriter(mod, "float32", select, terms))
