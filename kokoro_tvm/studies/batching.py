"""Batched synthesis on the CPU: seconds of audio per second of wall time at several batch sizes, per component
(`python -m kokoro_tvm.studies.batching --precision fp32 --batches 1,2,4,8,16 --out`; NOTES/performance.md
"Batching"; notebook 08 shows the committed results, `committed_rows`).

Notebook 07's sentences (N spread over the corpus's lengths), one utterance each, af_heart, seeded noise, through
`TVMKokoro.run_many` on the symbolic-length builds for each batch size (built on first use, then cached). Each
batch size runs the whole set once per round, the sizes interleaved within a round; the median round and the
spread are reported, and the seconds spent in each component (summed over the set) in the median round. `--out`
writes the result beside the per-CPU bench rows (kokoro_tvm/data/benchmarks/batching/), one file per CPU and
precision. `--memory COMPONENT:LENGTH` gives each batch size's peak memory instead (`peak_memory`), the figure
behind runtime.kokoro.BATCH_BYTES_PER_ROW_FRAME.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import multiprocessing
import os
import resource
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.compiler.symbolic import tile_count
from kokoro_tvm.components import get_precision
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.evaluation.backends import pick_sentences
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.machine import cpu_identity, machine, record_name
from kokoro_tvm.paths import TUNING_RECORDS, repository_commit
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.runtime.kokoro import Utterance
from kokoro_tvm.runtime.profile import kernel_seconds, kernel_split
from kokoro_tvm.runtime.vm import ComponentRunner

log = logging.getLogger(__name__)

# committed results, one file per CPU family and precision (named by the CPU's tuning-record name), beside the
# per-CPU bench rows (report.cpu_rows)
FOLDER = TUNING_RECORDS.parent / "benchmarks" / "batching"


def utterances(n_sentences: int, voice: str):
    """Notebook 07's sentences as runtime Utterances (each its own noise stream 0, as `synthesize` gives it)."""

    pack = load_voice(voice)
    found = []
    for sentence in pick_sentences(load_sentences(), n_sentences):
        (chunk,) = prepare(text=sentence)
        found.append(Utterance(chunk.padded_ids, pack.style(len(chunk.phonemes))))
    return found


def _timed(compiled, seconds: dict):
    """Wrap `compiled.run_component` so each call's wall time is added to seconds[component]."""
    run = compiled.run_component

    def timed(component, length, *inputs):
        start = time.perf_counter()
        found = run(component, length, *inputs)
        seconds[component] += time.perf_counter() - start
        return found

    compiled.run_component = timed


def _rounded(seconds: dict) -> dict:
    return {k: round(v, 3) for k, v in seconds.items()}


def _row(batch: int, found: list, audio_s: float, padding: float) -> dict:
    """One batch size's rounds: the median wall time, its spread, audio seconds per second, each component's
    seconds in the median round, and the frames the decoder ran over the frames spoken (padding to each group's
    longest)."""
    walls = [w for w, _ in found]
    median_round = sorted(found, key=lambda r: r[0])[len(found) // 2]
    return {
        "batch": batch,
        "wall_s": float(np.median(walls)),
        "spread_s": [min(walls), max(walls)],
        "audio_s_per_s": audio_s / float(np.median(walls)),
        "components_s": _rounded(median_round[1]),
        "frames_padded_over_valid": round(padding, 3),
    }


def measure(precision: str, batches: list[int], n_sentences: int = 20, rounds: int = 3, voice: str = "af_heart"):
    from kokoro_tvm.weights.resolve import load_kmodel

    model, info = load_kmodel()
    compiled = compiled_kokoro(model, info.fingerprint, precision, buckets=parse_buckets("dynamic"))
    items = utterances(n_sentences, voice)
    seconds: dict = defaultdict(float)
    _timed(compiled, seconds)
    noise = SeededNoise(0)
    padding = {}
    for batch in batches:  # every build used, built (or found) before any timing; the frames each size pads to
        found = compiled.run_many(items, batch, noise=noise)
        padding[batch] = sum(s.buckets[1] for s in found) / sum(s.alignment.shape[0] for s in found)
    audio_s = sum(len(s.audio) for s in found) / SAMPLE_RATE  # the same at every batch size (tests/test_batched.py)
    log.info("%d sentences, %.1f s of audio", len(items), audio_s)
    runs: dict[int, list] = {b: [] for b in batches}
    for _ in range(rounds):
        for batch in batches:
            seconds.clear()
            start = time.perf_counter()
            compiled.run_many(items, batch, noise=noise)
            runs[batch].append((time.perf_counter() - start, dict(seconds)))
            log.info("batch %d: %.2f s (%s)", batch, runs[batch][-1][0], _rounded(seconds))
    rows = [_row(batch, found, audio_s, padding[batch]) for batch, found in runs.items()]
    here = machine()
    return {
        "cpu": f"{here.cpu} (family {here.family}, model {here.model})",
        "record": record_name(cpu_identity(here)),
        "date": datetime.date.today().isoformat(),
        "commit": repository_commit(),
        "threads": os.cpu_count(),
        "precision": precision,
        "sentences": n_sentences,
        "audio_s": audio_s,
        "rounds": rounds,
        "rows": rows,
    }


def _component_call(model, fingerprint: str, component: str, length: int, batch: int, precision: str):
    """(runner, device tensors): `component`'s symbolic build for `batch` at `precision` (from the cache, built
    there if missing) and its example inputs of `length` steps in every row, the tile count included."""
    import torch

    from kokoro_tvm.compiler.build import BuildSpec, build
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs

    spec = BuildSpec.dynamic(component, "float32", get_precision(precision).arithmetic, batch=batch)
    runner = ComponentRunner(build(model, fingerprint, spec))
    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length, batch), torch.float32)]
    return runner, runner.device_inputs(*inputs) + [runner.shape(tile_count(length))]


def batch_cost(
    component: str, length: int, batch: int, runs: int = 5, precision: str = "fp32", split: bool = False
) -> dict:
    """`component`'s symbolic build at `precision` (`--precision`; fp32 by default) for `batch` against its
    batch-1 build called `batch` times, on example inputs of `length` steps (every row full: no padding), the two
    interleaved call by call after a warm-up (the machine's speed drifts between runs by up to 19%:
    NOTES/performance.md): median seconds and spread of each, and their ratio. Whether batching itself costs or
    buys anything once padding is out of the picture. With `split`, also where each spends it: every kernel
    timed (runtime.profile.kernel_seconds, the batch-1 build's times `batch`-fold) and summed by kernel_split."""
    from kokoro_tvm.weights.resolve import load_kmodel

    model, info = load_kmodel()
    calls = {}
    for b in (1, batch):
        runner, tensors = _component_call(model, info.fingerprint, component, length, b, precision)
        runner.run_on_device(*tensors)  # warm-up
        calls[b] = (runner, tensors, batch // b)
    seconds: dict[int, list] = {1: [], batch: []}
    for _ in range(runs):
        for b, (runner, tensors, repeat) in calls.items():
            start = time.perf_counter()
            for _ in range(repeat):
                runner.run_on_device(*tensors)
            seconds[b].append(time.perf_counter() - start)
    alone, together = (float(np.median(seconds[b])) for b in (1, batch))
    kernels = {}
    if split:
        for b, (runner, tensors, repeat) in calls.items():
            groups = kernel_split(kernel_seconds(runner, tensors, runs))
            kernels[f"batch_{b}_s"] = {group: repeat * s for group, s in groups.items()}
    return {
        "component": component,
        "precision": precision,
        "length": length,
        "batch": batch,
        "runs": runs,
        "batch_1_times_b_s": alone,
        "batch_1_times_b_spread_s": [min(seconds[1]), max(seconds[1])],
        "batched_s": together,
        "batched_spread_s": [min(seconds[batch]), max(seconds[batch])],
        "batched_over_alone": together / alone,
        **({"kernels": kernels} if split else {}),
    }


def _peak_mib() -> float:
    """This process's peak resident memory so far (ru_maxrss: KiB on Linux, bytes on macOS)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (2**20 if sys.platform == "darwin" else 1024)


def _one_call_memory(component: str, length: int, batch: int, precision: str, measure: bool = True):
    """In this process (a fresh one: `peak_memory`): peak resident MiB once the build is loaded, and after one call
    on example inputs of `length` steps; with `measure` False, only the build (into the cache)."""
    from kokoro_tvm.weights.resolve import load_kmodel

    model, info = load_kmodel()
    runner, tensors = _component_call(model, info.fingerprint, component, length, batch, precision)
    if not measure:
        return None
    loaded = _peak_mib()
    runner.run_on_device(*tensors)
    return loaded, _peak_mib()


def peak_memory(component: str, length: int, batches: list[int], precision: str = "fp32") -> list[dict]:
    """Per batch size, in a fresh process each (a process's peak never falls; the build made first in another, so
    that building's peak is not counted): `component`'s build loaded, then one call with every row `length` steps
    long: peak resident MiB at both points, and what the call added per row and step (KiB, `kib_per_step`), the
    figure that sizes a batch of long utterances."""
    rows = []
    with multiprocessing.get_context("spawn").Pool(1, maxtasksperchild=1) as pool:
        for batch in batches:
            pool.apply(_one_call_memory, (component, length, batch, precision, False))
            loaded, peak = pool.apply(_one_call_memory, (component, length, batch, precision))
            added = round((peak - loaded) * 1024 / (batch * length))
            rows.append({"batch": batch, "loaded_mib": round(loaded), "peak_mib": round(peak), "kib_per_step": added})
    return rows


def save(result: dict, folder: Path = FOLDER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{Path(result['record']).stem}-{result['precision']}.json"
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    return path


def committed_rows(folder: Path = FOLDER) -> list[dict]:
    """The committed results as table rows: CPU, precision, batch, audio seconds per wall second (median round,
    with its spread) and each component's seconds; the ratio to batch 1 of the same run."""
    rows = []
    for path in sorted(folder.glob("*.json")):
        result = json.loads(path.read_text())
        single = next(r["wall_s"] for r in result["rows"] if r["batch"] == 1)
        for r in result["rows"]:
            rows.append(
                {
                    "cpu": result["cpu"],
                    "date": result["date"],
                    "precision": result["precision"],
                    "batch": r["batch"],
                    "audio_s_per_s": round(r["audio_s_per_s"], 2),
                    "wall_s": round(r["wall_s"], 2),
                    "spread_s": [round(s, 2) for s in r["spread_s"]],
                    "vs_batch_1": round(single / r["wall_s"], 2),
                    "frames_padded_over_valid": r.get("frames_padded_over_valid"),
                    **{f"{k}_s": round(v, 2) for k, v in r["components_s"].items()},
                }
            )
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument("--sentences", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", nargs="?", const=FOLDER, type=Path, help=f"write the result here ({FOLDER})")
    parser.add_argument("--cost", help="COMPONENT:LENGTH:BATCH: batch_cost instead (--rounds calls), JSON on stdout")
    parser.add_argument("--split", action="store_true", help="with --cost: each build's time by kernel group")
    parser.add_argument("--memory", help="COMPONENT:LENGTH: peak_memory at --batches instead, JSON on stdout")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    batches = [int(b) for b in args.batches.split(",")]
    if args.memory:
        component, length = args.memory.split(":")
        print(json.dumps(peak_memory(component, int(length), batches, args.precision), indent=1))  # noqa: T201
        return
    if args.cost:
        component, length, batch = args.cost.split(":")
        cost = batch_cost(component, int(length), int(batch), args.rounds, args.precision, args.split)
        print(json.dumps(cost, indent=1))  # noqa: T201
        return
    result = measure(args.precision, batches, args.sentences, args.rounds)
    if args.out:
        log.info("written to %s", save(result, args.out))
    print(json.dumps(result, indent=1))  # noqa: T201


if __name__ == "__main__":
    main()
