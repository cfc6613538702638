"""Run a device check bundle (kokoro_tvm.commands.gpu_check) anywhere TVM's runtime runs: one file, standalone.

Needs only numpy and TVM's runtime (`import tvm` with TVM_USE_RUNTIME_LIB=1 works; the bundle may carry that
runtime as `runtime_kit/`), and for CUDA, nvcc: a CUDA library holds CUDA source, compiled for the device as it
loads (kokoro_tvm.runtime.bundle_device). It imports nothing else of kokoro_tvm, so it is copied into each bundle
as `run_bundle.py`, beside `bundle_device.py`, and runs on a machine that has neither this project nor torch:

    python3 run_bundle.py BUNDLE --device cuda --out RESULTS_DIR [--kernels N] [--against OTHER_BUNDLE]

For every component it loads the library on the device and uploads the parameters once; every recorded case
(the exact inputs that component received from the CPU build while speaking an utterance) gets warm-up calls,
then timed calls with a device sync around each; its outputs are compared with the CPU build's (max abs and
relative L2 error per output) and written to RESULTS_DIR/outputs/<case>.npz, to be scored where the project is
installed. RESULTS_DIR/results.json holds it all, with the device's name; the exit status is 1 when any output
is past the bundle's tolerance, 2 on a bad bundle.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__:  # imported from the package
    from kokoro_tvm.runtime import bundle_device
else:  # run as a bundle's run_bundle.py, beside its bundle_device.py
    import bundle_device

BundleError = bundle_device.BundleError
log = logging.getLogger("run_bundle")

BUNDLE_FORMAT = 1


def read_bundle(folder) -> dict:
    folder = Path(folder)
    path = folder / "bundle.json"
    if not path.is_file():
        raise BundleError(f"{folder} is not a check bundle: no bundle.json")
    try:
        bundle = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise BundleError(f"{path} is not valid JSON: {exc}") from exc
    if bundle.get("format") != BUNDLE_FORMAT:
        raise BundleError(f"{path}: format {bundle.get('format')!r}, this runner reads format {BUNDLE_FORMAT}")
    files = [rel for entry in bundle["libraries"].values() for rel in (entry["library"], entry["params"])]
    missing = [rel for rel in files + [case["inputs"] for case in bundle["cases"]] if not (folder / rel).is_file()]
    missing += [case["library"] for case in bundle["cases"] if case["library"] not in bundle["libraries"]]
    if missing:
        raise BundleError(f"{folder}: missing {', '.join(missing)}")
    return bundle


def load_params(path, names: list[str]) -> list[np.ndarray]:
    """Parameters in call order. A tensor with at most 256 distinct values (the int8-derived weights) is stored
    losslessly as a codebook and uint8 indices (`<i>.codebook`, `<i>.index`), others as `<i>`."""
    with np.load(path) as npz:
        arrays = []
        for i in range(len(names)):
            if f"{i}.codebook" in npz.files:
                arrays.append(npz[f"{i}.codebook"][npz[f"{i}.index"]])
            else:
                arrays.append(npz[str(i)])
    return arrays


def rel_l2(actual: np.ndarray, expected: np.ndarray) -> float:
    a, e = actual.astype(np.float64).ravel(), expected.astype(np.float64).ravel()
    norm = float(np.linalg.norm(e))
    return float(np.linalg.norm(a - e)) / norm if norm > 0 else float(np.linalg.norm(a))


class LoadedComponent:
    def __init__(self, folder: Path, entry: dict, device, library: Path | None = None):
        """`entry`'s library (or `library`, another build of the same component) with its parameters."""
        import tvm
        from tvm.runtime.vm import VirtualMachine

        self.tvm, self.device = tvm, device
        self.vm = VirtualMachine(tvm.runtime.load_module(str(library or folder / entry["library"])), device)
        params = load_params(folder / entry["params"], entry["param_names"])
        self.params = [tvm.runtime.tensor(np.ascontiguousarray(p), device=device) for p in params]
        if entry.get("transform_params"):
            lifted = self.vm[entry["transform_params"]](self.params)
            self.params = [lifted[i] for i in range(len(lifted))]
        self.length_tile = entry.get("length_tile")

    def upload(self, arrays: list[np.ndarray], tiles: int | None) -> list:
        tensors = [self.tvm.runtime.tensor(np.ascontiguousarray(a), device=self.device) for a in arrays]
        return tensors + ([self.tvm.runtime.ShapeTuple([int(tiles)])] if tiles is not None else [])

    def call(self, tensors: list):
        out = self.vm["main"](*tensors, *self.params)
        self.device.sync()
        return out

    def kernel_seconds(self, tensors: list, most: int) -> list[dict]:
        """One more call with every call it makes (kernels, VM built-ins) timed, a device sync on both sides
        of each: the `most` that took longest, in all, with their call counts. The syncs cost time, so these
        add up to more than the timed calls take; they say where the time goes, not how long a call takes."""
        import tvm_ffi

        spent, started = {}, {}  # name -> (calls, seconds); name -> when its call started

        def instrument(_func, symbol, before_run, _ret, *_args):
            self.device.sync()
            if before_run:
                started[symbol] = time.perf_counter()
            else:
                calls, seconds = spent.get(symbol, (0, 0.0))
                spent[symbol] = (calls + 1, seconds + time.perf_counter() - started[symbol])
            return 0  # VMInstrumentReturnKind.NO_OP: run the call

        self.vm.set_instrument(tvm_ffi.convert(instrument))
        try:
            self.call(tensors)
        finally:
            self.vm.set_instrument(tvm_ffi.convert(lambda *_: 0))
        ranked = sorted(spent.items(), key=lambda item: item[1][1], reverse=True)[:most]
        return [{"name": name, "calls": calls, "seconds": seconds} for name, (calls, seconds) in ranked]


def as_numpy(out) -> list[np.ndarray]:
    return [out.numpy()] if hasattr(out, "numpy") else [out[i].numpy() for i in range(len(out))]


def _device_name(device) -> str:
    try:
        return str(device.device_name or cpu_model())
    except Exception:  # not every device type reports a name (the CPU does not)
        return cpu_model()


def cpu_model() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what platform reports (also the report's machine)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def use_every_cpu() -> None:
    """TVM's CPU thread pool defaults to half the logical CPUs on x86; use all of them unless TVM_NUM_THREADS is
    set (the same rule as kokoro_tvm.runtime.devices.use_every_cpu, which this file may not import)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    os.environ.setdefault("TVM_NUM_THREADS", str(cpus))


def spread(seconds: list[float]) -> dict:
    return {"seconds_median": statistics.median(seconds), "seconds_min": min(seconds), "seconds_max": max(seconds)}


def _run_case(
    folder: Path,
    case: dict,
    component: LoadedComponent,
    runs: int,
    warmup: int,
    tolerance: float,
    kernels: int = 0,
    against: LoadedComponent | None = None,
):
    """One recorded call on the device: `warmup` untimed calls, `runs` timed ones, the outputs against the CPU
    build's; with `kernels`, the calls that take longest (`LoadedComponent.kernel_seconds`); with `against`, another
    build of the component timed in turn with this one in the same runs. Returns (its results row, the
    outputs)."""
    with np.load(folder / case["inputs"]) as npz:
        inputs = [npz[f"input{i}"] for i in range(case["n_inputs"])]
        expected = [npz[f"expected{i}"] for i in range(case["n_outputs"])]
    tensors = component.upload(inputs, case.get("tiles"))
    builds = [component] + ([against] if against else [])
    seconds, outs = {build: [] for build in builds}, {}
    for _ in range(warmup):
        for build in builds:
            build.call(tensors)
    for run in range(runs):  # with `against`, the two builds take turns, each first in every other run
        for build in builds if run % 2 == 0 else builds[::-1]:
            start = time.perf_counter()
            outs[build] = build.call(tensors)
            seconds[build].append(time.perf_counter() - start)
    outputs = as_numpy(outs[component])
    errors = [
        {"shape": list(e.shape), "max_abs": float(np.max(np.abs(a.astype(np.float64) - e))), "rel_l2": rel_l2(a, e)}
        for a, e in zip(outputs, expected, strict=True)
    ]
    row = {
        "case": case["name"],
        "utterance": case["utterance"],
        "component": case["component"],
        "library": case["library"],
        "length": case["length"],
        "errors": errors,
        "worst_rel_l2": max(e["rel_l2"] for e in errors),
        "within_tolerance": all(e["rel_l2"] <= tolerance for e in errors),
        **spread(seconds[component]),
        "runs": runs,
    }
    if against is not None:  # the other build's times, and how far its outputs are from this one's
        row["against"] = {
            **spread(seconds[against]),
            "rel_l2_to_this": max(rel_l2(a, b) for a, b in zip(as_numpy(outs[against]), outputs, strict=True)),
        }
    if kernels:
        row["kernels"] = component.kernel_seconds(tensors, kernels)
    return row, outputs


def _other_builds(bundle: dict, against) -> dict[str, Path]:
    """Library name -> the other build of it under `against` (at the bundle's path for it), for those it holds."""
    found = {
        key: Path(against) / entry["library"]
        for key, entry in bundle["libraries"].items()
        if (Path(against) / entry["library"]).is_file()
    }
    if not found:
        raise BundleError(f"{against} holds none of the bundle's libraries (libs/NAME.so)")
    return found


def where_it_ran(tvm, dev, device: str) -> dict:
    """Where the bundle ran: the device, the host, and which TVM (runtime only or whole) from where."""
    return {
        "format": BUNDLE_FORMAT,
        "device": device,
        "device_name": _device_name(dev),
        "host": platform.node(),
        "platform": sys.platform,
        "tvm": getattr(tvm, "__version__", "unknown"),
        "tvm_runtime_only": os.environ.get("TVM_USE_RUNTIME_LIB") == "1",
        "tvm_location": str(Path(tvm.__file__).parent),
        "cpu_threads": int(os.environ["TVM_NUM_THREADS"]),
    }


def run_bundle(
    folder, device: str = "cpu", runs: int = 10, warmup: int = 2, out_dir=None, kernels: int = 0, against=None
) -> dict:
    """Run every case of the bundle at `folder` on `device`; returns (and, with `out_dir`, writes) the results;
    with `kernels`, each case's row names the calls that take longest; with `against`, a folder holding other
    builds of some of its libraries at the same paths (`libs/decoder.so`: another bundle, or the decoder of
    one), each is timed in turn with the bundle's own in the same runs."""
    use_every_cpu()
    import tvm

    folder = Path(folder)
    bundle = read_bundle(folder)
    bundle_device.load_device_runtime(device)
    dev = tvm.device(device, 0)
    if not dev.exist:
        raise BundleError(f"no {device} device on this machine")
    if bundle["device"] != device:
        raise BundleError(f"the bundle was built for {bundle['device']}, not {device}")
    kernel_compiler = bundle_device.register_cuda_compiler(dev) if device == "cuda" else None
    out_dir = Path(out_dir) if out_dir is not None else None
    if out_dir is not None:
        (out_dir / "outputs").mkdir(parents=True, exist_ok=True)
    tolerance = bundle["tolerance_rel_l2"]
    others = _other_builds(bundle, against) if against is not None else {}
    loaded, load_seconds, rows = {}, {}, []
    for case in bundle["cases"]:
        key = case["library"]
        if key not in loaded:
            start = time.perf_counter()
            loaded[key] = LoadedComponent(folder, bundle["libraries"][key], dev)
            load_seconds[key] = time.perf_counter() - start  # with CUDA, nvcc's compile of the library's kernels
            log.info("%s loaded on %s in %.1f s", key, device, load_seconds[key])
            if key in others:
                loaded[key, "against"] = LoadedComponent(folder, bundle["libraries"][key], dev, library=others[key])
        row, outputs = _run_case(
            folder, case, loaded[key], runs, warmup, tolerance, kernels, loaded.get((key, "against"))
        )
        rows.append(row)
        log.info("%s: worst rel L2 %.2e, %.2f ms median", row["case"], row["worst_rel_l2"], 1e3 * row["seconds_median"])
        if out_dir is not None:
            np.savez(out_dir / "outputs" / f"{case['name']}.npz", **{f"output{i}": a for i, a in enumerate(outputs)})
    results = {
        **where_it_ran(tvm, dev, device),
        "bundle": {k: bundle[k] for k in ("device", "target", "dtype", "created")},
        "tolerance_rel_l2": tolerance,
        "kernel_compiler": kernel_compiler,
        "load_seconds": load_seconds,
        "cases": rows,
        "all_within_tolerance": all(r["within_tolerance"] for r in rows),
        "imported_project": any(m == "kokoro_tvm" or m.startswith("kokoro_tvm.") for m in sys.modules),
    }
    if out_dir is not None:
        (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    return results


def runner_parser(prog: str, doc: str, out: str, runs: int, warmup: int) -> argparse.ArgumentParser:
    """The arguments every bundle runner takes (run_bundle.py, run_batches.py, run_torch_peer.py)."""
    parser = argparse.ArgumentParser(prog=prog, description=doc.splitlines()[0])
    parser.add_argument("bundle", help="the bundle folder (holds bundle.json)")
    parser.add_argument("--device", default="cuda", help="cpu or cuda (run_bundle.py: metal too; default cuda)")
    parser.add_argument("--out", required=True, help=f"folder for {out}")
    parser.add_argument("--runs", type=int, default=runs, help=f"timed calls (default {runs})")
    parser.add_argument("--warmup", type=int, default=warmup, help=f"untimed calls first (default {warmup})")
    return parser


def error_line(prog: str, exc: BaseException) -> str:
    """A runner's one line for a refusal: its first line, never a traceback; a module that cannot be imported
    (TVM's runtime, kokoro) with where the bundle's own run line finds it."""
    line = f"{prog}: error: {(str(exc).strip().splitlines() or [type(exc).__name__])[0]}"
    if isinstance(exc, ImportError):
        line += " (run it as its line in bundle.json does: that PYTHONPATH holds what it imports)"
    return line


def main(argv=None) -> int:
    parser = runner_parser("run_bundle", __doc__, "results.json and outputs/", runs=10, warmup=2)
    parser.add_argument(
        "--kernels",
        type=int,
        default=0,
        metavar="N",
        help="also time each call inside one more call and record the N longest",
    )
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="a folder with other builds of the bundle's libraries "
        "at the same paths (libs/NAME.so), each timed in turn with the bundle's own",
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="run_bundle: %(message)s")
    try:
        results = run_bundle(args.bundle, args.device, args.runs, args.warmup, args.out, args.kernels, args.against)
    except (RuntimeError, ImportError) as exc:  # a BundleError; TVM's (a library that cannot load, nvcc); no TVM
        print(error_line("run_bundle", exc), file=sys.stderr)
        return 2
    print(json.dumps({k: results[k] for k in ("device", "device_name", "all_within_tolerance")}))
    return 0 if results["all_within_tolerance"] else 1


if __name__ == "__main__":
    sys.exit(main())
