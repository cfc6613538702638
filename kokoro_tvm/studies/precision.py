"""Which layers may run in bf16: a measured per-layer error budget, in PyTorch, before anything is compiled.

`bf16_emulation(model, names)` makes the named Conv1d / ConvTranspose1d modules round their input and weight to
bf16 (nearest even) and compute in float32: what kokoro_tvm.compiler.bf16's kernel computes, up to the order of
the float32 additions. `layer_budget` runs pt.dynamic (float32, seeded SineGen noise) with one layer at a time
in bf16 and reports the audio SNR and log-mel distance against the all-float32 run; `group_budget` does the same
for groups of layers (the sets a build can choose), adding PESQ-WB / STOI. The registry's
`BF16_CONVOLUTIONS` (kokoro_tvm.components) holds the groups this measurement admitted.

    python -m kokoro_tvm.studies.precision [--text ...] [--layers] [--int8]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys

import numpy as np

log = logging.getLogger(__name__)

BUDGET_TEXT = "The quick brown fox jumps over the lazy dog, and the five boxing wizards jump quickly."


def _round(t):
    return t.to(__import__("torch").bfloat16).float()


def _int8_activation(t):
    """Symmetric int8 with one scale per call (max |x| / 127): what a dynamic-quantized VNNI conv would feed."""
    scale = t.abs().max().clamp(min=1e-12) / 127
    return (t / scale).round().clamp(-127, 127) * scale


def _int8_weight(w):
    """Symmetric int8 per output channel (the layout VNNI kernels and ONNX's int8 exports use)."""
    scale = w.abs().amax(dim=tuple(range(1, w.dim())), keepdim=True).clamp(min=1e-12) / 127
    return (w / scale).round().clamp(-127, 127) * scale


EMULATIONS = {"bf16": (_round, _round), "int8": (_int8_activation, _int8_weight)}


@contextlib.contextmanager
def bf16_emulation(model, names, kind: str = "bf16"):
    """Within the block, the named conv modules of `model` compute on rounded input and weight: bf16 (nearest
    even), or `kind="int8"` (activations per tensor, weights per output channel, symmetric), in float32."""
    import torch
    import torch.nn.functional as F

    round_x, round_w = EMULATIONS[kind]
    modules = dict(model.named_modules())
    patched = []
    try:
        for name in names:
            module = modules[name]
            if isinstance(module, torch.nn.Conv1d):

                def forward(x, m=module):
                    return F.conv1d(round_x(x), round_w(m.weight), m.bias, m.stride, m.padding, m.dilation, m.groups)

            elif isinstance(module, torch.nn.ConvTranspose1d):

                def forward(x, output_size=None, m=module):
                    x, w = round_x(x), round_w(m.weight)
                    return F.conv_transpose1d(x, w, m.bias, m.stride, m.padding, m.output_padding, m.groups, m.dilation)

            else:
                raise ValueError(f"{name} is a {type(module).__name__}, not a convolution")
            module.forward = forward
            patched.append(module)
        yield
    finally:
        for module in patched:
            del module.forward  # the class's forward again


def conv_layers(model, prefix: str = "decoder.") -> list[tuple[str, int]]:
    """(name, multiply-adds per output step) of every conv module under `prefix`."""
    import torch

    found = []
    for name, module in model.named_modules():
        if name.startswith(prefix) and isinstance(module, (torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
            found.append((name, int(np.prod(module.weight.shape)) // module.groups))
    return found


def _audio(model, chunk, style, seed: int) -> np.ndarray:
    from kokoro_tvm.reference.noise import SeededNoise
    from kokoro_tvm.reference.pt_dynamic import run_stages

    return run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed)).audio


def _setup(model, text: str, voice: str | None):
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice

    chunk = prepare(text=text)[0]
    return chunk, load_voice(voice or DEFAULT_VOICE).style(len(chunk.phonemes))


def layer_budget(model, text: str = BUDGET_TEXT, voice: str | None = None, prefix: str = "decoder.", seed: int = 0):
    """One row per conv layer under `prefix`: that layer alone in bf16, against all-float32 (same noise)."""
    from kokoro_tvm.evaluation.metrics import log_mel_l1, snr_db

    chunk, style = _setup(model, text, voice)
    reference = _audio(model, chunk, style, seed)
    rows = []
    for name, macs in conv_layers(model, prefix):
        with bf16_emulation(model, [name]):
            audio = _audio(model, chunk, style, seed)
        rows.append({"layer": name, "macs_per_step": macs, "snr_db": snr_db(reference, audio),
                     "log_mel_l1": log_mel_l1(reference, audio)})
    return rows


def group_budget(model, groups: dict[str, list[str]], text: str = BUDGET_TEXT, voice: str | None = None,
                 seed: int = 0, kind: str = "bf16") -> list[dict]:
    """One row per named group of layer prefixes (each group alone, then all groups together) rounded to `kind`
    (bf16, or int8 for the measured try of VNNI kernels that nothing compiles yet)."""
    from kokoro_tvm.evaluation.metrics import audio_metrics

    chunk, style = _setup(model, text, voice)
    reference = _audio(model, chunk, style, seed)
    layers = [name for name, _ in conv_layers(model, "")]
    rows = []
    for label, prefixes in [*groups.items(), ("all of the above", [p for ps in groups.values() for p in ps])]:
        names = [n for n in layers if any(n.startswith(p) for p in prefixes)]
        with bf16_emulation(model, names, kind):
            audio = _audio(model, chunk, style, seed)
        metrics = audio_metrics(reference, audio)
        rows.append({"group": label, "layers": len(names), **{k: metrics[k] for k in ("snr_db", "pesq_wb", "stoi")}})
    return rows


def precision_comparison(model, weights_fingerprint: str, texts, voice: str | None = None, seed: int = 0,
                         precisions=("fp32", "bf16")):
    """(rows, audio): each text spoken by pt.dynamic fp32 and by TVM's symbolic builds at each precision (same
    seeded noise); one row per (text, precision) with the per-stage relative L2, durations equal, and the audio
    metrics against pt.dynamic fp32; audio as {text index: {"pt_dynamic" | "tvm_<precision>": array}}."""
    from kokoro_tvm.compiled import compiled_kokoro, resolve_precision
    from kokoro_tvm.evaluation.metrics import audio_metrics
    from kokoro_tvm.evaluation.parity import stage_errors
    from kokoro_tvm.reference.noise import SeededNoise
    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.runtime.buckets import parse_buckets

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

    from kokoro_tvm.components import BF16_CONVOLUTIONS
    from kokoro_tvm.weights.resolve import load_kmodel

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--text", default=BUDGET_TEXT)
    parser.add_argument("--layers", action="store_true", help="also one row per decoder conv layer")
    parser.add_argument("--int8", action="store_true", help="also the same groups in int8 (emulated)")
    args = parser.parse_args(argv)
    model, _ = load_kmodel(None, dtype=torch.float32)
    groups = {k: list(v) for k, v in BF16_CONVOLUTIONS.items()}
    record = {"groups": group_budget(model, groups, args.text)}
    if args.int8:
        record["int8_groups"] = group_budget(model, groups, args.text, kind="int8")
    if args.layers:
        record["layers"] = layer_budget(model, args.text)
    json.dump(record, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
