"""Batched throughput on a check bundle's device: each component's builds for B utterances a call (bundle.json
"batches", kokoro_tvm.commands.gpu_batches) fed B copies of the inputs a recorded case holds. Standalone like
the bundle runner (kokoro_tvm.runtime.bundle_runner), beside which it is copied into each bundle as
`run_batches.py`:

    python3 run_batches.py BUNDLE --device cuda --out RESULTS_DIR [--runs N] [--warmup N]

For every batch size B (1: the bundle's own builds) and utterance, every component's recorded inputs repeated B
times along the batch axis (B utterances of one length: no padding; mixed lengths pay for their padding, as on
the CPU) go through the batch-B build: each output row is compared with the batch-1 build's output on the same
device (the builds are padding-invariant per row, so the rows agree to the bundle's tolerance), and the chain's
seconds (the components' medians, summed) give the audio seconds per second of wall time. A batch that does
not fit the device (its memory) is recorded with its error and the next one runs. RESULTS_DIR/batches.json
holds the rows; the exit status is 1 when a row is past the tolerance, 2 on a bad bundle.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from pathlib import Path

import numpy as np

if __package__:  # imported from the package
    from kokoro_tvm.runtime import bundle_device, bundle_runner
else:  # run as a bundle's run_batches.py, beside its run_bundle.py
    import bundle_device
    import run_bundle as bundle_runner

BundleError = bundle_runner.BundleError
log = logging.getLogger("run_batches")

RESULTS = "batches.json"


def _library(bundle: dict, case: dict, batch: int) -> tuple[str, dict]:
    """The library a case runs at `batch`: at 1 the bundle's own (the case's), else the component's batched build."""
    if batch == 1:
        return case["library"], bundle["libraries"][case["library"]]
    key = f"{case['component']}-b{batch}"
    if key not in bundle["batches"]["libraries"]:
        raise BundleError(f"the bundle has no {key} build")
    return key, bundle["batches"]["libraries"][key]


def _inputs(folder: Path, case: dict) -> list[np.ndarray]:
    with np.load(folder / case["inputs"]) as npz:
        return [npz[f"input{i}"] for i in range(case["n_inputs"])]


def _timed(component, tensors: list, runs: int, warmup: int) -> tuple[list[np.ndarray], dict]:
    for _ in range(warmup):
        component.call(tensors)
    seconds = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        out = component.call(tensors)
        seconds.append(time.perf_counter() - start)
    return bundle_runner.as_numpy(out), bundle_runner.spread(seconds)


class _Libraries(dict):
    """Library key -> its LoadedComponent, each loaded on first use (with CUDA, nvcc compiles it then); and
    each case's inputs with the batch-1 build's outputs on them, computed once for every batch size."""

    def __init__(self, folder: Path, dev):
        super().__init__()
        self.folder, self.dev, self.alone = folder, dev, {}

    def get_loaded(self, key: str, entry: dict):
        if key not in self:
            start = time.perf_counter()
            self[key] = bundle_runner.LoadedComponent(self.folder, entry, self.dev)
            log.info("%s loaded in %.1f s", key, time.perf_counter() - start)
        return self[key]

    def inputs_and_alone(self, bundle: dict, case: dict) -> tuple[list[np.ndarray], list[np.ndarray]]:
        if case["name"] not in self.alone:
            inputs = _inputs(self.folder, case)
            single = self.get_loaded(case["library"], bundle["libraries"][case["library"]])
            self.alone[case["name"]] = (inputs, _timed(single, single.upload(inputs, case.get("tiles")), 1, 0)[0])
        return self.alone[case["name"]]


def _utterance_row(bundle: dict, loaded: _Libraries, utterance: str, batch: int, runs: int, warmup: int):
    """One utterance's chain at one batch size (module docstring)."""
    row, worst = {"batch": batch, "utterance": utterance, "components": {}}, 0.0
    for case in (c for c in bundle["cases"] if c["utterance"] == utterance):
        inputs, alone = loaded.inputs_and_alone(bundle, case)
        key, entry = _library(bundle, case, batch)
        tile = entry.get("length_tile")
        batched = loaded.get_loaded(key, entry)
        repeated = [np.repeat(x, batch, axis=0) for x in inputs]
        tensors = batched.upload(repeated, case["length"] // tile if tile else None)
        outputs, seconds = _timed(batched, tensors, runs, warmup)
        for output, reference in zip(outputs, alone, strict=True):  # every row against the one utterance alone
            worst = max([worst] + [bundle_runner.rel_l2(output[b], reference[0]) for b in range(batch)])
        row["components"][case["component"]] = seconds["seconds_median"]
    row["chain_seconds"] = sum(row["components"].values())
    row["audio_seconds"] = batch * bundle["batches"]["audio_seconds"][utterance]
    row["audio_per_second"] = row["audio_seconds"] / row["chain_seconds"]
    row["worst_row_rel_l2"] = worst
    row["within_tolerance"] = worst <= bundle["tolerance_rel_l2"]
    return row


def run_batches(folder, device: str = "cuda", runs: int = 3, warmup: int = 1, out_dir=None) -> dict:
    """Every batch size and utterance of the bundle at `folder` on `device` (module docstring); returns (and,
    with `out_dir`, writes) the results."""
    bundle_runner.use_every_cpu()
    import tvm

    folder = Path(folder)
    bundle = bundle_runner.read_bundle(folder)
    if not bundle.get("batches"):
        raise BundleError(f"{folder} carries no batched builds (gpu-check --batches)")
    missing = [e["library"] for e in bundle["batches"]["libraries"].values() if not (folder / e["library"]).is_file()]
    if missing:
        raise BundleError(f"{folder}: missing {', '.join(missing)}")
    bundle_device.load_device_runtime(device)
    dev = tvm.device(device, 0)
    if not dev.exist or bundle["device"] != device:
        raise BundleError(f"no {device} device here, or the bundle is for {bundle['device']}")
    if device == "cuda":
        bundle_device.register_cuda_compiler(dev)
    loaded, rows = _Libraries(folder, dev), []
    for batch in [1, *bundle["batches"]["sizes"]]:
        for utterance in bundle["batches"]["audio_seconds"]:
            try:
                rows.append(_utterance_row(bundle, loaded, utterance, batch, runs, warmup))
            except RuntimeError as exc:  # TVM's: out of device memory at a large batch, say
                rows.append({"batch": batch, "utterance": utterance, "error": str(exc).strip().splitlines()[0]})
            log.info("batch %d, %s: %s", batch, utterance, rows[-1].get("audio_per_second", rows[-1].get("error")))
    results = {**bundle_runner.where_it_ran(tvm, dev, device), "runs": runs, "rows": rows}
    results["all_within_tolerance"] = all(row.get("within_tolerance", True) for row in rows)
    if out_dir is not None:
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        (Path(out_dir) / RESULTS).write_text(json.dumps(results, indent=1))
    return results


def main(argv=None) -> int:
    args = bundle_runner.runner_parser("run_batches", __doc__, RESULTS, runs=3, warmup=1).parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="run_batches: %(message)s")
    try:
        results = run_batches(args.bundle, args.device, args.runs, args.warmup, args.out)
    except (RuntimeError, ImportError) as exc:  # a BundleError, raised inside TVM, or no TVM runtime to import
        print(bundle_runner.error_line("run_batches", exc), file=sys.stderr)
        return 2
    print(json.dumps({k: results[k] for k in ("device", "device_name", "all_within_tolerance")}))
    return 0 if results["all_within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
