"""Which layers may run in reduced precision: a measured per-layer error budget, in PyTorch, before anything is
compiled.

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

`layer_budget` runs pt.dynamic (float32, seeded SineGen noise) with one layer at a time rounded and reports the
audio SNR and log-mel distance against the all-float32 run; `group_budget` does the same for groups of layers
(the sets a build can choose), adding PESQ-WB / STOI; `plan_comparison` scores whole assignments of layer groups
to precisions on many texts. The registry's `BF16_CONVOLUTIONS` (kokoro_tvm.components) holds the groups the bf16
measurement admitted, and `INT8_CONVOLUTIONS` the int8 bulk that `--precision int8` builds (kokoro_tvm.compiler.int8,
the int8_channel rounding above).

    python -m kokoro_tvm.studies.precision [--text ...] [--layers [--kind int8_step]] [--int8 [--corpus N]]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

import numpy as np

from kokoro_tvm.components import BF16_CONVOLUTIONS, INT8_CONVOLUTIONS
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.runtime.buckets import parse_buckets

log = logging.getLogger(__name__)

BUDGET_TEXT = "The quick brown fox jumps over the lazy dog, and the five boxing wizards jump quickly."


def _round(t):
    return t.to(__import__("torch").bfloat16).float()


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
    """Within the block, the named conv modules of `model` compute on input and weight rounded as `kind`
    (a key of EMULATIONS) says, in float32; their own forward comes back on exit."""
    import torch
    import torch.nn.functional as F

    if kind not in EMULATIONS:
        raise ValueError(f"kind must be one of {sorted(EMULATIONS)}, got {kind!r}")
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

            else:
                raise ValueError(f"{name} is a {type(module).__name__}, not a convolution")
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
    import torch

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
    import torch

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


def _audio(model, chunk, style, seed: int) -> np.ndarray:
    from kokoro_tvm.reference.pt_dynamic import run_stages

    return run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed)).audio


def _setup(model, text: str, voice: str | None):

    chunk = prepare(text=text)[0]
    return chunk, load_voice(voice or DEFAULT_VOICE).style(len(chunk.phonemes))


def layer_budget(model, text: str = BUDGET_TEXT, voice: str | None = None, prefix: str = "decoder.", seed: int = 0,
                 kind: str = "bf16"):
    """One row per conv layer under `prefix`: that layer alone rounded as `kind`, against all-float32 (same
    noise)."""
    from kokoro_tvm.evaluation.metrics import log_mel_l1, snr_db

    chunk, style = _setup(model, text, voice)
    reference = _audio(model, chunk, style, seed)
    rows = []
    for name, macs in conv_layers(model, prefix):
        with emulated_precision(model, [name], kind):
            audio = _audio(model, chunk, style, seed)
        rows.append({"layer": name, "macs_per_step": macs, "snr_db": snr_db(reference, audio),
                     "log_mel_l1": log_mel_l1(reference, audio)})
    return rows


def group_budget(model, groups: dict[str, list[str]], text: str = BUDGET_TEXT, voice: str | None = None,
                 seed: int = 0, kind: str = "bf16") -> list[dict]:
    """One row per named group of layer prefixes (each group alone, then all groups together) rounded as `kind`
    (a key of EMULATIONS)."""
    from kokoro_tvm.evaluation.metrics import audio_metrics

    chunk, style = _setup(model, text, voice)
    reference = _audio(model, chunk, style, seed)
    layers = [name for name, _ in conv_layers(model, "")]
    rows = []
    for label, prefixes in [*groups.items(), ("all of the above", [p for ps in groups.values() for p in ps])]:
        names = [n for n in layers if any(n.startswith(p) for p in prefixes)]
        with emulated_precision(model, names, kind):
            audio = _audio(model, chunk, style, seed)
        metrics = audio_metrics(reference, audio)
        rows.append({"group": label, "layers": len(names), **{k: metrics[k] for k in ("snr_db", "pesq_wb", "stoi")}})
    return rows


# The generator's resblocks and noise resblocks: 128 / 256 channels at 800 and 4800 steps per second, about 88% of
# Kokoro's multiply-adds (the rest of the decoder runs at the frame rate, 40-80 steps per second). In the per-layer
# int8_step budget (`--layers --kind int8_step`) every one of them alone keeps >= 45 dB, while the frame-rate
# convs, the noise convs, the upsamplers and conv_post drop to 31-43 dB: so int8 goes where the arithmetic is and
# the layers that are cheap and sensitive stay bf16.
INT8_BULK = INT8_CONVOLUTIONS["decoder"]  # what `--precision int8` builds in int8: the registry's list


def int8_plans() -> dict[str, dict[str, list[str]]]:
    """The assignments `plan_comparison` scores: the bf16 build as it is, int8 on the bulk with bf16 elsewhere
    (activation scales per step, per tensor, per channel folded into the weights), and every bf16 layer in
    int8_step."""

    reduced = [p for prefixes in BF16_CONVOLUTIONS.values() for p in prefixes]
    rest = [p for p in reduced if p != "decoder.generator."] + [
        "decoder.generator.ups.", "decoder.generator.noise_convs.", "decoder.generator.conv_post"]
    return {
        "bf16 (the build)": {"bf16": reduced},
        "int8_step bulk + bf16": {"int8_step": list(INT8_BULK), "bf16": rest},
        "int8_tensor bulk + bf16": {"int8_tensor": list(INT8_BULK), "bf16": rest},
        "int8_channel bulk + bf16": {"int8_channel": list(INT8_BULK), "bf16": rest},
        "int8_step everywhere": {"int8_step": reduced},
    }


def plan_comparison(model, plans: dict[str, dict[str, list[str]]], texts, voice: str | None = None,
                    seed: int = 0) -> list[dict]:
    """One row per (text, plan): pt.dynamic float32 with the plan's layers emulated against pt.dynamic float32,
    same seeded noise: durations equal, audio SNR, PESQ-WB, STOI, and the share of the run's conv multiply-adds
    that each kind computes."""
    from kokoro_tvm.evaluation.metrics import audio_metrics
    from kokoro_tvm.reference.pt_dynamic import run_stages

    rows = []
    for index, text in enumerate(texts):
        chunk, style = _setup(model, text, voice)
        with counted_macs(model) as macs:
            reference = run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed))
        for label, plan in plans.items():
            with mixed_precision(model, plan) as chosen:
                stages = run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed))
            same = bool(np.array_equal(reference.durations, stages.durations))
            metrics = audio_metrics(reference.audio, stages.audio) if same else {}
            rows.append({"text": index, "chars": len(text), "plan": label, "durations_equal": same,
                         "audio_s": len(reference.audio) / 24000,
                         **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi")},
                         **{f"macs_share.{kind}": sum(macs.get(n, 0) for n, k in chosen.items() if k == kind) /
                            sum(macs.values()) for kind in plan}})
        log.info("text %d/%d done", index + 1, len(texts))
    return rows


def precision_comparison(model, weights_fingerprint: str, texts, voice: str | None = None, seed: int = 0,
                         precisions=("fp32", "bf16")):
    """(rows, audio): each text spoken by pt.dynamic fp32 and by TVM's symbolic builds at each precision (same
    seeded noise); one row per (text, precision) with the per-stage relative L2, durations equal, and the audio
    metrics against pt.dynamic fp32; audio as {text index: {"pt_dynamic" | "tvm_<precision>": array}}."""
    from kokoro_tvm.compiled import compiled_kokoro, resolve_precision
    from kokoro_tvm.evaluation.metrics import audio_metrics
    from kokoro_tvm.evaluation.parity import stage_errors
    from kokoro_tvm.reference.pt_dynamic import run_stages

    runtimes = {
        p: compiled_kokoro(model, weights_fingerprint, "float32", buckets=parse_buckets("dynamic"),
                           precision=resolve_precision(p)[1])
        for p in precisions
    }
    rows, audio = [], {}
    for index, text in enumerate(texts):
        chunk, style = _setup(model, text, voice)
        reference = run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed))
        audio[index] = {"pt_dynamic": reference.audio}
        for name, runtime in runtimes.items():
            stages = runtime.run_stages(chunk.padded_ids, style, 1.0, SeededNoise(seed))
            audio[index][f"tvm_{name}"] = stages.audio
            same = bool(np.array_equal(reference.durations, stages.durations))
            metrics = audio_metrics(reference.audio, stages.audio) if same else {}
            rows.append({"text": index, "precision": name, "durations_equal": same,
                         **{f"rel_l2.{k}": v for k, v in stage_errors(reference, stages).items()},
                         **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi", "log_mel_l1")}})
    return rows, audio


def main(argv=None) -> int:
    import torch

    from kokoro_tvm.studies.audio_comparison import pick_sentences
    from kokoro_tvm.weights.resolve import load_kmodel

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text", action="append", help="the budget text (default: a pangram); repeat with --int8 "
                        "to score the plans on these texts too")
    parser.add_argument("--layers", action="store_true", help="also one row per decoder conv layer")
    parser.add_argument("--kind", default="bf16", choices=sorted(EMULATIONS), help="the rounding of --layers")
    parser.add_argument("--int8", action="store_true", help="also the groups in int8 (emulated) and the int8 plans "
                        "on --corpus sentences spread over the corpus's lengths (notebook 07's pick) and the --text")
    parser.add_argument("--corpus", type=int, default=20, help="how many corpus sentences --int8 scores (0: none)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    model, _ = load_kmodel(None, dtype=torch.float32)
    texts = args.text or [BUDGET_TEXT]
    groups = {k: list(v) for k, v in BF16_CONVOLUTIONS.items()}
    record = {"groups": group_budget(model, groups, texts[0])}
    if args.int8:
        for kind in ("int8_tensor", "int8_step", "int8_channel"):
            record[f"{kind}_groups"] = group_budget(model, groups, texts[0], kind=kind)
        corpus = pick_sentences(load_sentences(), args.corpus) if args.corpus else []
        record["plans"] = plan_comparison(model, int8_plans(), corpus + texts)
    if args.layers:
        record["layers"] = layer_budget(model, texts[0], kind=args.kind)
    json.dump(record, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
