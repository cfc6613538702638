"""Minimal reproductions of every export/import/build hazard in the seeds, run against the installed TVM.

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
    """Plain export -> stock importer -> llvm build -> VM. Returns a callable on numpy inputs."""
    import tvm
    from tvm.relax.frontend.torch import from_exported_program

    ep = torch.export.export(module, inputs, dynamic_shapes=dynamic_shapes)
    mod = from_exported_program(ep)
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())

    def run(*xs):
        out = vm["main"](*(tvm.runtime.tensor(np.ascontiguousarray(x)) for x in xs))
        return out.numpy() if hasattr(out, "numpy") else out[0].numpy()

    return run


class _Fn(torch.nn.Module):
    def __init__(self, fn: Callable, *modules: torch.nn.Module):
        super().__init__()
        self.fn, self.mods = fn, torch.nn.ModuleList(modules)

    def forward(self, *xs):
        return self.fn(self.mods, *xs)


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
    stage, err = _attempt([("export", lambda: torch.export.export(_Fn(packed, lstm), args))])
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
            ep = torch.export.export(_Fn(lambda m, x: m[0](x)[0], lstm), (torch.randn(1, steps, 4),))
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

    ep = torch.export.export(_Fn(noisy), (torch.randn(2, 3),))
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
        run = _stock_build(_Fn(noisy), (torch.zeros(2, 4),))
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
        _Fn(masked_assign),
        (torch.randn(3, 5),),
        "torch.where in ExportableCustomSTFT",
        "none needed",
    )


def probe_clamp_without_bound() -> ProbeResult:
    module = _Fn(lambda m, x: F.interpolate(x, scale_factor=1 / 3, mode="linear"))
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
        "atan2", _Fn(lambda m, a, b: torch.atan2(a, b)), inputs, "converter needed", "none needed"
    )


def probe_expand_prepend() -> ProbeResult:
    """DurationEncoder's style.expand(T, B, -1) prepends a dimension."""
    return _build_run_compare(
        "expand with rank prepend",
        _Fn(lambda m, a: a.expand(3, 2, -1) * 1.0),
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
        _Fn(pad_assign),
        (torch.randn(1, 2, 5),),
        "wrappers avoid the pattern",
        "none needed",
    )


def probe_float64_matmul() -> ProbeResult:
    lin = torch.nn.Linear(8, 8).double()
    x = torch.randn(3, 8, dtype=torch.float64)
    stage, err = _attempt([("build", lambda: _stock_build(_Fn(lambda m, a: m[0](a), lin), (x,)))])
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
    stage, err = _attempt([("build", lambda: _stock_build(_Fn(lambda m, a: m[0](a), ln), (x,)))])
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

    from kokoro_tvm.reference import default_dtype

    with default_dtype(torch.float64):
        ep = torch.export.export(
            _Fn(lambda m, a: a * torch.rsqrt(torch.tensor(2))), (torch.ones(2, dtype=torch.float64),)
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
    from torch.export import Dim

    holder = torch.nn.Module()
    for key, value in buffers.items():
        holder.register_buffer(key, value)
    module = _Fn(fn, holder)
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


def _length_axes(component: str) -> list[int | None]:
    """Which axis of each component input is the token/frame length (None: no length axis)."""
    return {
        "albert": [1, 1],
        "duration": [2, None, None],
        "f0n": [2, None, None],
        "text_encoder": [1, None],
        "decoder": [2, 1, 1, None, None, 1, None],
    }[component]


def _dynamic_shapes(component: str, inputs: tuple, length: int) -> tuple:
    """torch.export dynamic_shapes with one symbolic length n on every length axis (2n, 600n where scaled)."""
    from torch.export import Dim

    n = Dim("n", min=2, max=510 if component in ("albert", "duration", "text_encoder") else 5000)
    dynamic = []
    for axis, x in zip(_length_axes(component), inputs, strict=True):
        if axis is None:
            dynamic.append(None)
        elif component == "decoder" and x.shape[axis] != length:  # F0/N (2F) and noise (600F)
            dynamic.append({axis: (2 if x.shape[axis] == 2 * length else 600) * n})
        else:
            dynamic.append({axis: n})
    return tuple(dynamic)


def dynamic_build(model, component: str, lengths: tuple[int, ...] = (16, 40)) -> dict:
    """One build with a symbolic length, through our export patches, converter table and CPU pipeline: the
    stage it reaches (export, import, compile, run), the error where it stops, and otherwise its largest
    difference from PyTorch at each of `lengths` with the build and run seconds."""
    import time

    import tvm

    from kokoro_tvm.compile import compile_relax, host_target, lift_weight_transforms
    from kokoro_tvm.convert import to_relax
    from kokoro_tvm.export import ComponentShape, component_module, example_inputs, export_patches
    from kokoro_tvm.reference import default_dtype

    dtype = next(model.parameters()).dtype
    module = component_module(model, component)
    inputs = example_inputs(ComponentShape(component, lengths[0]), dtype)
    report: dict = {"component": component, "dtype": str(dtype).removeprefix("torch."), "lengths": list(lengths)}
    state: dict = {}

    def export():
        with export_patches(model), torch.no_grad(), default_dtype(dtype):
            state["ep"] = torch.export.export(
                module, inputs, dynamic_shapes=_dynamic_shapes(component, inputs, lengths[0])
            )

    def import_():
        with default_dtype(dtype):
            state["mod"] = lift_weight_transforms(to_relax(state["ep"], keep_params_as_input=True))

    def compile_():
        start = time.perf_counter()
        state["vm"] = tvm.relax.VirtualMachine(compile_relax(state["mod"], host_target()), tvm.cpu())
        report["compile_s"] = time.perf_counter() - start

    def run():
        ep = state["ep"]
        named = dict(ep.named_parameters())
        raw = [tvm.runtime.tensor(named[p].detach().numpy()) for p in ep.graph_signature.parameters]
        lifted = state["vm"]["main_transform_params"](raw)
        params = [lifted[i] for i in range(len(lifted))]
        report["max_abs_diff"], report["run_s"] = {}, {}
        for n in lengths:
            xs = example_inputs(ComponentShape(component, n), dtype)
            with torch.no_grad(), export_patches(model), default_dtype(dtype):
                expected = module(*xs)
            expected = expected if isinstance(expected, tuple) else (expected,)
            start = time.perf_counter()
            out = state["vm"]["main"](*(tvm.runtime.tensor(x.numpy()) for x in xs), *params)
            report["run_s"][n] = time.perf_counter() - start
            got = (out,) if hasattr(out, "numpy") else tuple(out[i] for i in range(len(out)))
            report["max_abs_diff"][n] = max(
                float(np.abs(g.numpy() - e.numpy()).max()) for g, e in zip(got, expected, strict=True)
            )

    stage, error = _attempt([("export", export), ("import", import_), ("compile", compile_), ("run", run)])
    report.update(stage=stage, error=error, works=error is None)
    return report


def export_static_and_dynamic(model, component: str, length: int = 16) -> dict:
    """torch.export one component with a static length and with a symbolic one; what happens to each."""
    from kokoro_tvm.export import ComponentShape, component_module, example_inputs, export_patches
    from kokoro_tvm.reference import default_dtype

    dtype = next(model.parameters()).dtype
    module = component_module(model, component)
    inputs = example_inputs(ComponentShape(component, length), dtype)
    report = {}
    for kind, shapes in (("static", None), ("dynamic", _dynamic_shapes(component, inputs, length))):
        with export_patches(model), torch.no_grad(), default_dtype(dtype):
            try:
                torch.export.export(module, inputs, dynamic_shapes=shapes)
                report[kind] = "ok"
            except Exception as exc:  # the notebook shows whatever export raises
                report[kind] = _last_line(exc)
    return report


def _run_with_table(module: torch.nn.Module, *inputs: torch.Tensor) -> np.ndarray:
    """Export under the inputs' dtype, import with our converter table, build, run."""
    import tvm

    from kokoro_tvm.convert import to_relax
    from kokoro_tvm.reference import default_dtype

    with default_dtype(inputs[0].dtype):
        mod = to_relax(torch.export.export(module.eval(), inputs))
    vm = tvm.relax.VirtualMachine(tvm.compile(mod, target=tvm.target.Target({"kind": "llvm"})), tvm.cpu())
    out = vm["main"](*(tvm.runtime.tensor(x.numpy()) for x in inputs))
    return out.numpy() if hasattr(out, "numpy") else out[0].numpy()


CONVERTER_CASE_NAMES = (
    "linear_interpolate_clamp",
    "linear_upsample",
    "addmm_linear",
    "bmm",
    "conv1d_dilated",
    "conv1d_strided",
    "conv_transpose1d",
    "depthwise_conv_transpose",
    "layer_norm",
    "instance_norm",
    "rsqrt_of_int_constant",
)


def converter_case(name: str) -> tuple[torch.nn.Module, tuple[int, ...]]:
    """(module, input shape): each custom converter exercised the way Kokoro uses it. Built on demand, with
    torch's global RNG left as it was."""
    with torch.random.fork_rng():
        torch.manual_seed(0)
        cases = {
            "linear_interpolate_clamp": (
                _Fn(lambda m, x: F.interpolate(x, scale_factor=1 / 3, mode="linear")),
                (1, 2, 12),
            ),
            "linear_upsample": (_Fn(lambda m, x: F.interpolate(x, scale_factor=3, mode="linear")), (1, 2, 5)),
            "addmm_linear": (_Fn(lambda m, x: m[0](x), torch.nn.Linear(6, 4)), (3, 6)),
            "bmm": (_Fn(lambda m, x: x @ x.transpose(1, 2)), (2, 3, 4)),
            "conv1d_dilated": (_Fn(lambda m, x: m[0](x), torch.nn.Conv1d(3, 4, 3, dilation=2, padding=2)), (1, 3, 10)),
            "conv1d_strided": (_Fn(lambda m, x: m[0](x), torch.nn.Conv1d(3, 4, 4, stride=2, padding=1)), (1, 3, 10)),
            "conv_transpose1d": (_Fn(lambda m, x: m[0](x), torch.nn.ConvTranspose1d(4, 2, 20, 10, 5)), (1, 4, 6)),
            "depthwise_conv_transpose": (
                _Fn(lambda m, x: m[0](x), torch.nn.ConvTranspose1d(4, 4, 3, 2, 1, 1, groups=4)),
                (1, 4, 6),
            ),
            "layer_norm": (_Fn(lambda m, x: m[0](x), torch.nn.LayerNorm(6)), (2, 5, 6)),
            "instance_norm": (_Fn(lambda m, x: m[0](x), torch.nn.InstanceNorm1d(3, affine=True)), (2, 3, 7)),
            "rsqrt_of_int_constant": (_Fn(lambda m, x: x * torch.rsqrt(torch.tensor(2))), (2, 3)),
        }
    return cases[name]


def check_converter_case(name: str, seed: int = 0) -> dict:
    """One converter case in float64 through our table, against PyTorch float64."""
    from kokoro_tvm.reference import default_dtype

    module, shape = converter_case(name)
    module = module.double()
    x = torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad(), default_dtype(torch.float64):
        expected = module(x).numpy()
    got = _run_with_table(module, x)
    return {
        "case": name,
        "dtype": str(got.dtype),
        "max_abs_error": float(np.abs(got - expected).max()),
        "max_abs_value": float(np.abs(expected).max()),
    }


def fix_checks(model, seed: int = 0, tokens: int = 12, frames: int = 10) -> list[dict]:
    """Each export fix against what it replaces, on `model` (float32): the maximum absolute difference."""
    from kokoro_tvm.export import ExportableCustomSTFT, component_module, export_patches
    from kokoro_tvm.ops.lstm import masked_lstm
    from kokoro_tvm.reference import ExplicitNoiseSource, default_dtype

    g = torch.Generator().manual_seed(seed)
    rows = []
    with torch.no_grad(), default_dtype(torch.float32):
        lstm = model.text_encoder.lstm
        x = torch.randn(3, tokens, lstm.input_size, generator=g)
        lengths = torch.tensor([tokens, 1, tokens // 2])
        want = [
            torch.nn.functional.pad(lstm(x[b : b + 1, :n])[0], (0, 0, 0, tokens - n))
            for b, n in enumerate(lengths.tolist())
        ]
        rows.append(
            {
                "fix": "masked_lstm vs nn.LSTM per sample (lengths T, 1, T/2)",
                "max_abs_diff": float((masked_lstm(x, lengths, lstm) - torch.cat(want)).abs().max()),
            }
        )

        stft = model.decoder.generator.stft
        wave = torch.randn(2, 600, generator=g)
        (m0, p0), (m1, p1) = stft.transform(wave), ExportableCustomSTFT(stft).transform(wave)
        rows.append(
            {
                "fix": "ExportableCustomSTFT (torch.where) vs CustomSTFT (bool index_put)",
                "max_abs_diff": float(max((m0 - m1).abs().max(), (p0 - p1).abs().max())),
            }
        )

        source = model.decoder.generator.m_source
        f0 = torch.rand(1, 1200, 1, generator=g) * 300
        torch.manual_seed(seed)
        stock, _, _ = source.l_sin_gen(f0)
        torch.manual_seed(seed)
        phase = torch.rand(1, 9)
        phase[:, 0] = 0
        additive = torch.empty(1, 9, 1200).transpose(1, 2).normal_()
        ours, _ = ExplicitNoiseSource(source, phase, additive).sine_waves(f0)
        rows.append(
            {
                "fix": "ExplicitNoiseSource vs stock SineGen (same draws)",
                "max_abs_diff": float((stock - ours).abs().max()),
            }
        )

        ids = torch.randint(1, 178, (1, tokens), generator=g)
        full = torch.tensor([tokens])
        stock_t = model.text_encoder(ids, full, torch.zeros(1, tokens, dtype=torch.bool))
        with export_patches(model):
            ours_t = component_module(model, "text_encoder")(ids, full)
        rows.append(
            {
                "fix": "text_encoder wrapper vs kokoro TextEncoder (pack_padded)",
                "max_abs_diff": float((stock_t - ours_t).abs().max()),
            }
        )

        en = torch.randn(1, 640, frames, generator=g)
        style = torch.randn(1, 128, generator=g)
        f0_stock, n_stock = model.predictor.F0Ntrain(en, style)
        f0_ours, n_ours = component_module(model, "f0n")(en, style, torch.tensor([frames]))
        rows.append(
            {
                "fix": "f0n wrapper vs kokoro F0Ntrain",
                "max_abs_diff": float(max((f0_stock - f0_ours).abs().max(), (n_stock - n_ours).abs().max())),
            }
        )
    return rows
