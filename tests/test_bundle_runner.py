"""The device check's standalone runner (kokoro_tvm/runtime/bundle_runner.py) on a tiny bundle built here: it feeds
each library its recorded inputs and parameters, flags an output past the tolerance, and refuses a bad bundle
with one line. Unit tier: a two-op Relax module, no weights; the real-weights run is tests/test_gpu_check_real.py."""

import json
import shutil
import sys

import numpy as np
import pytest

from kokoro_tvm.commands.bundle_transfer import transfer_parts
from kokoro_tvm.commands.gpu_bundle import TOLERANCE_REL_L2, pack_params
from kokoro_tvm.runtime import bundle_device, bundle_runner


def _tiny_library(path, scale=1.0):
    """main(x, w) -> (x * w, x * w + w), float32 [2, 3], exported like a component's library (with `scale`,
    both outputs times that: another build that is off by as much)."""
    import tvm
    from tvm import relax

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((2, 3), "float32"))
    w = relax.Var("w", relax.TensorType((2, 3), "float32"))
    with bb.function("main", [x, w]):
        y = bb.emit(relax.op.multiply(x, w))
        z = bb.emit(relax.op.add(y, w))
        if scale != 1.0:
            y, z = (bb.emit(relax.op.multiply(v, relax.const(scale, "float32"))) for v in (y, z))
        bb.emit_func_output(relax.Tuple([y, z]))
    tvm.compile(bb.get(), target=tvm.target.Target({"kind": "llvm"})).export_library(str(path))


@pytest.fixture(scope="module")
def tiny_library(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny") / "tiny.so"
    _tiny_library(path)
    return path


def _bundle(folder, library, expected_scale=1.0, device="cpu"):
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((2, 3)).astype(np.float32), rng.standard_normal((2, 3)).astype(np.float32)
    for sub in ("libs", "params", "cases"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    (folder / "libs" / "tiny.so").write_bytes(library.read_bytes())
    np.savez(folder / "params" / "tiny.npz", **pack_params([w]))
    y = x * w
    np.savez(folder / "cases" / "one.npz", input0=x, expected0=y * expected_scale, expected1=y + w)
    bundle = {
        "format": bundle_runner.BUNDLE_FORMAT,
        "device": device,
        "target": {"kind": "llvm"},
        "dtype": "float32",
        "created": "now",
        "tolerance_rel_l2": TOLERANCE_REL_L2,
        "libraries": {
            "tiny": {
                "component": "tiny",
                "library": "libs/tiny.so",
                "params": "params/tiny.npz",
                "param_names": ["w"],
                "length_tile": None,
                "transform_params": None,
            }
        },
        "cases": [
            {
                "name": "one",
                "utterance": "u",
                "component": "tiny",
                "library": "tiny",
                "length": 3,
                "tiles": None,
                "inputs": "cases/one.npz",
                "n_inputs": 1,
                "n_outputs": 2,
            }
        ],
        "run": f"python3 run_bundle.py . --device {device} --out results",
    }
    (folder / "bundle.json").write_text(json.dumps(bundle))
    return folder


def test_the_runner_matches_the_recorded_outputs_and_keeps_them(tmp_path, tiny_library):
    folder = _bundle(tmp_path / "b", tiny_library)
    assert bundle_runner.main([str(folder), "--device", "cpu", "--out", str(tmp_path / "r"), "--runs", "3"]) == 0
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    (case,) = results["cases"]
    # x * w is exact in float32 either way; x * w + w may be one fused multiply-add here and two roundings in
    # numpy: at most an ulp apart, far inside the tolerance
    assert case["errors"][0]["max_abs"] == 0.0 and case["errors"][1]["rel_l2"] < 1e-6
    assert case["within_tolerance"] and results["all_within_tolerance"] and case["runs"] == 3
    assert case["seconds_min"] <= case["seconds_median"] <= case["seconds_max"]
    with np.load(tmp_path / "r" / "outputs" / "one.npz") as npz:
        assert npz["output0"].shape == (2, 3)


def test_the_runner_names_the_calls_that_take_longest(tmp_path, tiny_library):
    """`--kernels N` times every call inside one more call of each case: the tiny module's own kernel is among
    them with its call count, longest first, at most N; the outputs are still the recorded ones, and without
    the option no row carries kernel times."""
    folder = _bundle(tmp_path / "b", tiny_library)
    for most in (50, 2):
        args = [str(folder), "--device", "cpu", "--out", str(tmp_path / "r"), "--runs", "1", "--kernels", str(most)]
        assert bundle_runner.main(args) == 0
        (case,) = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]
        kernels = case["kernels"]
        assert case["within_tolerance"] and 1 <= len(kernels) <= most
        assert [k["seconds"] for k in kernels] == sorted((k["seconds"] for k in kernels), reverse=True)
        assert all(k["calls"] >= 1 and k["seconds"] > 0 for k in kernels)
        if most == 50:  # every call: x * w and its + w, fused into one kernel, called once
            assert [k["calls"] for k in kernels if "multiply" in k["name"]] == [1], kernels
    assert "kernels" not in bundle_runner.run_bundle(folder, "cpu", runs=1)["cases"][0]


def test_another_build_is_timed_in_turn_with_the_bundles_own(tmp_path, tiny_library, capsys):
    """`--against DIR` loads DIR's build of a library (the same path, libs/tiny.so) with the bundle's parameters
    and times it in the same runs; the row keeps the bundle's own outputs and says how far the other build's
    are from them (here 1e-3: it scales both outputs by 1.001). A folder without any of the libraries is one
    line."""
    folder = _bundle(tmp_path / "b", tiny_library)
    (tmp_path / "other" / "libs").mkdir(parents=True)
    _tiny_library(tmp_path / "other" / "libs" / "tiny.so", scale=1.001)
    args = [str(folder), "--device", "cpu", "--out", str(tmp_path / "r"), "--runs", "4"]
    assert bundle_runner.main([*args, "--against", str(tmp_path / "other")]) == 0
    results = json.loads((tmp_path / "r" / "results.json").read_text())
    (case,) = results["cases"]
    assert case["within_tolerance"] and case["errors"][0]["max_abs"] == 0.0
    other = case["against"]
    assert other["rel_l2_to_this"] == pytest.approx(1e-3, rel=1e-3)  # float32 products: 1e-3 to 3 digits
    assert other["seconds_min"] <= other["seconds_median"] <= other["seconds_max"]
    assert bundle_runner.main([*args, "--against", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert "holds none of the bundle's libraries" in err and len(err.splitlines()) == 1


def test_an_output_past_the_tolerance_fails_the_run(tmp_path, tiny_library):
    folder = _bundle(tmp_path / "b", tiny_library, expected_scale=1.01)  # a 1% error: 100x the tolerance
    assert bundle_runner.main([str(folder), "--device", "cpu", "--out", str(tmp_path / "r"), "--runs", "1"]) == 1
    (case,) = json.loads((tmp_path / "r" / "results.json").read_text())["cases"]
    assert not case["within_tolerance"] and case["worst_rel_l2"] == pytest.approx(0.01 / 1.01, rel=1e-3)


@pytest.mark.parametrize(
    "spoil, message",
    [
        (lambda f: (f / "bundle.json").unlink(), "not a check bundle"),
        (lambda f: (f / "libs" / "tiny.so").unlink(), "missing libs/tiny.so"),
        (lambda f: (f / "bundle.json").write_text("{"), "not valid JSON"),
        (lambda f: (f / "libs" / "tiny.so").write_bytes(b"not a library"), "tiny.so"),  # TVM's own error
    ],
)
def test_a_bad_bundle_is_one_line(tmp_path, tiny_library, capsys, spoil, message):
    folder = _bundle(tmp_path / "b", tiny_library)
    spoil(folder)
    assert bundle_runner.main([str(folder), "--device", "cpu", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("run_bundle: error:") and message in err and "\n" not in err


def test_a_runner_without_tvm_to_import_says_so_in_one_line(tmp_path, tiny_library, capsys, monkeypatch):
    """Run without the bundle's PYTHONPATH on a machine without TVM: one line that says where TVM is, no
    traceback."""
    folder = _bundle(tmp_path / "b", tiny_library)
    monkeypatch.setitem(sys.modules, "tvm", None)  # `import tvm` fails as on a machine without it
    assert bundle_runner.main([str(folder), "--device", "cpu", "--out", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("run_bundle: error:") and "PYTHONPATH" in err and "\n" not in err


def test_a_bundle_runs_only_on_its_device(tmp_path, tiny_library, capsys):
    folder = _bundle(tmp_path / "b", tiny_library, device="cuda")
    assert bundle_runner.main([str(folder), "--device", "cpu", "--out", str(tmp_path / "r")]) == 2
    assert "built for cuda, not cpu" in capsys.readouterr().err


def test_parameters_with_few_values_travel_as_a_lossless_codebook(tmp_path):
    rng = np.random.default_rng(1)
    quantized = (rng.integers(-128, 128, (64, 40)) * np.float32(0.013)).astype(np.float32)  # int8-derived
    free = rng.standard_normal((50, 7)).astype(np.float32)
    packed = pack_params([quantized, free])
    assert packed["0.index"].dtype == np.uint8 and "1" in packed  # only the first is coded
    np.savez_compressed(tmp_path / "p.npz", **packed)
    restored = bundle_runner.load_params(tmp_path / "p.npz", ["q", "f"])
    assert all(np.array_equal(a, b) and a.dtype == b.dtype for a, b in zip(restored, [quantized, free], strict=True))


def test_transfer_parts_hold_every_file_within_the_limit(tmp_path):
    sizes = {"a": 60, "b": 50, "c": 30, "d": 20, "e": 10}
    for name, size in sizes.items():
        (tmp_path / name).write_bytes(b"x" * size)
    parts = transfer_parts(tmp_path, limit=80)
    assert sorted(name for part in parts for name in part) == sorted(sizes)
    assert all(sum(sizes[n] for n in part) <= 80 for part in parts) and len(parts) == 3  # 60+20, 50+30, 10


class _ComputeVersion:
    """What register_cuda_compiler reads of a CUDA device: its compute capability (here an H100's)."""

    compute_version = "9.0"


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs NVIDIA's nvcc (the GPU machine's compiler)")
def test_cuda_libraries_are_compiled_by_nvcc_for_the_device_as_they_load():
    """This project's TVM has no CUDA: a CUDA library holds CUDA source, and the runtime asks the
    tvm_callback_cuda_compile callback for a binary when it loads. The runner's callback turns TVM's own
    generated source into a fatbin for the device's architecture, without fast math."""
    import tvm
    import tvm_ffi
    from tvm import te

    a = te.placeholder((256,), name="a")
    b = te.compute((256,), lambda i: tvm.tirx.sin(a[i]), name="b")
    schedule = tvm.s_tir.Schedule(te.create_prim_func([a, b]))
    (loop,) = schedule.get_loops(schedule.get_sblock("b"))
    block, thread = schedule.split(loop, [None, 64])
    schedule.bind(block, "blockIdx.x")
    schedule.bind(thread, "threadIdx.x")
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    module = tvm.compile(schedule.mod, target=target).mod
    source = (module.imports if hasattr(module, "imports") else module.imported_modules)[0].inspect_source()

    command = bundle_device.register_cuda_compiler(_ComputeVersion())
    binary = bytes(tvm_ffi.get_global_func("tvm_callback_cuda_compile")(source))
    assert "-arch=sm_90" in command and "fast_math" not in command
    assert binary[:4] == bytes.fromhex("50ed55ba")  # a CUDA fatbin (the runtime loads it like a cubin)
    # machine code (an ELF cubin inside), assembled for the device: the cubin keeps ptxas's "-arch sm_90"
    assert b"\x7fELF" in binary and b"-arch sm_90" in binary


def test_a_runtime_kit_for_another_python_carries_that_pythons_tvm_ffi(tmp_path):
    """A GPU machine may run another Python (3.12 on the lent H100s): tvm_ffi's CPython extension must be that
    Python's (its wheel of the same version, from the package index); tvm itself is pure Python."""
    from kokoro_tvm.commands.runtime_kit import runtime_kit

    other = "3.12" if sys.version_info[:2] != (3, 12) else "3.11"
    runtime_kit(tmp_path / "kit", python=other)
    tag = other.replace(".", "")
    cores = sorted(p.name for p in (tmp_path / "kit" / "tvm_ffi").glob("core.*.so"))
    assert cores == [f"core.cpython-{tag}-x86_64-linux-gnu.so"]
    assert (tmp_path / "kit" / "tvm" / "lib" / "libtvm_runtime.so").is_file()
    assert not (tmp_path / "kit" / "tvm" / "lib" / "libtvm_compiler.so").exists()


def test_recorded_runs_prefer_this_machines_report_to_the_committed_one(tmp_path):
    """Notebook 06 shows each device's report: a run here (outputs/gpu_check/) over the one committed from the
    machine that had the device (NOTES/gpu_check/), each with the file it came from."""
    from kokoro_tvm.commands.gpu_check import RECORDED_DIR, recorded_runs

    here, committed = tmp_path / "outputs", tmp_path / "committed"
    here.mkdir(), committed.mkdir()
    (committed / "cuda.json").write_text(json.dumps({"device": "cuda", "device_name": "recorded"}))
    (committed / "metal.json").write_text(json.dumps({"device": "metal", "device_name": "recorded"}))
    (here / "cuda.json").write_text(json.dumps({"device": "cuda", "device_name": "here"}))
    runs = {r["device"]: r for r in recorded_runs(here, committed)}
    assert runs["cuda"]["device_name"] == "here" and runs["cuda"]["source"] == str(here / "cuda.json")
    assert runs["metal"]["device_name"] == "recorded" and runs["metal"]["source"] == str(committed / "metal.json")
    assert sorted(runs) == ["cuda", "metal"]  # one report per device, whichever folder it came from
    # without a report here, each committed one is shown with its path relative to the repository
    shipped = {r["device"]: r for r in recorded_runs(tmp_path / "empty", RECORDED_DIR)}
    assert {r["source"] for r in shipped.values()} == {
        f"NOTES/gpu_check/{path.name}" for path in RECORDED_DIR.glob("*.json")
    }


def test_a_bundle_travels_as_an_xz_archive_in_parts_and_unpacks_with_its_own_command(tmp_path, tiny_library):
    """The archive's parts each fit the limit; joined, they match transfer.json's sha256, and its unpack command
    (cat and Python's tarfile, nothing else) gives back every file: .npz files with the same arrays, stored
    uncompressed inside so xz can compress them; the rest byte for byte."""
    import hashlib
    import subprocess

    from kokoro_tvm.commands.bundle_transfer import ARCHIVE, archive

    folder = _bundle(tmp_path / "b", tiny_library)
    rng = np.random.default_rng(3)
    np.savez_compressed(folder / "params" / "big.npz", w=rng.integers(-127, 128, 300_000).astype(np.float32))
    limit = 64 * 1024
    transfer = archive(folder, tmp_path / "transfer", limit)
    parts = [tmp_path / "transfer" / name for name in transfer["parts"]]
    assert len(parts) > 1 and all(p.stat().st_size <= limit for p in parts)
    assert hashlib.sha256(b"".join(p.read_bytes() for p in parts)).hexdigest() == transfer["sha256"]
    there = tmp_path / "there"
    there.mkdir()
    for p in parts:
        (there / p.name).write_bytes(p.read_bytes())
    subprocess.run(transfer["unpack"], shell=True, cwd=there, check=True, capture_output=True)
    assert (there / ARCHIVE).is_file()
    for original in (p for p in folder.rglob("*") if p.is_file()):
        copy = there / "bundle" / original.relative_to(folder)
        if original.suffix == ".npz":
            with np.load(original) as a, np.load(copy) as b:
                assert a.files == b.files and all(np.array_equal(a[k], b[k]) for k in a.files)
        else:
            assert copy.read_bytes() == original.read_bytes()
    assert transfer["run"].startswith("cd bundle && python3 run_bundle.py")


def test_run_all_unpacks_runs_and_packs_the_results_in_one_command(tmp_path, tiny_library):
    """For a machine lent by the minute: transfer.json's run_all unpacks the parts, runs the bundle (here the
    tiny one on this CPU, with this Python as python3) and leaves its results in one archive to bring back."""
    import io
    import os
    import shutil
    import subprocess
    import tarfile

    from kokoro_tvm.commands.bundle_transfer import RESULTS_ARCHIVE, archive
    from kokoro_tvm.runtime import bundle_device

    folder = _bundle(tmp_path / "b", tiny_library)
    shutil.copyfile(bundle_runner.__file__, folder / "run_bundle.py")
    shutil.copyfile(bundle_device.__file__, folder / "bundle_device.py")
    transfer = archive(folder, tmp_path / "transfer", 64 * 1024)
    (tmp_path / "bin").mkdir()  # python3: this Python, with its packages (a venv's, where the tests run in one)
    (tmp_path / "bin" / "python3").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    (tmp_path / "bin" / "python3").chmod(0o755)
    there = tmp_path / "there"
    shutil.copytree(tmp_path / "transfer", there)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    done = subprocess.run(transfer["run_all"], shell=True, cwd=there, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    pieces = sorted((there / "bundle").glob(f"{RESULTS_ARCHIVE}.*"))
    assert [p.name for p in pieces] == [f"{RESULTS_ARCHIVE}.00"]  # a few KiB: one piece
    with tarfile.open(fileobj=io.BytesIO(b"".join(p.read_bytes() for p in pieces))) as packed:
        results = json.loads(packed.extractfile("results/results.json").read())
    assert results["all_within_tolerance"] and results["cases"][0]["case"] == "one"


def test_a_kit_for_a_python_without_a_wheel_is_one_clear_error(tmp_path):
    from kokoro_tvm.commands.runtime_kit import runtime_kit
    from kokoro_tvm.errors import ResourceError

    with pytest.raises(ResourceError, match=r"no apache-tvm-ffi==\S+ wheel for Python 3\.4 on Linux x86-64"):
        runtime_kit(tmp_path / "kit", python="3.4")
