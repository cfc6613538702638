"""Reduced precision emulated in PyTorch, in float32, for the error budgets of kokoro_tvm.studies.precision.

`emulated_precision(model, names, kind)` makes the named Conv1d / ConvTranspose1d modules compute on rounded
input and weight, in float32:

- `bf16`: both rounded to bf16 (nearest even), what kokoro_tvm.compiler.bf16's kernel computes, up to the order
  of the float32 additions;
- `int8_tensor`: weights symmetric int8 per output channel, activations symmetric int8 with one dynamic scale
  per call (what a dynamically quantized VNNI conv takes);
- `int8_step`: the same weights, activations uint8 with one (scale, minimum) pair per time step over the
  channels: what a VNNI kernel (`vpdpbusd`: uint8 x int8) would take if it rescales its int32 sums per tap;
- `int8_channel`: activations uint8 with one (scale, zero point) per input channel for the call, the scales
  folded into the weights before they are rounded per output channel: a VNNI conv with one int32 reduction,
  the shape of the bf16 kernel.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
import torch.nn.functional as F

from kokoro_tvm.errors import InputError


def _round(t):
    return t.to(torch.bfloat16).float()


def _int8_per_tensor(t):
    """Symmetric int8 with one scale per call (max |x| / 127)."""
    scale = t.abs().max().clamp(min=1e-12) / 127
    return (t / scale).round().clamp(-127, 127) * scale


def _uint8_per_step(t):
    """uint8 with one (scale, minimum) pair per time step: x ~ minimum + scale * q, q in 0..255, over the channel
    axis (dim 1 of (batch, channels, steps)), so a quiet stretch keeps its own resolution."""
    low = t.amin(dim=1, keepdim=True)
    scale = (t.amax(dim=1, keepdim=True) - low).clamp(min=1e-12) / 255
    return ((t - low) / scale).round().clamp(0, 255) * scale + low


def _int8_weight(w, out_dim: int = 0):
    """Symmetric int8 per output channel (`out_dim`: 0 for a conv's weight, 1 for a transposed conv's), the layout
    VNNI kernels and ONNX's int8 exports use."""
    others = tuple(d for d in range(w.dim()) if d != out_dim)
    scale = w.abs().amax(dim=others, keepdim=True).clamp(min=1e-12) / 127
    return (w / scale).round().clamp(-127, 127) * scale


def _channel_folded(x, w, out_dim: int):
    """uint8 activations with one (scale, zero point) per input channel for the call (its range widened to hold
    0, so the conv's zero padding is the integer zero point exactly), folded into the weights: w * scale[c] is
    then rounded to int8 per output channel. What a single-reduction VNNI conv computes: out[o] = ws[o] *
    sum(wq[o, c, k] * (q[c] - zero[c])), with the per-call weight folding O x C x K multiplies."""
    in_dim = 1 - out_dim
    low = x.amin(dim=(0, 2), keepdim=True).clamp(max=0)
    scale = (x.amax(dim=(0, 2), keepdim=True).clamp(min=0) - low).clamp(min=1e-12) / 255
    zero = (-low / scale).round()
    q = ((x / scale).round() + zero).clamp(0, 255)
    per_channel = scale.reshape([-1 if d == in_dim else 1 for d in range(w.dim())])
    folded = _int8_weight(w * per_channel, out_dim)
    return (q - zero) * scale, folded / per_channel


# kind -> (x, weight, the weight's output-channel dim) -> (rounded x, rounded weight)
EMULATIONS = {
    "bf16": lambda x, w, out_dim: (_round(x), _round(w)),
    "int8_tensor": lambda x, w, out_dim: (_int8_per_tensor(x), _int8_weight(w, out_dim)),
    "int8_step": lambda x, w, out_dim: (_uint8_per_step(x), _int8_weight(w, out_dim)),
    "int8_channel": _channel_folded,
}


@contextlib.contextmanager
def emulated_precision(model, names, kind: str = "bf16"):
    """Within the block, the named conv modules of `model` (and for bf16 its Linear layers) compute on input and
    weight rounded as `kind` (a key of EMULATIONS) says, in float32; their own forward comes back on exit."""
    if kind not in EMULATIONS:
        raise InputError(f"kind must be one of {sorted(EMULATIONS)}, got {kind!r}")
    rounded = EMULATIONS[kind]
    modules = dict(model.named_modules())
    patched = []
    try:
        for name in names:
            module = modules[name]
            if isinstance(module, torch.nn.Conv1d):

                def forward(x, m=module):
                    x, w = rounded(x, m.weight, 0)
                    return F.conv1d(x, w, m.bias, m.stride, m.padding, m.dilation, m.groups)

            elif isinstance(module, torch.nn.ConvTranspose1d):

                def forward(x, output_size=None, m=module):
                    x, w = rounded(x, m.weight, 1)
                    return F.conv_transpose1d(x, w, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation)

            elif isinstance(module, torch.nn.Linear) and kind == "bf16":  # elementwise rounding: any layout

                def forward(x, m=module):
                    x, w = rounded(x, m.weight, 0)
                    return F.linear(x, w, m.bias)

            else:
                raise ValueError(f"{name} is a {type(module).__name__}, not a convolution (or, for bf16, a Linear)")
            module.forward = forward
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again


@contextlib.contextmanager
def mixed_precision(model, plan: dict[str, list[str]]):
    """`plan` maps a kind (a key of EMULATIONS) to layer-name prefixes; every conv under a prefix computes in
    that kind within the block. A layer under two kinds' prefixes is an error, not a silent choice."""
    layers = [name for name, _ in conv_layers(model, "")]
    chosen: dict[str, str] = {}
    for kind, prefixes in plan.items():
        for name in layers:
            if any(name.startswith(p) for p in prefixes):
                if name in chosen:
                    raise ValueError(f"{name} is under both {chosen[name]} and {kind}")
                chosen[name] = kind
    with contextlib.ExitStack() as stack:
        for kind in plan:
            stack.enter_context(emulated_precision(model, [n for n, k in chosen.items() if k == kind], kind))
        yield chosen


def conv_layers(model, prefix: str = "decoder.") -> list[tuple[str, int]]:
    """(name, weights' size / groups: multiply-adds per output step of a conv, per input step of a transposed
    conv) of every conv module under `prefix`."""
    found = []
    for name, module in model.named_modules():
        if name.startswith(prefix) and isinstance(module, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
            found.append((name, int(np.prod(module.weight.shape)) // module.groups))
    return found


@contextlib.contextmanager
def counted_macs(model):
    """Within the block, {conv layer name: multiply-adds it computed} for every conv of `model`: its weights'
    size / groups times the output steps of each call (a conv), or times the input steps (a transposed conv:
    every input step meets every weight once)."""
    per_step = dict(conv_layers(model, ""))
    counts: dict[str, int] = {}
    handles = []
    try:
        for name, module in model.named_modules():
            if name in per_step:

                def hook(module, args, output, name=name):
                    steps = args[0] if isinstance(module, torch.nn.ConvTranspose1d) else output
                    counts[name] = counts.get(name, 0) + per_step[name] * steps.shape[0] * steps.shape[-1]

                handles.append(module.register_forward_hook(hook))
        yield counts
    finally:
        for handle in handles:
            handle.remove()
