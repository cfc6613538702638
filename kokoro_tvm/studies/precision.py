"""Which layers may run in reduced precision: a measured per-layer error budget, in PyTorch, before anything is
compiled.

The roundings are kokoro_tvm.studies.emulation's (`emulated_precision`, `EMULATIONS`).

`layer_budget` runs pt.dynamic (float32, seeded SineGen noise) with one layer at a time rounded and reports the
audio SNR and log-mel distance against the all-float32 run; `group_budget` does the same for groups of layers
(the sets a build can choose), adding PESQ-WB / STOI; `plan_comparison` scores whole assignments of layer groups
to precisions on many texts. The registry's `BF16_CONVOLUTIONS` (kokoro_tvm.components) holds the groups the bf16
measurement admitted, and `INT8_CONVOLUTIONS` the int8 bulk that `--precision int8` builds (kokoro_tvm.compiler.int8,
the int8_channel rounding above).

    python -m kokoro_tvm.studies.precision [--text ...] [--layers [--kind int8_step]] [--int8 [--corpus N]]
        [--durations PREFIX]

`duration_budget` (--durations) asks the question for Linear layers before the durations (ALBERT's): does any
token's duration change when they compute in bf16?
"""

from __future__ import annotations

import argparse
import json
import logging
import sys

import numpy as np
import torch

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.components import BF16_CONVOLUTIONS, INT8_CONVOLUTIONS
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.reference.pt_dynamic import predict_durations, run_stages
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.studies.emulation import EMULATIONS, conv_layers, counted_macs, emulated_precision, mixed_precision
from kokoro_tvm.weights.resolve import load_kmodel

log = logging.getLogger(__name__)

BUDGET_TEXT = "The quick brown fox jumps over the lazy dog, and the five boxing wizards jump quickly."


def _audio(model, chunk, style, seed: int) -> np.ndarray:

    return run_stages(model, chunk.padded_ids, style, 1.0, SeededNoise(seed)).audio


def _setup(model, text: str, voice: str | None):

    chunk = prepare(text=text)[0]
    return chunk, load_voice(voice or DEFAULT_VOICE).style(len(chunk.phonemes))


def layer_budget(
    model,
    text: str = BUDGET_TEXT,
    voice: str | None = None,
    prefix: str = "decoder.",
    seed: int = 0,
    kind: str = "bf16",
):
    """One row per conv layer under `prefix`: that layer alone rounded as `kind`, against all-float32 (same
    noise)."""
    from kokoro_tvm.evaluation.metrics import log_mel_l1, snr_db

    chunk, style = _setup(model, text, voice)
    reference = _audio(model, chunk, style, seed)
    rows = []
    for name, macs in conv_layers(model, prefix):
        with emulated_precision(model, [name], kind):
            audio = _audio(model, chunk, style, seed)
        rows.append(
            {
                "layer": name,
                "macs_per_step": macs,
                "snr_db": snr_db(reference, audio),
                "log_mel_l1": log_mel_l1(reference, audio),
            }
        )
    return rows


def group_budget(
    model,
    groups: dict[str, list[str]],
    text: str = BUDGET_TEXT,
    voice: str | None = None,
    seed: int = 0,
    kind: str = "bf16",
) -> list[dict]:
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
        "decoder.generator.ups.",
        "decoder.generator.noise_convs.",
        "decoder.generator.conv_post",
    ]
    return {
        "bf16 (the build)": {"bf16": reduced},
        "int8_step bulk + bf16": {"int8_step": list(INT8_BULK), "bf16": rest},
        "int8_tensor bulk + bf16": {"int8_tensor": list(INT8_BULK), "bf16": rest},
        "int8_channel bulk + bf16": {"int8_channel": list(INT8_BULK), "bf16": rest},
        "int8_step everywhere": {"int8_step": reduced},
    }


def plan_comparison(
    model, plans: dict[str, dict[str, list[str]]], texts, voice: str | None = None, seed: int = 0
) -> list[dict]:
    """One row per (text, plan): pt.dynamic float32 with the plan's layers emulated against pt.dynamic float32,
    same seeded noise: durations equal, audio SNR, PESQ-WB, STOI, and the share of the run's conv multiply-adds
    that each kind computes."""
    from kokoro_tvm.evaluation.metrics import audio_metrics

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
            rows.append(
                {
                    "text": index,
                    "chars": len(text),
                    "plan": label,
                    "durations_equal": same,
                    "audio_s": len(reference.audio) / 24000,
                    **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi")},
                    **{
                        f"macs_share.{kind}": sum(macs.get(n, 0) for n, k in chosen.items() if k == kind)
                        / sum(macs.values())
                        for kind in plan
                    },
                }
            )
        log.info("text %d/%d done", index + 1, len(texts))
    return rows


def precision_comparison(
    model, weights_fingerprint: str, texts, voice: str | None = None, seed: int = 0, precisions=("fp32", "bf16")
):
    """(rows, audio): each text spoken by pt.dynamic fp32 and by TVM's symbolic builds at each precision (same
    seeded noise); one row per (text, precision) with the per-stage relative L2, durations equal, and the audio
    metrics against pt.dynamic fp32; audio as {text index: {"pt_dynamic" | "tvm_<precision>": array}}."""
    from kokoro_tvm.evaluation.metrics import audio_metrics, stage_errors

    runtimes = {p: compiled_kokoro(model, weights_fingerprint, p, buckets=parse_buckets("dynamic")) for p in precisions}
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
            rows.append(
                {
                    "text": index,
                    "precision": name,
                    "durations_equal": same,
                    **{f"rel_l2.{k}": v for k, v in stage_errors(reference, stages).items()},
                    **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi", "log_mel_l1")},
                }
            )
    return rows, audio


def duration_budget(model, prefix: str, texts, voice: str | None = None) -> dict:
    """Durations with every Linear layer under `prefix` (e.g. "bert." for ALBERT) in bf16 (emulated: operands
    rounded, float32 sums, as vdpbf16ps), against float32, over every chunk of `texts`: how many chunks and tokens
    get another duration. Builds must keep durations identical, so any change rules the layers out."""
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n.startswith(prefix)]
    if not names:
        raise InputError(f"no Linear layer of the model is named {prefix}...")
    pack = load_voice(voice or DEFAULT_VOICE)
    chunks = [chunk for text in texts for chunk in prepare(text=text)]
    changed_chunks = changed_tokens = tokens = 0
    for chunk in chunks:
        style = pack.style(len(chunk.phonemes))
        exact = predict_durations(model, chunk.padded_ids, style)
        with emulated_precision(model, names, "bf16"):
            rounded = predict_durations(model, chunk.padded_ids, style)
        changed = int((exact != rounded).sum())
        changed_chunks += changed > 0
        changed_tokens += changed
        tokens += exact.size
    return {
        "prefix": prefix,
        "layers": len(names),
        "chunks": len(chunks),
        "chunks_changed": changed_chunks,
        "tokens": tokens,
        "tokens_changed": changed_tokens,
    }


def main(argv=None) -> int:

    from kokoro_tvm.evaluation.backends import pick_sentences

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--text",
        action="append",
        help="the budget text (default: a pangram); repeat with --int8 to score the plans on these texts too",
    )
    parser.add_argument("--layers", action="store_true", help="also one row per decoder conv layer")
    parser.add_argument("--kind", default="bf16", choices=sorted(EMULATIONS), help="the rounding of --layers")
    parser.add_argument(
        "--int8",
        action="store_true",
        help="also the groups in int8 (emulated) and the int8 plans "
        "on --corpus sentences spread over the corpus's lengths (notebook 07's pick) and the --text",
    )
    parser.add_argument("--corpus", type=int, default=20, help="how many corpus sentences --int8 scores (0: none)")
    parser.add_argument(
        "--durations",
        action="append",
        metavar="PREFIX",
        help="also: do the durations survive the "
        "Linear layers under PREFIX (e.g. bert.) in bf16, over every corpus sentence (repeatable)",
    )
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
    for prefix in args.durations or []:
        record.setdefault("durations", []).append(duration_budget(model, prefix, load_sentences()))
    json.dump(record, sys.stdout, indent=1)
    print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
