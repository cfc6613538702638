"""Each custom converter of kokoro_tvm.compiler.converters exercised the way Kokoro uses it, on a tiny module,
and checked in float64 against PyTorch (notebook 02 and tests/test_converters.py)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as F

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.reference.pt_dynamic import default_dtype


class Lambda(torch.nn.Module):
    def __init__(self, fn: Callable, *modules: torch.nn.Module):
        super().__init__()
        self.fn, self.mods = fn, torch.nn.ModuleList(modules)

    def forward(self, *xs):
        return self.fn(self.mods, *xs)


def _run_with_table(module: torch.nn.Module, *inputs: torch.Tensor) -> np.ndarray:
    """Export under the inputs' dtype, import with our converter table, build with TVM's default pipeline, run."""
    from kokoro_tvm.compiler.converters import to_relax

    with default_dtype(inputs[0].dtype):
        mod = to_relax(torch.export.export(module.eval(), inputs))
    return compile_and_load(mod, stock=True)(*(x.numpy() for x in inputs))[0]


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
                Lambda(lambda m, x: F.interpolate(x, scale_factor=1 / 3, mode="linear")),
                (1, 2, 12),
            ),
            "linear_upsample": (Lambda(lambda m, x: F.interpolate(x, scale_factor=3, mode="linear")), (1, 2, 5)),
            "addmm_linear": (Lambda(lambda m, x: m[0](x), torch.nn.Linear(6, 4)), (3, 6)),
            "bmm": (Lambda(lambda m, x: x @ x.transpose(1, 2)), (2, 3, 4)),
            "conv1d_dilated": (
                Lambda(lambda m, x: m[0](x), torch.nn.Conv1d(3, 4, 3, dilation=2, padding=2)),
                (1, 3, 10),
            ),
            "conv1d_strided": (Lambda(lambda m, x: m[0](x), torch.nn.Conv1d(3, 4, 4, stride=2, padding=1)), (1, 3, 10)),
            "conv_transpose1d": (Lambda(lambda m, x: m[0](x), torch.nn.ConvTranspose1d(4, 2, 20, 10, 5)), (1, 4, 6)),
            "depthwise_conv_transpose": (
                Lambda(lambda m, x: m[0](x), torch.nn.ConvTranspose1d(4, 4, 3, 2, 1, 1, groups=4)),
                (1, 4, 6),
            ),
            "layer_norm": (Lambda(lambda m, x: m[0](x), torch.nn.LayerNorm(6)), (2, 5, 6)),
            "instance_norm": (Lambda(lambda m, x: m[0](x), torch.nn.InstanceNorm1d(3, affine=True)), (2, 3, 7)),
            "rsqrt_of_int_constant": (Lambda(lambda m, x: x * torch.rsqrt(torch.tensor(2))), (2, 3)),
        }
    return cases[name]


def check_converter_case(name: str, seed: int = 0) -> dict:
    """One converter case in float64 through our table, against PyTorch float64."""

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
