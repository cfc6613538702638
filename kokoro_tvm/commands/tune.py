"""`kokoro-tvm tune`: measure this machine's schedules once (kokoro_tvm.compiler.tuning) and write its record
into the cache, or with `--out` into a folder (kokoro_tvm/data/tuning/ to commit it for a CPU family)."""

from __future__ import annotations

import argparse
import json
import logging
import os
from pathlib import Path

import numpy as np

from kokoro_tvm import __version__
from kokoro_tvm.compiled import compiled_kokoro, module_seconds, runs_here
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.compiler.tuning import record as tuning
from kokoro_tvm.components import NAMES
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, one_chunk
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.machine import machine
from kokoro_tvm.paths import TUNING_ENV, repository_commit
from kokoro_tvm.reference.noise import ZeroNoise
from kokoro_tvm.runtime.buckets import DynamicLengths
from kokoro_tvm.timing import interleaved, set_threads

log = logging.getLogger("kokoro_tvm.cli")


def run(args: argparse.Namespace) -> int:
    if args.gain:
        print(json.dumps(tuning_gain(args.text, args.gain, args.runs, threads=args.threads, weights=args.weights)))
        return 0
    return tune_here(args)


def tune_here(args: argparse.Namespace) -> int:
    import torch  # (deferred: torch loads only for the commands that build)
    import tvm
    from tqdm.auto import tqdm

    from kokoro_tvm.compiler.tuning import tuner
    from kokoro_tvm.weights.resolve import load_kmodel

    requested = [p.strip() for p in args.precision.split(",") if p.strip()]
    precisions = [p for p in requested if runs_here(p)]
    if not precisions:
        raise InputError(f"this CPU runs none of {', '.join(requested)}: tune --precision fp32")
    skipped = sorted(set(requested) - set(precisions))
    if skipped:
        log.info("this CPU does not run %s: not tuned", ", ".join(skipped))
    set_threads(args.threads)
    model, _ = load_kmodel(args.weights, dtype=torch.float32)
    log.info("tuning %s on %s within %.0f s of measuring", ", ".join(precisions), tuning.cpu_identity(), args.budget)

    def progress(items, unit: str):  # the long convs' shapes first, then the contraction classes
        return tqdm(list(items), desc="tune", unit=f" {unit}", disable=args.quiet)

    record = tuner.tune(model, host_target(), precisions, args.budget, progress, module_seconds)
    if not record.tuned["measured"]:  # saved, it would shadow the committed record with no decision at all
        raise InputError(
            f"--budget {args.budget:g} s ran out before the first of {record.tuned['classes']} contraction classes "
            f"(timing the long convolutions and finding the classes took {record.tuned['measure_s']:.0f} s): no record "
            "written"
        )
    record.tuned.update(kokoro_tvm=__version__, tvm=tvm.__version__, commit=repository_commit(), threads=args.threads)
    path = record.save(Path(args.out) if args.out else tuning.user_folder())
    fastest = record.fastest_precision(precisions)
    log.info(
        "%d of %d classes measured in %.0f s (export %.0f s), %d tiles changed, %d packed classes kept float32, "
        "%d of %d long conv shapes in the frequency domain; fastest here: %s; wrote %s",
        record.tuned["measured"],
        record.tuned["classes"],
        record.tuned["measure_s"],
        record.tuned["export_s"],
        len(record.choices),
        sum(kernel == tuning.FLOAT32 for kernel in record.packed.values()),
        record.tuned["frequency_domain"],
        len(record.frequency),
        fastest,
        path,
    )
    print(json.dumps({"record": str(path), "fastest": fastest, **record.tuned}))
    return 0


def tuning_gain(
    text: str | None = None, precision: str = "fp32", runs: int = 5, warmup: int = 2, threads: int = 2, weights=None
) -> dict:
    """The whole model at `precision` built with this CPU's tuning record against the same builds from the
    heuristics (KOKORO_TVM_TUNING=off), one process, interleaved: the gain tuning buys on this machine. Both sets
    of symbolic builds are found in the cache or built first (minutes each, once)."""
    import torch

    from kokoro_tvm.commands.bench import DEFAULT_TEXT
    from kokoro_tvm.weights.resolve import load_kmodel

    record = tuning.find()
    if record is None:
        raise InputError("this CPU has no tuning record to compare with: run `kokoro-tvm tune` first")
    text = DEFAULT_TEXT if text is None else text
    chunk = one_chunk(text, DEFAULT_LANGUAGE, "tune")
    style = load_voice(DEFAULT_VOICE).style(len(chunk.phonemes))
    set_threads(threads)
    model, info = load_kmodel(weights, dtype=torch.float32)
    runtimes = {}
    for label, setting in (("tuned", None), ("heuristic", "off")):
        before = os.environ.pop(TUNING_ENV, None)
        if setting:
            os.environ[TUNING_ENV] = setting
        try:  # every component built (or found) and loaded while the setting holds
            runtime = compiled_kokoro(model, info.fingerprint, precision, buckets=DynamicLengths())
            for name in NAMES:
                runtime.runner(name, 8)
        finally:
            os.environ.pop(TUNING_ENV, None)
            if before is not None:
                os.environ[TUNING_ENV] = before
        runtimes[label] = runtime
    audio = {k: r.run_stages(chunk.padded_ids, style, 1.0, ZeroNoise()).audio for k, r in runtimes.items()}
    calls = {k: (lambda r=r: r.run_stages(chunk.padded_ids, style, 1.0, ZeroNoise())) for k, r in runtimes.items()}
    samples = interleaved(calls, runs, warmup)
    medians = {k: float(np.median(v)) for k, v in samples.items()}
    return {
        "text": text,
        "precision": precision,
        "record": record.name,
        "threads": threads,
        "runs": runs,
        "tuned_s": medians["tuned"],
        "heuristic_s": medians["heuristic"],
        "spread_s": {k: [min(v), max(v)] for k, v in samples.items()},
        "gain": medians["heuristic"] / medians["tuned"],
        # a choice changes the order of float32 sums only: the audio differs in rounding, never in length
        "max_abs_difference": float(np.abs(audio["tuned"] - audio["heuristic"]).max()),
        "machine": machine().as_dict(),
    }


def this_machine():
    """This machine (kokoro_tvm.machine) and its tuning record, None where it has none (notebook 08)."""
    return machine(), tuning.find()


def class_table(record, rows: int | None = None) -> list[dict]:
    """A tuning record's classes, largest share of the work first: the heuristic's and the best candidate's
    kernel time at the measured length, the gain, and what the build does (the tile kept, or the float32 conv
    for a packed class that was not faster)."""
    table = []
    classes = [(key, measured) for key, measured in record.measured.items() if "share" in measured]
    for key, measured in sorted(classes, key=lambda item: -item[1]["share"]):
        seconds = measured["seconds"]
        choice = record.choice(key)
        kept_float32 = record.packed.get(key) == tuning.FLOAT32
        table.append(
            {
                "class": key,
                "share": measured["share"],
                "heuristic_ms": 1e3 * seconds["heuristic"],
                "tuned_ms": 1e3 * min(seconds.values()),
                "gain": seconds["heuristic"] / min(seconds.values()),
                "build": "float32 conv" if kept_float32 else (choice.label if choice else "heuristic tile"),
            }
        )
    return table[:rows] if rows else table


def frequency_table(record) -> list[dict]:
    """A tuning record's long conv shapes: the direct and the frequency-domain conv's time at the measured length,
    the kernel spectra all convs of the shape keep, and which way the build runs them (empty for a record tuned
    before these were measured)."""
    rows = []
    for key, tiles in sorted(record.frequency.items()):
        measured = record.measured.get(key)
        if measured is None:
            continue
        seconds = measured["seconds"]
        rows.append(
            {
                "conv": key,
                "convs": measured["convs"],
                "direct_ms": 1e3 * seconds["direct"],
                "frequency_ms": 1e3 * seconds["frequency"],
                "spectra_mb": measured["spectra_mb"],
                "build": "frequency domain"
                if tiles
                else ("direct: spectra over budget" if measured["won"] else "direct"),
            }
        )
    return rows
