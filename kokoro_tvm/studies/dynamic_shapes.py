"""The dynamic-shape study: each component exported and built with a symbolic length (torch.export `Dim`, the
registry's length relations for inputs at 2F and 600F), through our export patches, converter table and CPU
pipeline, and compared with PyTorch and with a static build (notebooks 01 and 05; NOTES/dynamic_shapes.md)."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np
import torch
from torch.export import Dim

from kokoro_tvm.compiled import compile_and_load, compiled_kokoro
from kokoro_tvm.compiler.build import BuildSpec, build, symbolic_relax_module
from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
from kokoro_tvm.compiler.patches import export_patches
from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS
from kokoro_tvm.compiler.symbolic import LENGTH_TILE, default_shape, tile_count
from kokoro_tvm.components import NAMES, TOKENS, component
from kokoro_tvm.config import MAX_PHONEMES
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.reference.noise import ZeroNoise
from kokoro_tvm.reference.pt_dynamic import default_dtype
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.runtime.profile import compare, kernel_seconds
from kokoro_tvm.runtime.vm import ComponentRunner
from kokoro_tvm.studies.hazards import _attempt, _last_line
from kokoro_tvm.timing import interleaved, median_seconds
from kokoro_tvm.weights.resolve import load_kmodel

MAX_DYNAMIC_FRAMES = 5000  # the plain symbolic length's upper bound in export_static_and_dynamic


def _dynamic_shapes(name: str) -> tuple:
    """torch.export dynamic_shapes with one plain symbolic length n on every length axis of component
    `name`, scaled as the registry says (F0 and N at 2n, the SineGen noise at 600n)."""

    spec = component(name)
    n = Dim("n", min=2, max=MAX_PHONEMES if spec.axis == TOKENS else MAX_DYNAMIC_FRAMES)
    return tuple(
        None if i.length_axis is None else {i.length_axis: n if i.length_multiple == 1 else i.length_multiple * n}
        for i in spec.inputs
    )


def _params(exported) -> list[np.ndarray]:
    named = dict(exported.named_parameters())
    return [named[p].detach().numpy() for p in exported.graph_signature.parameters]


def _timed(runner, tensors) -> float:
    """Median of 3 calls after one warm-up."""
    return median_seconds(lambda: runner.run_on_device(*tensors), runs=3, warmup=1)


def _outputs(out) -> list[np.ndarray]:
    """A VM call's result (one tensor or a tuple of them) as numpy arrays."""
    return [out.numpy()] if hasattr(out, "numpy") else [out[i].numpy() for i in range(len(out))]


def dynamic_build(
    model, component: str, lengths: tuple[int, ...] = (64, 160), weights_fingerprint: str | None = None
) -> dict:
    """One build with a symbolic length (a whole number of kokoro_tvm.compiler.symbolic.LENGTH_TILE steps)
    through our export patches, converter table and CPU pipeline: the stage it reaches (export, import,
    compile, run), the error where it stops, and otherwise at each of `lengths` its relative L2 error and
    largest difference from PyTorch and its run seconds (median of 3 after one warm-up), beside the static
    artifact of that length from the build cache (built there if missing) when `weights_fingerprint` names
    the model's weights: its relative L2 error and run seconds."""
    if any(n % LENGTH_TILE for n in lengths):
        raise InputError(f"lengths must be multiples of {LENGTH_TILE}, got {lengths}")
    dtype = next(model.parameters()).dtype
    module = component_module(model, component)
    report: dict = {"component": component, "dtype": str(dtype).removeprefix("torch."), "lengths": list(lengths)}
    state: dict = {}

    def export_and_import():
        state["mod"], state["ep"], seconds = symbolic_relax_module(model, default_shape(component))
        report.update(export_s=seconds["export"], import_s=seconds["import"])

    def compile_():
        start = time.perf_counter()
        state["runner"] = compile_and_load(state["mod"], params=_params(state["ep"]), transform_params=TRANSFORM_PARAMS)
        report["compile_s"] = time.perf_counter() - start

    def run():
        runner = state["runner"]
        report.update(rel_l2={}, max_abs_diff={}, run_s={}, static_rel_l2={}, static_run_s={})
        for n in lengths:
            xs = example_inputs(ComponentShape(component, n), dtype)
            with torch.no_grad(), export_patches(model), default_dtype(dtype):
                expected = module(*xs)
            expected = [e.numpy() for e in (expected if isinstance(expected, tuple) else (expected,))]
            tensors = runner.device_inputs(*(x.numpy() for x in xs)) + [runner.shape(tile_count(n))]
            pairs = list(zip(_outputs(runner.run_on_device(*tensors)), expected, strict=True))
            report["rel_l2"][n] = max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in pairs)
            report["max_abs_diff"][n] = max(float(np.abs(g - e).max()) for g, e in pairs)
            report["run_s"][n] = _timed(runner, tensors)
            if weights_fingerprint is not None:
                fixed = ComponentRunner(build(model, weights_fingerprint, BuildSpec(component, n, report["dtype"])))
                static_tensors = fixed.device_inputs(*(x.numpy() for x in xs))
                pairs = zip(_outputs(fixed.run_on_device(*static_tensors)), expected, strict=True)
                report["static_rel_l2"][n] = max(float(np.linalg.norm(g - e) / np.linalg.norm(e)) for g, e in pairs)
                report["static_run_s"][n] = _timed(fixed, static_tensors)

    stage, error = _attempt([("export", export_and_import), ("compile", compile_), ("run", run)])
    report.update(stage=stage, error=error, works=error is None)
    return report


def export_static_and_dynamic(model, component: str, length: int = 16) -> dict:
    """torch.export one component with a static length and with a symbolic one; what happens to each."""

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


def policy_latency(
    model, weights_fingerprint: str, sentences: list[str], voice: str, policies=("dynamic", "bucketed"), runs=3
) -> dict:
    """TVM's end-to-end time (`TVMKokoro.run_stages`, float32, zero noise) per sentence under each shape policy
    (a bucket set name, 'dynamic' or 'exact'), in this process, the policies interleaved round by round for
    each sentence: the median of `runs` rounds after one warm-up round (which also builds or loads every
    artifact, outside the timing). Returns per-sentence rows (tokens, frames, each policy's seconds and
    shapes), each policy's total seconds, and the build seconds and library bytes of the artifacts it used."""

    runtimes = {
        p: compiled_kokoro(model, weights_fingerprint, buckets=None if p == "exact" else parse_buckets(p))
        for p in policies
    }
    pack = load_voice(voice)
    rows = []
    for index, sentence in enumerate(sentences):
        for chunk in prepare(text=sentence):
            style = pack.style(len(chunk.phonemes))

            def speak(runtime, ids=chunk.padded_ids, style=style):
                return lambda: runtime.run_stages(ids, style, 1.0, ZeroNoise())

            first = {p: speak(runtime)() for p, runtime in runtimes.items()}
            samples = interleaved({p: speak(runtime) for p, runtime in runtimes.items()}, runs, 0)
            row = {"sentence": index, "tokens": len(chunk.padded_ids), "frames": first[policies[0]].n_frames}
            for p in policies:
                row[f"{p}_s"] = statistics.median(samples[p])
                row[f"{p}_shapes"] = list(first[p].buckets)
            rows.append(row)
    builds = {}
    for p, runtime in runtimes.items():
        artifacts = runtime.loaded_artifacts()
        builds[p] = {
            "artifacts": len(artifacts),
            "build_seconds": sum(sum(a.manifest["seconds"].values()) for a in artifacts),
            "library_bytes": sum(a.library.stat().st_size for a in artifacts),
        }
    return {"rows": rows, "totals": {p: sum(r[f"{p}_s"] for r in rows) for p in policies}, "builds": builds}


def kernel_profile(model, weights_fingerprint: str, component: str, length: int, runs: int = 3) -> dict:
    """The static build of `component` at `length` and its symbolic build, each on the same example inputs,
    timed per PrimFunc (runtime.profile.kernel_seconds, median of `runs` calls after one warm-up): both totals
    and the functions that take longest in either (runtime.profile.compare; ratio = symbolic / static). Both
    artifacts come from the build cache (built there if missing)."""

    if length % LENGTH_TILE:
        raise InputError(f"the length must be a multiple of {LENGTH_TILE}, got {length}")
    dtype = next(model.parameters()).dtype
    name = str(dtype).removeprefix("torch.")
    static = ComponentRunner(build(model, weights_fingerprint, BuildSpec(component, length, name)))
    symbolic = ComponentRunner(build(model, weights_fingerprint, BuildSpec.dynamic(component, name)))
    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length), dtype)]
    baseline = kernel_seconds(static, static.device_inputs(*inputs), runs)
    other = kernel_seconds(symbolic, symbolic.device_inputs(*inputs) + [symbolic.shape(tile_count(length))], runs)
    return {
        "component": component,
        "length": length,
        "runs": runs,
        "static_s": sum(baseline.values()),
        "symbolic_s": sum(other.values()),
        "functions": {"static": len(baseline), "symbolic": len(other)},
        "top": compare(baseline, other),
    }


def main(argv: list[str] | None = None) -> None:
    """`python -m kokoro_tvm.studies.dynamic_shapes [--components a,b] [--lengths 64,160]`: dynamic_build on the
    resolved weights (float32), one JSON line per component on stdout. With `--corpus N [--runs R]`:
    policy_latency of 'dynamic' and 'bucketed' (the chosen bucket set) on N sentences spread over the corpus
    (as notebook 05 section 6 picks them), one JSON line per sentence and a last one with the totals (the
    numbers in NOTES/dynamic_shapes.md). With `--kernels COMPONENT:LENGTH [--runs R]`: kernel_profile, one
    JSON line (the per-kernel comparison in NOTES/dynamic_shapes.md)."""

    parser = argparse.ArgumentParser(prog="python -m kokoro_tvm.studies.dynamic_shapes")
    parser.add_argument("--components", default=",".join(NAMES))
    parser.add_argument("--lengths", default="64,160")
    parser.add_argument("--corpus", type=int, help="time N corpus sentences under 'dynamic' and 'bucketed'")
    parser.add_argument("--kernels", help="COMPONENT:LENGTH: time the static and symbolic builds per kernel")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    args = parser.parse_args(argv)
    model, weights = load_kmodel()
    if args.kernels:
        component, length = args.kernels.split(":")
        sys.stdout.write(
            json.dumps(kernel_profile(model, weights.fingerprint, component, int(length), args.runs)) + "\n"
        )
        return
    if args.corpus:
        sentences = load_sentences()
        chosen = sentences[:: max(1, len(sentences) // args.corpus)][: args.corpus]
        result = policy_latency(model, weights.fingerprint, chosen, args.voice, ("dynamic", "bucketed"), args.runs)
        for row in result["rows"]:
            sys.stdout.write(json.dumps(row) + "\n")
        totals = result["totals"]
        summary = {"totals": totals, "dynamic_over_bucketed": totals["dynamic"] / totals["bucketed"]}
        sys.stdout.write(json.dumps(summary | {"builds": result["builds"], "runs": args.runs}) + "\n")
        return
    lengths = tuple(int(n) for n in args.lengths.split(","))
    for name in args.components.split(","):
        sys.stdout.write(json.dumps(dynamic_build(model, name, lengths, weights.fingerprint)) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
