"""Choosing a bucket set by measurement: corpus lengths, padded compute, build cost. Needs torch (measurement only).

- corpus_lengths: every sentence of kokoro_tvm/data/sentences_en.txt through the text front-end and PyTorch's
  duration predictor: tokens and aligned frames of each chunk the model would speak.
- flop_model: FLOPs of each component (torch's FlopCounterMode: convolutions and matmuls) at a few lengths,
  fitted per axis with a quadratic (ALBERT's attention is quadratic in T; the rest is linear); the fit's largest
  relative residual is reported with it.
- evaluate: for a bucket set, the padded compute over the useful compute of the corpus, and how many artifacts
  it needs (in total, and for this corpus).
- build_cost_model: compile seconds and library bytes measured at a few lengths per component, fitted linearly,
  so a whole candidate set's build cost is estimated without building all of it (the estimate is labelled so).
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.components import FRAME_COMPONENTS, TOKEN_COMPONENTS
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.runtime.buckets import BucketSet, DynamicLengths
from kokoro_tvm.runtime.vm import ComponentRunner
from kokoro_tvm.timing import median_seconds

log = logging.getLogger(__name__)


def corpus_lengths(model, sentences: list[str], voice: str, speed: float = 1.0) -> list[dict]:
    """One record per chunk: sentence index, tokens (with the two pads), frames predicted by PyTorch."""
    from kokoro_tvm.reference.pt_dynamic import predict_durations

    pack = load_voice(voice)
    records = []
    for index, sentence in enumerate(sentences):
        for chunk in prepare(text=sentence):
            durations = predict_durations(model, chunk.padded_ids, pack.style(len(chunk.phonemes)), speed)
            records.append({"sentence": index, "tokens": len(chunk.padded_ids), "frames": int(durations.sum())})
    return records


@dataclass(frozen=True)
class Polynomial:
    coefficients: tuple[float, ...]  # highest power first (numpy.polyval order)
    max_relative_residual: float

    def __call__(self, length) -> np.ndarray:
        return np.polyval(self.coefficients, np.asarray(length, dtype=np.float64))


def _fit(lengths, values, degree: int) -> Polynomial:
    lengths, values = np.asarray(lengths, dtype=np.float64), np.asarray(values, dtype=np.float64)
    coefficients = np.polyfit(lengths, values, degree)
    residual = np.abs(np.polyval(coefficients, lengths) - values) / np.maximum(np.abs(values), 1e-12)
    return Polynomial(tuple(float(c) for c in coefficients), float(residual.max()))


def component_gflop(model, component: str, length: int) -> float:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs

    module = component_module(model, component)
    inputs = example_inputs(ComponentShape(component, length), next(model.parameters()).dtype)
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        module(*inputs)
    return counter.get_total_flops() / 1e9


@dataclass(frozen=True)
class FlopModel:
    tokens: Polynomial  # GFLOP of the three token-axis components at T tokens
    frames: Polynomial  # GFLOP of F0N and the decoder at F frames
    samples: dict  # the measurements the fits came from

    def gflop(self, tokens, frames) -> np.ndarray:
        return self.tokens(tokens) + self.frames(frames)


def flop_model(model, token_lengths=(32, 96, 256, 512), frame_lengths=(64, 256, 768, 2048)) -> FlopModel:
    token_gflop = [sum(component_gflop(model, c, n) for c in TOKEN_COMPONENTS) for n in token_lengths]
    frame_gflop = [sum(component_gflop(model, c, n) for c in FRAME_COMPONENTS) for n in frame_lengths]
    return FlopModel(
        _fit(token_lengths, token_gflop, 2),
        _fit(frame_lengths, frame_gflop, 2),
        {
            "tokens": dict(zip(token_lengths, token_gflop, strict=True)),
            "frames": dict(zip(frame_lengths, frame_gflop, strict=True)),
        },
    )


def evaluate(buckets: BucketSet | DynamicLengths, lengths: list[dict], flops: FlopModel) -> dict:
    """Padded compute over useful compute for every chunk of the corpus in this bucket set (or in the
    symbolic-length builds, which pad each length to a whole tile)."""
    tokens = np.array([r["tokens"] for r in lengths])
    frames = np.array([r["frames"] for r in lengths])
    token_b = np.array([buckets.token_bucket(int(n)) for n in tokens])
    frame_b = np.array([buckets.frame_bucket(int(n)) for n in frames])
    useful, padded = flops.gflop(tokens, frames), flops.gflop(token_b, frame_b)
    return {
        "name": buckets.name,
        "token_buckets": f"multiples of {buckets.tile}" if buckets.symbolic else list(buckets.tokens),
        "frame_buckets": f"multiples of {buckets.tile}" if buckets.symbolic else list(buckets.frames),
        "artifacts": buckets.artifacts,
        "artifacts_used": buckets.artifacts
        if buckets.symbolic
        else len(TOKEN_COMPONENTS) * len(set(token_b.tolist())) + len(FRAME_COMPONENTS) * len(set(frame_b.tolist())),
        "mean_overhead": float(np.mean(padded / useful - 1)),  # per utterance, then averaged
        "total_overhead": float(padded.sum() / useful.sum() - 1),  # the corpus's compute as a whole
        "max_overhead": float(np.max(padded / useful - 1)),
        "token_padding": float(token_b.sum() / tokens.sum() - 1),
        "frame_padding": float(frame_b.sum() / frames.sum() - 1),
    }


def build_cost_model(records: list[dict]) -> dict[str, dict]:
    """Linear fits of build seconds and library bytes against length, per component, from precompile records
    (kokoro_tvm.compiler.build.precompile) of freshly built artifacts. A component measured at one length only
    (a FAST run) gets a constant fit, "degree" 0, logged: its cost per artifact is taken as length-independent,
    which underestimates the library bytes of longer buckets (they grow with the length)."""
    fits = {}
    for component in (*TOKEN_COMPONENTS, *FRAME_COMPONENTS):
        rows = [r for r in records if r["component"] == component]
        if not rows:
            raise ValueError(f"no build record of {component}: the build-cost model needs every component")
        lengths = [r["length"] for r in rows]
        degree = 1 if len(set(lengths)) >= 2 else 0
        if degree == 0:
            log.warning("%s built at one length only (%d): its build cost is taken as constant", component, lengths[0])
        fits[component] = {
            "build_seconds": _fit(lengths, [r["build_seconds"] for r in rows], degree),
            "library_bytes": _fit(lengths, [r["library_bytes"] for r in rows], degree),
            "degree": degree,
        }
    return fits


def estimated_build_cost(buckets: BucketSet, fits: dict[str, dict]) -> dict:
    """A whole set's build seconds and disk from the fits (an estimate: labelled so wherever it is shown)."""
    seconds = disk = 0.0
    for component, sizes in [(c, buckets.tokens) for c in TOKEN_COMPONENTS] + [
        (c, buckets.frames) for c in FRAME_COMPONENTS
    ]:
        seconds += float(np.sum(fits[component]["build_seconds"](sizes)))
        disk += float(np.sum(fits[component]["library_bytes"](sizes)))
    return {"estimated_build_seconds": seconds, "estimated_library_bytes": disk}


def _profile_here(folder: str, component: str, length: int, runs: int) -> dict:

    from kokoro_tvm.compiler.export import ComponentShape, example_inputs

    artifact = Artifact.open(folder)
    dtype = artifact.manifest["key"]["dtype"]
    import torch
    import tvm  # noqa: F401  (the TVM runtime itself is not the artifact's memory)

    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length), getattr(torch, dtype))]
    baseline = _reset_peak_rss()
    runner = ComponentRunner(artifact)
    run_s = median_seconds(lambda: runner(*inputs), runs=runs, warmup=1)
    peak = _status_bytes("VmHWM")
    return {"run_s": run_s, "peak_rss_bytes": None if baseline is None else peak - baseline}


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith(field + ":"))
    return int(line.split()[1]) * 1024  # reported in kB


def _reset_peak_rss() -> int | None:
    """Reset the kernel's peak-RSS mark to the current RSS (Linux: clear_refs 5) and return it; None where the
    platform cannot, so no peak is reported rather than one polluted by imports."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
        return _status_bytes("VmRSS")
    except OSError:
        return None


def profile_artifact(folder, runs: int = 3) -> dict:
    """Median run seconds and the memory one artifact (a cache folder, as precompile records it) adds at its
    peak (loaded library, parameters, the VM's intermediates), measured in a fresh process so that peaks of
    other shapes do not hide it."""

    key = Artifact.open(folder).manifest["key"]
    args = [str(folder), key["component"], str(key["length"]), str(runs)]
    out = subprocess.run(
        [sys.executable, "-m", "kokoro_tvm.studies.bucket_choice", *args], check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


if __name__ == "__main__":  # the subprocess of profile_artifact
    import json
    import sys

    folder, component, length, runs = sys.argv[1:]
    print(json.dumps(_profile_here(folder, component, int(length), int(runs))))
