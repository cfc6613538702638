"""Minimal reproductions of every export/import/build hazard we met, run against the installed TVM.

Each probe builds the smallest module that shows the problem, runs the stock path (plain torch.export, stock
TVM converters) and reports whether the problem still exists, with the actual error. Notebooks 01 and 02
show them; NOTES/tvm_gaps.md records the results of one run.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np
import torch
import torch.nn.functional as F
from torch.export import Dim

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.reference.pt_dynamic import default_dtype
from kokoro_tvm.studies.converter_cases import Lambda


@dataclass
class ProbeResult:
    name: str
    stage: str  # export | import | build | run | numerics
    still_a_problem: bool
    observed: str  # the actual error, or what happened
    our_fix: str

    def as_dict(self) -> dict:
        return asdict(self)


def _last_line(exc: BaseException) -> str:
    """'ErrorType: first informative line of the message' (TVM and torch put the cause first)."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip() and not ln.strip().startswith("File ")]
    return f"{type(exc).__name__}: {lines[0] if lines else repr(exc)}"[:300]


def _stock_build(module: torch.nn.Module, inputs: tuple, dynamic_shapes=None):
    """Plain export -> stock importer -> TVM's default pipeline for llvm -> VM. Returns a callable on numpy
    inputs that gives the first output."""
    from tvm.relax.frontend.torch import from_exported_program

    ep = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    runner = compile_and_load(from_exported_program(ep), stock=True)
    return lambda *xs: runner(*xs)[0]


def _attempt(stage_fns: list[tuple[str, Callable]]) -> tuple[str, str | None]:
    """Run stages in order; return (stage reached or failed at, error line or None)."""
    for stage, fn in stage_fns:
        try:
            fn()
        except Exception as exc:  # a probe records whatever the stock path raises
            return stage, _last_line(exc)
    return stage_fns[-1][0], None


def _build_run_compare(name: str, module, inputs: tuple, fix_if_broken: str, fix_if_fine: str) -> ProbeResult:
    """Stock build of `module`; if it builds, run it once and compare with PyTorch bit for bit."""
    try:
        run = _stock_build(module, inputs)
    except Exception as exc:  # record whatever the stock path raises
        return ProbeResult(name, "build", True, _last_line(exc), fix_if_broken)
    with torch.no_grad():
        expected = module(*inputs).numpy()
    got = run(*(x.numpy() for x in inputs))
    ok = got.shape == expected.shape and np.array_equal(got, expected)
    return ProbeResult(name, "run", not ok, "builds; values " + ("match" if ok else "differ"), fix_if_fine)


def probe_pack_padded_export() -> ProbeResult:
    lstm = torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True)

    def packed(m, x, lengths):
        p = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        y, _ = m[0](p)
        return torch.nn.utils.rnn.pad_packed_sequence(y, batch_first=True)[0]

    args = (torch.randn(2, 5, 4), torch.tensor([5, 3]))
    stage, err = _attempt([("export", lambda: torch.export.export(Lambda(packed, lstm), args))])
    return ProbeResult(
        "pack_padded_sequence in torch.export",
        "export",
        err is not None,
        err or "exports",
        "LSTM as the custom op kokoro_tvm::masked_lstm (kept whole by export)",
    )


def probe_native_lstm_converter() -> ProbeResult:
    """Plain nn.LSTM (no packing) through the stock importer: does it unroll per step?"""
    from tvm.relax.frontend.torch import from_exported_program

    lstm = torch.nn.LSTM(4, 3, batch_first=True, bidirectional=True)
    sizes = {}
    err = None
    for steps in (8, 64):
        try:
            ep = torch.export.export(Lambda(lambda m, x: m[0](x)[0], lstm), (torch.randn(1, steps, 4),))
            sizes[steps] = len(from_exported_program(ep).script().splitlines())
        except Exception as exc:  # record the stock failure
            err = _last_line(exc)
            break
    grows = len(sizes) == 2 and sizes[64] > 2 * sizes[8]
    observed = err or f"Relax lines: T=8 -> {sizes[8]}, T=64 -> {sizes[64]} (grows with T: {grows})"
    return ProbeResult(
        "native LSTM converter",
        "import",
        bool(err) or grows,
        observed,
        "masked_lstm lowers to one TIR loop: IR size independent of T",
    )


def probe_rand_in_graph() -> ProbeResult:
    from tvm.relax.frontend.torch import from_exported_program

    def noisy(m, x):
        return x + torch.rand(x.shape[0], 3)

    ep = torch.export.export(Lambda(noisy), (torch.randn(2, 3),))
    stage, err = _attempt([("import", lambda: from_exported_program(ep))])
    return ProbeResult(
        "torch.rand in the graph (SineGen initial phase)",
        "import",
        err is not None,
        err or "imports",
        "SineGen noise is an explicit input (ExplicitNoiseSource)",
    )


def probe_randn_like_frozen() -> ProbeResult:
    """randn_like imports, but as what? Run the build twice: fresh noise or a frozen constant?"""

    def noisy(m, x):
        return torch.randn_like(x)

    x = np.zeros((2, 4), np.float32)
    try:
        run = _stock_build(Lambda(noisy), (torch.zeros(2, 4),))
        a, b = run(x), run(x)
        frozen = np.array_equal(a, b)
        observed = (
            "two runs return identical 'noise' (drawn once at import and frozen)"
            if frozen
            else ("two runs return different noise")
        )
    except Exception as exc:  # record the stock failure
        frozen, observed = True, _last_line(exc)
    return ProbeResult(
        "randn_like in the graph (SineGen additive noise)",
        "run",
        frozen,
        observed,
        "noise passed in as an input, identical for both backends",
    )


def probe_bool_index_put() -> ProbeResult:
    def masked_assign(m, x):
        y = x.clone()
        y[y < 0] = 3.0
        return y

    return _build_run_compare(
        "phase[mask] = pi (bool index_put_)",
        Lambda(masked_assign),
        (torch.randn(3, 5),),
        "torch.where in ExportableCustomSTFT",
        "none needed",
    )


def probe_clamp_without_bound() -> ProbeResult:
    module = Lambda(lambda m, x: F.interpolate(x, scale_factor=1 / 3, mode="linear"))
    stage, err = _attempt([("build", lambda: _stock_build(module, (torch.randn(1, 2, 12),)))])
    return ProbeResult(
        "clamp(int64, min=None) from upsample_linear1d",
        "build",
        err is not None,
        err or "builds",
        "clamp.default converter emitting maximum/minimum",
    )


def probe_atan2() -> ProbeResult:
    inputs = (torch.randn(4, 5), torch.randn(4, 5))
    return _build_run_compare(
        "atan2", Lambda(lambda m, a, b: torch.atan2(a, b)), inputs, "converter needed", "none needed"
    )


def probe_expand_prepend() -> ProbeResult:
    """DurationEncoder's style.expand(T, B, -1) prepends a dimension."""
    return _build_run_compare(
        "expand with rank prepend",
        Lambda(lambda m, a: a.expand(3, 2, -1) * 1.0),
        (torch.randn(2, 4),),
        "expand on an explicit [None] view",
        "none needed (we still write style[None].expand(T, -1, -1))",
    )


def probe_slice_scatter() -> ProbeResult:
    """kokoro's `x_pad[:, :, :n] = x` pattern (slice_scatter after functionalization)."""

    def pad_assign(m, x):
        pad = torch.zeros(x.shape[0], x.shape[1], x.shape[2] + 3)
        pad[:, :, : x.shape[2]] = x
        return pad

    return _build_run_compare(
        "slice_scatter (x_pad[..., :n] = x)",
        Lambda(pad_assign),
        (torch.randn(1, 2, 5),),
        "wrappers avoid the pattern",
        "none needed",
    )


def probe_float64_matmul() -> ProbeResult:
    lin = torch.nn.Linear(8, 8).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    stage, err = _attempt([("build", lambda: _stock_build(Lambda(lambda m, a: m[0](a), lin), (x,)))])
    return ProbeResult(
        "float64 Linear (addmm) through stock converters",
        stage,
        err is not None,
        err or "builds",
        "addmm/mm/bmm/matmul/linear/convolution converters keep the input dtype",
    )


def probe_float64_layer_norm() -> ProbeResult:
    ln = torch.nn.LayerNorm(6).double()
    x = torch.randn(2, 6, dtype=torch.float64)
    stage, err = _attempt([("build", lambda: _stock_build(Lambda(lambda m, a: m[0](a), ln), (x,)))])
    return ProbeResult(
        "float64 LayerNorm / InstanceNorm legalization",
        stage,
        err is not None,
        err or "builds",
        "normalization as mean/variance Relax arithmetic in any dtype",
    )


def probe_int_rsqrt() -> ProbeResult:
    """kokoro's rsqrt(torch.tensor(2)): torch promotes to the default dtype, the stock converter to float32."""
    import tvm
    from tvm.relax.frontend.torch import from_exported_program

    with default_dtype(torch.float64):
        ep = torch.export.export(
            Lambda(lambda m, a: a * torch.rsqrt(torch.tensor(2))), (torch.ones(2, dtype=torch.float64),)
        )
        try:
            mod = from_exported_program(ep)
        except Exception as exc:  # record the stock failure
            return ProbeResult("rsqrt of an integer constant", "import", True, _last_line(exc), "dtype-true rsqrt")
    lost = "float32" in mod.script()
    del tvm
    return ProbeResult(
        "rsqrt of an integer constant",
        "numerics",
        lost,
        "the constant is computed in float32 inside a float64 graph" if lost else "float64 kept",
        "sqrt/rsqrt converters use the dtype torch recorded for the result",
    )


def probe_native_mcpu() -> ProbeResult:
    import tvm
    from tvm.target import codegen

    native = tvm.target.Target({"kind": "llvm", "mcpu": "native"})
    host = codegen.llvm_get_system_cpu()
    features = str(native.attrs.get("mcpu", ""))
    problem = features in ("", "native", "generic")
    return ProbeResult(
        "llvm mcpu=native",
        "build",
        problem,
        f"mcpu=native is kept as {features!r}; host CPU {host!r}",
        "target {'kind': 'llvm', 'mcpu': llvm_get_system_cpu()}",
    )


def _dynamic_length_probe(name: str, fn: Callable, buffers: dict, fix: str) -> ProbeResult:
    """`fn(mods, x)` on x [1, 4, n] exported with a symbolic n, then the stock importer and an llvm build."""

    holder = torch.nn.Module()
    for key, value in buffers.items():
        holder.register_buffer(key, value)
    module = Lambda(fn, holder)
    x = torch.randn(1, 4, 24)
    shapes = (({2: Dim("n", min=2, max=500)},),)  # _Fn.forward takes *xs
    stage, error = _attempt([("build", lambda: _stock_build(module, (x,), dynamic_shapes=shapes))])
    return ProbeResult(name, stage, error is not None, error or "exports, imports and builds", fix)


def probe_dynamic_buffer_slice() -> ProbeResult:
    """ALBERT adds position embeddings sliced from a 512-long buffer to the first T positions."""
    return _dynamic_length_probe(
        "dynamic: slice a fixed-size buffer to the symbolic length",
        lambda mods, x: x + mods[0].positions[:, :, : x.shape[2]],
        {"positions": torch.randn(1, 4, 512)},
        "pass position ids as an input instead of slicing the buffer",
    )


def probe_dynamic_scale_interpolate() -> ProbeResult:
    """F0N and the decoder upsample by a scale factor (x2 nearest; SineGen's 1/300 linear)."""
    return _dynamic_length_probe(
        "dynamic: interpolate by scale_factor",
        lambda mods, x: F.interpolate(x, scale_factor=2.0, mode="nearest"),
        {},
        "upsample by reshape/broadcast (repeat_interleave) instead of interpolate",
    )


DYNAMIC_PROBES = [probe_dynamic_buffer_slice, probe_dynamic_scale_interpolate]

EXPORT_PROBES = [probe_pack_padded_export, probe_rand_in_graph, probe_randn_like_frozen, probe_bool_index_put]
CONVERTER_PROBES = [
    probe_native_lstm_converter,
    probe_clamp_without_bound,
    probe_atan2,
    probe_expand_prepend,
    probe_slice_scatter,
    probe_float64_matmul,
    probe_float64_layer_norm,
    probe_int_rsqrt,
    probe_native_mcpu,
]


def run_probes(probes) -> list[ProbeResult]:
    return [probe() for probe in probes]
