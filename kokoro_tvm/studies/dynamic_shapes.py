"""The dynamic-shape study: each component exported and built with a symbolic length (torch.export `Dim`, the
registry's length relations for inputs at 2F and 600F), through our export patches, converter table and CPU
pipeline (notebooks 01 and 05; NOTES/bucketing.md)."""

from __future__ import annotations

import numpy as np
import torch

from kokoro_tvm.components import TOKENS, component
from kokoro_tvm.config import MAX_PHONEMES
from kokoro_tvm.studies.hazards import _attempt, _last_line

MAX_DYNAMIC_FRAMES = 5000  # the symbolic frame length's upper bound in this study


def _dynamic_shapes(name: str) -> tuple:
    """torch.export dynamic_shapes with one symbolic length n on every length axis of component `name`, scaled
    as the registry says (F0 and N at 2n, the SineGen noise at 600n)."""
    from torch.export import Dim

    spec = component(name)
    n = Dim("n", min=2, max=MAX_PHONEMES if spec.axis == TOKENS else MAX_DYNAMIC_FRAMES)
    return tuple(
        None if i.length_axis is None else {i.length_axis: n if i.length_multiple == 1 else i.length_multiple * n}
        for i in spec.inputs
    )


def dynamic_build(model, component: str, lengths: tuple[int, ...] = (16, 40)) -> dict:
    """One build with a symbolic length, through our export patches, converter table and CPU pipeline: the
    stage it reaches (export, import, compile, run), the error where it stops, and otherwise its largest
    difference from PyTorch at each of `lengths` with the build and run seconds."""
    import time

    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.converters import to_relax
    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, lift_weight_transforms
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    dtype = next(model.parameters()).dtype
    module = component_module(model, component)
    inputs = example_inputs(ComponentShape(component, lengths[0]), dtype)
    report: dict = {"component": component, "dtype": str(dtype).removeprefix("torch."), "lengths": list(lengths)}
    state: dict = {}

    def export():
        with export_patches(model), torch.no_grad(), default_dtype(dtype):
            state["ep"] = torch.export.export(
                module, inputs, dynamic_shapes=_dynamic_shapes(component)
            )

    def import_():
        with default_dtype(dtype):
            state["mod"] = lift_weight_transforms(to_relax(state["ep"], keep_params_as_input=True))

    def compile_():
        ep = state["ep"]
        named = dict(ep.named_parameters())
        raw = [named[p].detach().numpy() for p in ep.graph_signature.parameters]
        start = time.perf_counter()
        state["runner"] = compile_and_load(state["mod"], params=raw, transform_params=TRANSFORM_PARAMS)
        report["compile_s"] = time.perf_counter() - start

    def run():
        runner = state["runner"]
        report["max_abs_diff"], report["run_s"] = {}, {}
        for n in lengths:
            xs = example_inputs(ComponentShape(component, n), dtype)
            with torch.no_grad(), export_patches(model), default_dtype(dtype):
                expected = module(*xs)
            expected = expected if isinstance(expected, tuple) else (expected,)
            tensors = runner.device_inputs(*(x.numpy() for x in xs))
            start = time.perf_counter()
            out = runner.run_on_device(*tensors)
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
    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    dtype = next(model.parameters()).dtype
    module = component_module(model, component)
    inputs = example_inputs(ComponentShape(component, length), dtype)
    report = {}
    for kind, shapes in (("static", None), ("dynamic", _dynamic_shapes(component))):
        with export_patches(model), torch.no_grad(), default_dtype(dtype):
            try:
                torch.export.export(module, inputs, dynamic_shapes=shapes)
                report[kind] = "ok"
            except Exception as exc:  # the notebook shows whatever export raises
                report[kind] = _last_line(exc)
    return report
