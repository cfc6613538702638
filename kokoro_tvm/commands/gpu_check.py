"""Device checks: the compiled components for a GPU (or this CPU) run on the exact inputs the CPU build gave
each of them, compared with the CPU build's outputs and scored against PyTorch.

- a bundle (kokoro_tvm.commands.gpu_bundle.make_bundle) carries the device libraries, the recorded calls and the
  standalone runner to the device's machine;
- the runner (on the device's machine) writes results.json and every output;
- `score`: back here, durations from the device's duration logits against the CPU build's, and the device's
  audio against pt.dynamic (PESQ-WB, STOI) and against the CPU build (relative L2), beside the CPU build's own
  decoder against PyTorch's on the same inputs;
- the PyTorch peer (kokoro_tvm.commands.gpu_torch_peer): KModel on the same device and utterances, fp32 and under
  bf16 autocast, timed by its own standalone runner (kokoro_tvm.peers.kmodel_device) and scored beside;
- batched throughput (kokoro_tvm.commands.gpu_batches): batch-B builds fed B copies of each case, every row
  against the batch-1 build, audio seconds per second (kokoro_tvm.runtime.bundle_batches runs it);
- `gpu_check`: all of it in one process, on a machine with the device and this project installed
  (`kokoro-tvm gpu-check --target cuda|metal|cpu`); `--target cpu` is the check of the check, run by the tests;
- `recorded_runs`, `symbolic_build_status`: what notebook 06 reports.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np

from kokoro_tvm.commands import bundle_transfer, gpu_batches, gpu_bundle, gpu_torch_peer
from kokoro_tvm.commands.gpu_bundle import KERNELS_RECORDED, check_device, make_bundle
from kokoro_tvm.compiler.targets import target_for
from kokoro_tvm.components import NAMES
from kokoro_tvm.config import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.errors import ResourceError, writable_folder
from kokoro_tvm.paths import REPO_ROOT, outputs_dir
from kokoro_tvm.peers import kmodel_device
from kokoro_tvm.reference.stages import durations_from_logits
from kokoro_tvm.runtime import bundle_batches, bundle_runner
from kokoro_tvm.runtime.devices import require_device

log = logging.getLogger(__name__)

COMPONENT_FIELDS = (
    "case",
    "length",
    "worst_rel_l2",
    "within_tolerance",
    "seconds_median",
    "seconds_min",
    "seconds_max",
    "kernels",
    "against",
)  # the last two: run_bundle.py --kernels, --against
RESULTS_DIR = "gpu_check"  # under outputs/: one JSON per run (notebook 06 shows them)
# Reports of runs on machines that had the device, committed so every clone shows them (NOTES/metal.md).
RECORDED_DIR = REPO_ROOT / "NOTES" / "gpu_check"


@contextlib.contextmanager
def bundle_errors():
    """The runner's own errors (it imports nothing from kokoro_tvm, see bundle_runner) and a results folder that
    cannot be read, as the project's one-line ResourceError."""
    try:
        yield
    except (bundle_runner.BundleError, OSError, json.JSONDecodeError) as exc:
        raise ResourceError(f"check bundle: {exc}") from exc


def score(folder, results_dir) -> dict:
    """Durations and audio from a runner's outputs (results_dir/outputs/<case>.npz), per utterance: durations
    from the device's duration logits equal to the CPU build's; the device's decoder audio against pt.dynamic
    (PESQ-WB, STOI) and against the CPU build (relative L2), and the CPU build's decoder against PyTorch's on
    its own inputs (the scale for the device's deviation); the components' summed median latency."""
    from kokoro_tvm.evaluation.metrics import pesq_wb, rel_l2, stoi

    folder, results_dir = Path(folder), Path(results_dir)
    with bundle_errors():
        bundle = bundle_runner.read_bundle(folder)
        results = json.loads((results_dir / "results.json").read_text())
    rows = []
    for utterance in bundle["utterances"]:
        name, n_tokens = utterance["name"], utterance["tokens"]

        def output(component, index=0, utterance_name=name):
            with np.load(results_dir / "outputs" / f"{utterance_name}-{component}.npz") as npz:
                return npz[f"output{index}"]

        logits = output("duration")[:, :n_tokens]
        durations = durations_from_logits(logits, utterance["speed"])
        audio = output("decoder").reshape(-1)[: utterance["frames"] * SAMPLES_PER_FRAME]
        reference = np.load(folder / "audio" / f"{name}-pt.npy")
        cpu = np.load(folder / "audio" / f"{name}-cpu.npy")
        same_inputs = folder / "audio" / f"{name}-pt-same-inputs.npy"  # absent in bundles made before it
        seconds = [c["seconds_median"] for c in results["cases"] if c["utterance"] == name]
        rows.append(
            {
                "utterance": name,
                "tokens": n_tokens,
                "frames": utterance["frames"],
                "durations_equal_cpu": bool(np.array_equal(durations, np.asarray(utterance["durations"]))),
                "durations_equal_pt": bool(np.array_equal(durations, np.asarray(utterance["pt_durations"]))),
                "audio_rel_l2_vs_cpu": rel_l2(cpu, audio),
                # the same measure one step up: the CPU build's decoder against PyTorch's on the same inputs
                "cpu_audio_rel_l2_vs_pt_same_inputs": rel_l2(np.load(same_inputs), cpu)
                if same_inputs.exists()
                else None,
                "pesq_wb_vs_pt": pesq_wb(reference, audio),
                "stoi_vs_pt": stoi(reference, audio),
                "components_seconds": sum(seconds),
                "audio_seconds": audio.shape[0] / SAMPLE_RATE,
            }
        )
    return {"device": results["device"], "device_name": results["device_name"], "utterances": rows}


def gpu_check(
    model,
    weights_fingerprint: str,
    device: str,
    folder,
    utterances=None,
    runs: int = 10,
    keep_bundle: bool = True,
    torch_peer: bool | None = None,
    batches: tuple[int, ...] | None = None,
) -> dict:
    """Bundle, run and score on this machine's `device` in one go; the report is written to
    folder/report.json and outputs/gpu_check/<device>.json. `keep_bundle=False` removes the bundle (mostly
    parameters, 100+ MB) once scored; `torch_peer` (default: on a GPU) runs KModel on the same device and
    utterances too (kokoro_tvm.peers.kmodel_device; on the CPU, `kokoro-tvm bench` has that peer); `batches`: the
    batch sizes whose throughput is measured (default gpu_batches.default_batches: none on the CPU)."""

    check_device(device)
    if device != "cpu":
        require_device(device)
    folder = Path(folder)
    bundle = make_bundle(model, weights_fingerprint, device, folder / "bundle", utterances, batches=batches)
    with bundle_errors():
        bundle_runner.run_bundle(
            folder / "bundle", device, runs=runs, out_dir=folder / "results", kernels=KERNELS_RECORDED
        )
        if torch_peer or (torch_peer is None and device != "cpu"):
            kmodel_device.run_peer(folder / "bundle", device, runs=runs, out_dir=folder / "results")
        if bundle["batches"]:
            bundle_batches.run_batches(folder / "bundle", device, out_dir=folder / "results")
    result = report(folder / "bundle", folder / "results")
    (folder / "report.json").write_text(json.dumps(result, indent=1))
    if not keep_bundle:
        shutil.rmtree(folder / "bundle")
    write_report(result)
    return result


def report(bundle_folder, results_dir) -> dict:
    """A device check's report from its bundle and the runner's results (run here or on another machine):
    per component case the error against the CPU build and the latency, per utterance `score`'s rows."""
    bundle_folder, results_dir = Path(bundle_folder), Path(results_dir)
    with bundle_errors():
        bundle = bundle_runner.read_bundle(bundle_folder)
        results = json.loads((results_dir / "results.json").read_text())
    utterances = score(bundle_folder, results_dir)["utterances"]
    peer = gpu_torch_peer.score_torch_peer(bundle_folder, results_dir, utterances)
    return {
        "device": results["device"],
        "device_name": results["device_name"],
        "host": results["host"],
        "tvm_runtime_only": results.get("tvm_runtime_only"),
        "kernel_compiler": results.get("kernel_compiler"),
        "load_seconds": results.get("load_seconds"),
        "tolerance_rel_l2": results["tolerance_rel_l2"],
        "all_within_tolerance": results["all_within_tolerance"],
        "components": [{k: c[k] for k in COMPONENT_FIELDS if k in c} for c in results["cases"]],
        "utterances": utterances,
        "torch_peer": peer,
        "batches": gpu_batches.score_batches(results_dir, peer),
        "target": bundle["target"],
        "symbolic_failures": bundle.get("symbolic_failures", {}),
        "bundle_bytes": sum(p.stat().st_size for p in bundle_folder.rglob("*") if p.is_file()),
        "build_seconds": bundle["build_seconds"],
        "runs": results["cases"][0]["runs"] if results["cases"] else 0,
    }


def write_report(result: dict) -> Path:
    """outputs/gpu_check/<device>.json, which notebook 06 shows."""
    shared = outputs_dir() / RESULTS_DIR / f"{result['device']}.json"
    shared.parent.mkdir(parents=True, exist_ok=True)
    shared.write_text(json.dumps(result, indent=1))
    return shared


def recorded_runs(directory=None, recorded=RECORDED_DIR) -> list[dict]:
    """One report per checked device (notebook 06): this machine's under outputs/gpu_check/, else the one
    committed under NOTES/gpu_check/; each with "source", the file it came from."""
    directory = Path(directory) if directory is not None else outputs_dir() / RESULTS_DIR
    reports = {}
    for folder in (Path(recorded), directory):  # a run here replaces the committed report of its device
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            report = json.loads(path.read_text())
            source = path.relative_to(REPO_ROOT) if path.is_relative_to(REPO_ROOT) else path
            reports[report["device"]] = {**report, "source": str(source)}
    return list(reports.values())


def symbolic_build_status(model, weights_fingerprint: str, device: str) -> list[dict]:
    """Whether each component's symbolic-length build compiles for `device` (code generation only: no device
    needed): per component "built" with seconds and library bytes, or "failed" with TVM's first error line."""
    from kokoro_tvm.compiler.build import OnDemandBuilder

    builds, rows = OnDemandBuilder(model, weights_fingerprint, "float32", target_for(device)), []
    for component in NAMES:
        start = time.perf_counter()
        try:
            artifact = builds(component, None)
            row = {"status": "built", "library_bytes": artifact.library.stat().st_size}
        except Exception as exc:  # TVM's own error types: recorded, this is what the table reports
            row = {"status": "failed", "error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        rows.append({"component": component, "device": device, **row, "seconds": time.perf_counter() - start})
    return rows


def run(args: argparse.Namespace) -> int:
    from kokoro_tvm.weights.resolve import load_kmodel

    gpu_bundle.check_device(args.target)
    out = Path(args.out or f"outputs/gpu_check/{args.target}")
    if args.score:  # results of run_bundle.py from another machine, scored and reported here
        scored = report(out / "bundle", args.score)
        log.info("report written to %s", write_report(scored))
        print(json.dumps(scored))
        return 0 if _passed(scored) else 1
    if args.target != "cpu" and not args.bundle_only:
        require_device(args.target)  # before any weights load or build
    out = writable_folder(out)
    model, info = load_kmodel(args.weights)
    utterances = gpu_bundle.default_utterances(quick=args.quick)
    if args.bundle_only:
        bundle = gpu_bundle.make_bundle(
            model,
            info.fingerprint,
            args.target,
            out / "bundle",
            utterances,
            with_runtime=args.runtime_kit,
            part_bytes=args.part_mib * 2**20,
            kit_python=args.kit_python,
            batches=args.batches,
        )
        summary = {
            "bundle": str(out / "bundle"),
            "bytes": bundle["bytes"],
            "parts": len(bundle["parts"]),
            "run": bundle["run"],
        }
        if args.archive:  # one xz archive in parts of --part-mib, with the command that unpacks it there
            summary["transfer"] = {
                "folder": str(out / "transfer"),
                **bundle_transfer.archive(out / "bundle", out / "transfer", args.part_mib * 2**20),
            }
        print(json.dumps(summary))
        return 0
    result = gpu_check(model, info.fingerprint, args.target, out, utterances, runs=args.runs, batches=args.batches)
    print(json.dumps(result))
    return 0 if _passed(result) else 1


def _passed(report: dict) -> bool:
    """Every component within tolerance, durations equal, and every batched row as its utterance alone."""
    batched = [row["worst_row_rel_l2"] for row in report.get("batches") or () if "error" not in row]
    return (
        report["all_within_tolerance"]
        and all(u["durations_equal_cpu"] for u in report["utterances"])
        and all(worst <= report["tolerance_rel_l2"] for worst in batched)
    )
