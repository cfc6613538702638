"""Real-weights tier: the device check bundle made for this CPU and run by its standalone runner in a separate
process with TVM's runtime only (the bundle's runtime_kit, no compiler library, no kokoro_tvm import), as a GPU
machine without this project would run it; then scored back here against the CPU build and pt.dynamic. The
five symbolic-length builds are the ones tests/test_dynamic_real.py uses (the shared cache: built once). Then
the bundle's other runners: batched throughput (run_batches.py) and PyTorch's KModel (run_torch_peer.py)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from kokoro_tvm import marks
from kokoro_tvm.commands import gpu_bundle, gpu_check
from kokoro_tvm.components import LENGTH_TILE

pytestmark = pytest.mark.real

# The bundle's CPU libraries are the CPU runtime's own builds, fed the inputs the runtime gave them: any
# difference at all means the runner passed inputs, parameters or tile counts differently. 1e-6 leaves room
# only for a reduction that a thread pool of another size might split differently.
SAME_BUILD_REL_L2 = 1e-6
PESQ_MIN, STOI_MIN = marks.FP32_PESQ_WB, marks.FP32_STOI  # the fp32 bars of the audio comparison
# Our fp32 decoder against PyTorch's on the very same inputs ("Hello world."): 5.6e-6 measured, since SineGen's
# phase is rounded as PyTorch rounds it (2.8e-3 before). 1e-4 is the device check's own per-stage bar.
SAME_INPUTS_REL_L2 = 1e-4


@pytest.fixture(scope="module")
def cpu_bundle(kmodel, tmp_path_factory):
    model, info = kmodel
    folder = tmp_path_factory.mktemp("gpu-check") / "bundle"
    utterances = gpu_bundle.default_utterances(quick=True)
    # batch 3: the fp32 symbolic builds tests/test_batched.py runs too (the shared cache: built once)
    bundle = gpu_bundle.make_bundle(model, info.fingerprint, "cpu", folder, utterances, with_runtime=True, batches=(3,))
    return folder, bundle


@pytest.fixture(scope="module")
def runner_results(cpu_bundle, tmp_path_factory):
    folder, _ = cpu_bundle
    out = tmp_path_factory.mktemp("gpu-check-results")
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(folder / "runtime_kit"))
    done = subprocess.run(
        [sys.executable, "run_bundle.py", ".", "--device", "cpu", "--out", str(out), "--runs", "2", "--warmup", "1"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return out, json.loads((out / "results.json").read_text())


def test_the_bundle_records_every_component_call_once(cpu_bundle):
    from kokoro_tvm.components import NAMES

    _, bundle = cpu_bundle
    assert sorted(case["component"] for case in bundle["cases"]) == sorted(NAMES)  # one utterance, one call each
    assert set(bundle["libraries"]) == set(NAMES) and not bundle["symbolic_failures"]
    # symbolic builds, whole tiles
    assert all(case["tiles"] * LENGTH_TILE == case["length"] for case in bundle["cases"])


def test_the_runner_needs_only_the_tvm_runtime(cpu_bundle, runner_results):
    folder, _ = cpu_bundle
    _, results = runner_results
    assert results["tvm_runtime_only"] and not results["imported_project"]
    assert results["tvm_location"].startswith(str(folder / "runtime_kit"))
    assert not any(p.name == "libtvm_compiler.so" for p in (folder / "runtime_kit").rglob("*.so"))


def test_every_component_reproduces_the_cpu_build(runner_results):
    _, results = runner_results
    assert results["all_within_tolerance"]
    worst = {case["component"]: case["worst_rel_l2"] for case in results["cases"]}
    assert max(worst.values()) <= SAME_BUILD_REL_L2, worst


def test_scored_audio_and_durations(cpu_bundle, runner_results):
    folder, _ = cpu_bundle
    out, _ = runner_results
    (row,) = gpu_check.score(folder, out)["utterances"]
    assert row["durations_equal_cpu"] and row["durations_equal_pt"]
    assert row["audio_rel_l2_vs_cpu"] <= SAME_BUILD_REL_L2
    assert row["pesq_wb_vs_pt"] >= PESQ_MIN and row["stoi_vs_pt"] >= STOI_MIN
    assert row["cpu_audio_rel_l2_vs_pt_same_inputs"] <= SAME_INPUTS_REL_L2
    assert np.isclose(row["audio_seconds"], row["frames"] * 600 / 24000)


# The PyTorch peer's runner builds KModel from the bundle's component parameters (weight norm folded, as our
# export folds it) with kokoro's model files from the bundle; KModel in this process on the same weights and
# STFT (torch.stft, KModel's default and what a GPU user runs), seeded alike, runs the same float32 sums on the
# same CPU: 0.0 measured. 1e-6 leaves room only for a thread pool that splits a reduction differently.
SAME_MODEL_REL_L2 = 1e-6


@pytest.fixture(scope="module")
def torch_peer_results(cpu_bundle, runner_results):
    """run_torch_peer.py as the bundle's run line has it, on this CPU, into the runner's results folder."""
    folder, _ = cpu_bundle
    out, _ = runner_results
    command = ["run_torch_peer.py", ".", "--device", "cpu", "--out", str(out), "--runs", "1", "--warmup", "0"]
    done = subprocess.run(
        [sys.executable, *command],
        cwd=folder,
        env=dict(os.environ, PYTHONPATH="torch_peer"),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads((out / "torch_peer.json").read_text())


def test_the_torch_peer_is_kmodel_on_the_bundles_weights(cpu_bundle, torch_peer_results, runner_results):
    import torch

    from kokoro_tvm.evaluation.metrics import rel_l2
    from kokoro_tvm.weights.resolve import load_kmodel

    folder, bundle = cpu_bundle
    out, _ = runner_results
    assert torch_peer_results["kokoro"] == str(folder / "torch_peer" / "kokoro")  # the bundle's copy of kokoro
    assert {row["peer"] for row in torch_peer_results["rows"]} == {"torch", "torch_bf16"}
    (utterance,) = bundle["utterances"]
    model, _ = load_kmodel(disable_complex=False)
    torch.manual_seed(torch_peer_results["seed"])
    ids = torch.tensor([utterance["input_ids"]])
    expected, durations = model.forward_with_tokens(ids, torch.from_numpy(np.load(folder / utterance["style"])))
    fp32 = next(row for row in torch_peer_results["rows"] if row["peer"] == "torch")
    assert fp32["durations"] == durations.tolist() == utterance["pt_durations"]
    assert rel_l2(expected.numpy(), np.load(out / fp32["audio"])) <= SAME_MODEL_REL_L2
    scored = gpu_check.report(folder, out)["torch_peer"]  # the report scores the peer beside the components
    assert [row["peer"] for row in scored] == ["torch", "torch_bf16"]
    assert scored[0]["durations_equal_pt"] and all(row["tvm_chain_over_peer"] > 0 for row in scored)
    assert all(np.isfinite(np.load(out / row["audio"])).all() for row in torch_peer_results["rows"])


@pytest.fixture(scope="module")
def batches_results(cpu_bundle, runner_results):
    """run_batches.py as the bundle's run line has it (TVM's runtime only), into the runner's results folder."""
    folder, bundle = cpu_bundle
    out, _ = runner_results
    env = dict(os.environ, TVM_USE_RUNTIME_LIB="1", PYTHONPATH=str(folder / "runtime_kit"))
    command = ["run_batches.py", ".", "--device", "cpu", "--out", str(out), "--runs", "1", "--warmup", "0"]
    done = subprocess.run([sys.executable, *command], cwd=folder, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert bundle["batches"]["run"].startswith("TVM_USE_RUNTIME_LIB=1 PYTHONPATH=runtime_kit python3 run_batches.py")
    return json.loads((out / "batches.json").read_text())


def test_a_batch_gives_every_row_its_utterance_alone(cpu_bundle, runner_results, batches_results, torch_peer_results):
    """B copies of the utterance through the batch-3 builds: every row as the batch-1 build gives it, within the
    device check's per-stage bar (gpu_bundle.TOLERANCE_REL_L2: the batch-3 builds tile their sums differently;
    2.3e-6 measured on the Zen 4), and the report scores the throughput against batch 1 and PyTorch's."""
    from kokoro_tvm.components import NAMES

    folder, _ = cpu_bundle
    out, _ = runner_results
    rows = {row["batch"]: row for row in batches_results["rows"]}
    assert sorted(rows) == [1, 3] and batches_results["tvm_runtime_only"]
    assert rows[1]["worst_row_rel_l2"] == 0.0  # batch 1 is the bundle's own build, against itself
    assert rows[3]["worst_row_rel_l2"] <= gpu_bundle.TOLERANCE_REL_L2 and batches_results["all_within_tolerance"]
    assert np.isclose(rows[3]["audio_seconds"], 3 * rows[1]["audio_seconds"])
    assert set(rows[3]["components"]) == set(NAMES)
    scored = {row["batch"]: row for row in gpu_check.report(folder, out)["batches"]}
    assert scored[1]["vs_batch_1"] == 1.0 and scored[3]["vs_batch_1"] > 0
    assert all(row["over_pytorch"] > 0 for row in scored.values())  # the PyTorch peer ran into the same folder


def test_the_cli_scores_results_brought_back(cpu_bundle, runner_results, torch_peer_results, batches_results, tmp_path):
    """`kokoro-tvm gpu-check --out DIR --score RESULTS`, as after a run on another machine: the report, with the
    PyTorch peer and the batches, written where notebook 06 reads it, and the exit status says it passed."""
    from kokoro_tvm.cli import main
    from kokoro_tvm.paths import OUTPUTS_ENV

    folder, _ = cpu_bundle
    out, _ = runner_results
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(OUTPUTS_ENV, str(tmp_path))
        assert main(["-q", "gpu-check", "--target", "cpu", "--out", str(folder.parent), "--score", str(out)]) == 0
    written = json.loads((tmp_path / "gpu_check" / "cpu.json").read_text())
    assert written["torch_peer"] and written["batches"] and written["all_within_tolerance"]
