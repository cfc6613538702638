"""Compile stage on random weights (unit tier): component parity in float64, the artifact cache, and a runtime
that never imports torch."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm
from random_builds import RANDOM_FINGERPRINT, bucket

from kokoro_tvm.artifacts import Artifact, file_sha256
from kokoro_tvm.compiler.build import BuildSpec, build, build_source_digest
from kokoro_tvm.compiler.export import ComponentShape, component_module, example_inputs
from kokoro_tvm.compiler.patches import export_patches
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.components import NAMES
from kokoro_tvm.reference.pt_dynamic import default_dtype
from kokoro_tvm.runtime.vm import ComponentRunner


@pytest.mark.parametrize("component", NAMES)
def test_component_float64_matches_torch(component, unit_cache, random_model64):
    spec = BuildSpec(component, bucket(component), "float64")  # the build tests/test_masking.py uses too
    inputs = example_inputs(ComponentShape(component, spec.length), torch.float64)
    with export_patches(random_model64), torch.no_grad(), default_dtype(torch.float64):
        expected = component_module(random_model64, component)(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = ComponentRunner(build(random_model64, RANDOM_FINGERPRINT, spec))(*(x.numpy() for x in inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        e = e.numpy()
        assert g.shape == e.shape and g.dtype == np.float64
        # float64 throughout: only summation order differs; the decoder's deep conv stack amplifies
        # rounding by a few orders of magnitude, still far below any float32 effect (1e-7)
        assert np.linalg.norm(g - e) / np.linalg.norm(e) < 1e-10


def test_build_source_digest_follows_every_build_source_file(tmp_path):
    (tmp_path / "compiler" / "schedule").mkdir(parents=True)
    (tmp_path / "reference").mkdir()
    rule = tmp_path / "compiler" / "schedule" / "cpu.py"
    rule.write_text("TILE = 16\n")
    (tmp_path / "components.py").write_text("LENGTH_TILE = 8\n")
    (tmp_path / "reference" / "pt_dynamic.py").write_text("")
    (tmp_path / "weights").mkdir()
    bases = tmp_path / "weights" / "stft.py"
    bases.write_text("SCALE = 1\n")
    (tmp_path / "weights" / "resolve.py").write_text("")  # not a build source
    (tmp_path / "runtime.py").write_text("")  # not a build source
    before = build_source_digest(tmp_path)
    assert build_source_digest(tmp_path) == before
    (tmp_path / "runtime.py").write_text("changed = True\n")
    (tmp_path / "weights" / "resolve.py").write_text("changed = True\n")
    assert build_source_digest(tmp_path) == before  # the runtime does not decide what a build computes
    bases.write_text("SCALE = 2\n")  # the STFT bases every model gets
    assert build_source_digest(tmp_path) != before
    bases.write_text("SCALE = 1\n")
    rule.write_text("TILE = 8\n")  # a schedule edit
    edited = build_source_digest(tmp_path)
    assert edited != before
    rule.rename(rule.with_name("gpu.py"))  # the same bytes under another name
    assert build_source_digest(tmp_path) not in (before, edited)
    (tmp_path / "reference" / "pt_dynamic.py").unlink()
    (tmp_path / "reference").rmdir()
    with pytest.raises(FileNotFoundError, match="reference"):
        build_source_digest(tmp_path)


def test_cache_reuses_and_rebuilds_on_corruption(unit_cache, random_model64, caplog):
    spec = BuildSpec("text_encoder", 5, "float64")
    first = build(random_model64, RANDOM_FINGERPRINT, spec)
    mtime = first.library.stat().st_mtime_ns
    again = build(random_model64, RANDOM_FINGERPRINT, spec)
    assert again.library == first.library and again.library.stat().st_mtime_ns == mtime  # reused
    key = again.manifest["key"]
    assert key["weights"] == RANDOM_FINGERPRINT and key["target"] == host_target()
    assert key["tvm"] and key["recipe"] and key["length"] == 5 and key["dtype"] == "float64"
    assert key["source"] == build_source_digest()

    first.library.write_bytes(b"not a shared library")  # corrupt code: detected by its sha256
    with caplog.at_level("WARNING"):
        rebuilt = build(random_model64, RANDOM_FINGERPRINT, spec)
    assert "rebuilding" in caplog.text and rebuilt.library.read_bytes() != b"not a shared library"
    ComponentRunner(rebuilt)  # loads

    with np.load(rebuilt.params) as npz:  # stale parameters: detected by their digest
        arrays = dict(npz)
    first_name = rebuilt.param_names[0]
    arrays[first_name] = arrays[first_name] + 1
    np.savez(rebuilt.params, **arrays)
    caplog.clear()
    with caplog.at_level("WARNING"):
        fixed = build(random_model64, RANDOM_FINGERPRINT, spec)
    assert "rebuilding" in caplog.text
    fixed.load_params()  # verified against the digest again

    other = build(random_model64, "other-weights", spec)
    assert other.library.parent != fixed.library.parent  # the weights are part of the key


def test_prune_removes_only_what_this_checkout_cannot_load(unit_cache, random_model64, caplog):
    """`kokoro-tvm compile --prune`'s step: folders of other build sources or another TVM go; the current build,
    another weights file's and one still being built (no manifest yet) stay, and the current one loads unrebuilt."""
    import shutil

    from kokoro_tvm.commands.compile_builds import prune

    spec = BuildSpec("text_encoder", 5, "float64")
    current = build(random_model64, RANDOM_FINGERPRINT, spec).library.parent
    other_weights = build(random_model64, "other-weights", spec).library.parent
    stale = {"source": current.with_name("stale-source"), "tvm": current.with_name("stale-tvm")}
    for field, folder in stale.items():
        shutil.copytree(current, folder)
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["key"][field] = "0" * 16
        (folder / "manifest.json").write_text(json.dumps(manifest))
    building = current.with_name("still-building")
    building.mkdir()
    index = unit_cache / "ready"  # ready-index entries: one naming a stale folder, one current, one unreadable
    index.mkdir(exist_ok=True)
    for name, folders in {"stale": [current, stale["source"]], "current": [current, other_weights]}.items():
        (index / f"{name}.json").write_text(json.dumps({"components": {str(i): str(f) for i, f in enumerate(folders)}}))
    (index / "torn.json").write_text('{"components": {"text_enc')
    with caplog.at_level("INFO"):
        prune()  # on unit_cache's artifacts, as `compile --prune` on the cache
    assert "pruned 2 artifacts" in caplog.text and "ready-index entries naming removed builds" in caplog.text
    assert not any(folder.exists() for folder in stale.values())
    # (the shared cache's index may hold other tests' entries, whose folders exist: only these three are asked)
    assert (index / "current.json").is_file() and not (index / "stale.json").exists()
    assert not (index / "torn.json").exists()
    assert current.exists() and other_weights.exists() and building.exists()
    caplog.clear()
    with caplog.at_level("WARNING"):
        assert build(random_model64, RANDOM_FINGERPRINT, spec).library.parent == current
    assert "rebuilding" not in caplog.text


def test_a_moved_cache_finds_its_artifacts_without_rebuilding(
    unit_cache, random_model64, tmp_path, monkeypatch, caplog
):
    """The manifest names its parameter file relative to the artifact's folder: a cache copied to another folder
    (a new $KOKORO_TVM_CACHE, another mount) serves its builds as they are, where an absolute path sent every
    component to a rebuild (minutes for the real model)."""
    import shutil

    spec = BuildSpec("text_encoder", 5, "float64")
    built = build(random_model64, RANDOM_FINGERPRINT, spec)
    moved = tmp_path / "moved"
    for path in (built.library.parent, built.params):  # the artifact and its parameters, where they lay
        place = moved / path.relative_to(unit_cache)
        place.parent.mkdir(parents=True, exist_ok=True)
        if path.is_dir():
            shutil.copytree(path, place)
        else:
            shutil.copy2(path, place)
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(moved))
    with caplog.at_level("WARNING"):
        found = build(lambda: pytest.fail("a moved cache rebuilt"), RANDOM_FINGERPRINT, spec)
    assert found.library.is_relative_to(moved) and found.params.is_relative_to(moved), found
    assert "rebuilding" not in caplog.text
    arrays = found.load_params()
    assert len(arrays) == len(built.param_names)


def test_a_model_loader_is_called_only_to_build(unit_cache, random_model64):
    """`say --backend tvm` hands the builder a loader, not a KModel: with every artifact cached the model (kokoro,
    transformers, its weights: ~4 s) is never made; a missing artifact calls the loader once."""
    from kokoro_tvm.compiler.build import OnDemandBuilder

    calls = []

    def loader():
        calls.append(1)
        return random_model64

    cached = build(random_model64, RANDOM_FINGERPRINT, BuildSpec("text_encoder", 5, "float64"))
    builder = OnDemandBuilder(loader, RANDOM_FINGERPRINT, "float64")
    assert builder("text_encoder", 5).library == cached.library and not calls
    built = build(loader, "weights-not-built-yet", BuildSpec("text_encoder", 5, "float64"))
    assert calls == [1] and built.manifest["key"]["weights"] == "weights-not-built-yet"


def test_a_cache_check_hands_its_verified_parameters_to_the_first_load(unit_cache, random_model64):
    """The cache check reads and verifies the parameters; the runner's load takes those arrays instead of reading
    the file again, once: the artifact does not keep a second copy of the weights."""
    spec = BuildSpec("text_encoder", 5, "float64")
    build(random_model64, RANDOM_FINGERPRINT, spec)
    cached = build(random_model64, RANDOM_FINGERPRINT, spec)
    handed = cached.verified
    assert handed is not None and cached.runtime_params() is handed and cached.verified is None
    again = cached.runtime_params()  # read and verified from the files
    assert again is not handed and (again.order, again.transform) == (handed.order, handed.transform)
    assert all(np.array_equal(a, b) for a, b in zip(again.arrays, handed.arrays, strict=True))


def test_runtime_works_without_torch_or_the_tvm_package(unit_cache, random_model64, tmp_path):
    """torch and the `tvm` package (its compiler) are made unimportable (tvm_ffi imports torch eagerly when
    present, so "not in sys.modules" cannot be the check): loading and running an artifact through TVM's runtime
    library alone must still work, and give the bits it gives where `tvm` is imported."""
    artifact = build(random_model64, RANDOM_FINGERPRINT, BuildSpec("text_encoder", 5, "float64"))
    inputs = (np.arange(5, dtype=np.int64)[None], np.array([5], dtype=np.int64))
    script = f"""
import sys, numpy as np
sys.modules["torch"] = None  # any `import torch` now raises ImportError
sys.modules["tvm"] = None  # and so does `import tvm`
from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.runtime.kokoro import TVMKokoro
from kokoro_tvm.runtime.vm import ComponentRunner
runner = ComponentRunner(Artifact.open({str(artifact.library.parent)!r}))
np.save({str(tmp_path / "out.npy")!r}, runner(np.arange(5, dtype=np.int64)[None], np.array([5], dtype=np.int64))[0])
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    alone = np.load(tmp_path / "out.npy")
    assert alone.shape == (1, 512, 5)
    np.testing.assert_array_equal(alone, ComponentRunner(artifact)(*inputs)[0])


def test_spec_validation():
    with pytest.raises(ValueError, match="unknown component"):
        BuildSpec("vocoder", 4)
    with pytest.raises(ValueError, match="dtype"):
        BuildSpec("albert", 4, "float16")
    with pytest.raises(ValueError, match="positive"):
        BuildSpec("albert", 0)
    target = host_target()  # a JSON dict that TVM reads back as this CPU's LLVM target
    assert json.loads(json.dumps(target)) == target
    parsed = tvm.target.Target(target)
    assert parsed.kind.name == "llvm" and str(parsed.attrs["mcpu"]) == target["mcpu"]


def test_two_processes_building_one_artifact_build_it_once(tmp_path):
    """Two builds of the same artifact started at once into one empty cache: both succeed, only one of them
    builds (the other waits on the artifact's lock, then loads the finished build), and the cache is valid."""
    script = """
import logging, torch
logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
from kokoro_tvm.compiler.build import BuildSpec, build, build_source_digest
from kokoro_tvm.weights.resolve import kmodel_skeleton
torch.manual_seed(0)
model = kmodel_skeleton().eval().double()
print(build(model, "concurrency-test", BuildSpec("text_encoder", 6, "float64")).library)
"""
    env = dict(os.environ, KOKORO_TVM_CACHE=str(tmp_path))
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    results = [(p.communicate(timeout=900), p.returncode) for p in procs]
    for (_out, err), code in results:
        assert code == 0, err[-2000:]
    assert sum("building text_encoder" in err for (_, err), _ in results) == 1, [e[-500:] for (_, e), _ in results]
    libraries = {out.strip() for (out, _), _ in results}
    assert len(libraries) == 1
    folder = Path(libraries.pop()).parent
    artifact = Artifact.open(folder)
    assert file_sha256(artifact.library) == artifact.manifest["library_sha256"]
    artifact.load_params()  # parameters complete and matching their digest
    assert not list(tmp_path.rglob("*.partial")), "a temporary file was left behind"


def test_constant_calls_fold_to_the_module_relax_foldconstant_gives(random_model64):
    """F0/N as the export leaves it (constant `add`s, `reshape`s and `full`s): FoldConstantCalls folds some of it,
    and FoldConstant after it gives the very module FoldConstant alone gives, constants included."""
    from tvm import relax

    from kokoro_tvm.compiler.build import relax_module
    from kokoro_tvm.compiler.passes import FoldConstantCalls
    from kokoro_tvm.compiler.pipeline import phases

    mod = relax_module(random_model64, BuildSpec("f0n", bucket("f0n"), "float64"))[0]
    target = tvm.target.Target(host_target())
    with target:
        for name, passes in phases(target):
            if name == "legalize":
                break
            mod = tvm.transform.Sequential(passes)(mod)
        mod = relax.transform.AnnotateTIROpPattern()(relax.transform.LegalizeOps()(mod))
        ours = FoldConstantCalls()(mod)
        assert ours.script().count("R.call_tir(") < mod.script().count("R.call_tir("), "nothing was folded"
        tvm.ir.assert_structural_equal(relax.transform.FoldConstant()(ours), relax.transform.FoldConstant()(mod))


def test_a_build_from_a_decomposed_program_imports_the_same_module(random_model64):
    """Notebook 02 exports and decomposes each component once, for its op table and its build, and a build keeps
    the program for the shape's other precisions (compiler.programs): the module imported from that program, at
    a static and at a symbolic length, is the module a build that exports for itself imports."""
    from kokoro_tvm.compiler.build import decomposed_program, relax_module

    for spec in (BuildSpec("duration", bucket("duration"), "float64"), BuildSpec.dynamic("duration", "float64")):
        program = decomposed_program(random_model64, spec)
        tvm.ir.assert_structural_equal(
            relax_module(random_model64, spec, program)[0], relax_module(random_model64, spec)[0]
        )


# A Dask worker's profiler walks the frames of the thread running a task every 10 ms (distributed.profile.process).
# A non-strict torch.export traced on a thread so walked now and then lost a factory tensor (an arange, a zeros_like)
# from its proxies and stopped on "a fake tensor in the exported program constant's list", most often in a process's
# first export (NOTES/scale.md). Each child process here does its first export, 60 calls deep (a worker's stack),
# while a thread runs Dask's own profiler function on the caller's frames every 1 ms (harder than Dask's 10 ms).
# Without the fix (the trace on a thread of its own, build.decomposed_program) 5 of 9 such children failed (with
# it 0 of 9), so four all pass without it about once in 25 runs ((4/9)^4). They run one after another: three at
# once on two cores failed none of six, the sampler then getting the GIL less often.
SAMPLED_FIRST_EXPORT = """
import sys, threading, time
import torch
from distributed import profile
from kokoro_tvm.compiler.build import BuildSpec, decomposed_program
from kokoro_tvm.weights.resolve import kmodel_skeleton

torch.manual_seed(0)
model = kmodel_skeleton().eval()
caller, done = threading.get_ident(), threading.Event()

def sample():
    state = profile.create()
    while not done.is_set():
        frame = sys._current_frames().get(caller)
        if frame is not None:
            profile.process(frame, True, state)
        frame = None
        time.sleep(0.001)

threading.Thread(target=sample, daemon=True).start()


def deep(calls):
    return decomposed_program(model, BuildSpec("albert", 43)) if calls == 0 else deep(calls - 1)


program = deep(60)
done.set()
print("constants", sorted(type(value).__name__ for value in program.constants.values()))
"""


def test_an_export_whose_caller_is_profiled_keeps_every_tensor_traced():
    for _ in range(4):
        child = subprocess.run(
            [sys.executable, "-c", SAMPLED_FIRST_EXPORT], capture_output=True, text=True, timeout=300
        )
        assert child.returncode == 0, child.stderr.strip().splitlines()[-1]
        assert "FakeTensor" not in child.stdout, child.stdout
