"""Compile stage on random weights (unit tier): component parity in float64, the artifact cache, and a runtime
that never imports torch."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
import torch

from kokoro_tvm.compile import BuildSpec, build, host_target
from kokoro_tvm.export import ComponentShape, component_module, example_inputs, export_patches
from kokoro_tvm.reference import default_dtype
from kokoro_tvm.runtime import ComponentRunner
from kokoro_tvm.weights import exact_stft_bases, kmodel_skeleton

FAKE_FINGERPRINT = "random-weights-for-tests"
SMALL = {"albert": 7, "duration": 7, "text_encoder": 7, "f0n": 5, "decoder": 4}


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cache")
    old = os.environ.get("KOKORO_TVM_CACHE")
    os.environ["KOKORO_TVM_CACHE"] = str(folder)
    yield folder
    if old is None:
        del os.environ["KOKORO_TVM_CACHE"]
    else:
        os.environ["KOKORO_TVM_CACHE"] = old


@pytest.fixture(scope="module")
def random_model64():
    torch.manual_seed(0)
    model = kmodel_skeleton().eval()
    exact_stft_bases(model.decoder.generator.stft)
    return model.double()


@pytest.mark.parametrize("component", list(SMALL))
def test_component_float64_matches_torch(component, cache, random_model64):
    spec = BuildSpec(component, SMALL[component], "float64")
    inputs = example_inputs(ComponentShape(component, spec.length), torch.float64)
    with export_patches(random_model64), torch.no_grad(), default_dtype(torch.float64):
        expected = component_module(random_model64, component)(*inputs)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = ComponentRunner(build(random_model64, FAKE_FINGERPRINT, spec))(*(x.numpy() for x in inputs))
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        e = e.numpy()
        assert g.shape == e.shape and g.dtype == np.float64
        # float64 throughout: only summation order differs; the decoder's deep conv stack amplifies
        # rounding by a few orders of magnitude, still far below any float32 effect (1e-7)
        assert np.linalg.norm(g - e) / np.linalg.norm(e) < 1e-10


def test_cache_reuses_and_rebuilds_on_corruption(cache, random_model64, caplog):
    spec = BuildSpec("text_encoder", 5, "float64")
    first = build(random_model64, FAKE_FINGERPRINT, spec)
    mtime = first.library.stat().st_mtime_ns
    again = build(random_model64, FAKE_FINGERPRINT, spec)
    assert again.library == first.library and again.library.stat().st_mtime_ns == mtime  # reused
    key = again.manifest["key"]
    assert key["weights"] == FAKE_FINGERPRINT and key["target"] == host_target()
    assert key["tvm"] and key["recipe"] and key["length"] == 5 and key["dtype"] == "float64"

    first.library.write_bytes(b"not a shared library")  # corrupt code: detected by its sha256
    with caplog.at_level("WARNING"):
        rebuilt = build(random_model64, FAKE_FINGERPRINT, spec)
    assert "rebuilding" in caplog.text and rebuilt.library.read_bytes() != b"not a shared library"
    ComponentRunner(rebuilt)  # loads

    with np.load(rebuilt.params) as npz:  # stale parameters: detected by their digest
        arrays = dict(npz)
    first_name = rebuilt.param_names[0]
    arrays[first_name] = arrays[first_name] + 1
    np.savez(rebuilt.params, **arrays)
    caplog.clear()
    with caplog.at_level("WARNING"):
        fixed = build(random_model64, FAKE_FINGERPRINT, spec)
    assert "rebuilding" in caplog.text
    fixed.load_params()  # verified against the digest again

    other = build(random_model64, "other-weights", spec)
    assert other.library.parent != fixed.library.parent  # the weights are part of the key


def test_runtime_works_without_torch(cache, random_model64):
    """torch is made unimportable (tvm_ffi imports it eagerly when present, so "not in sys.modules" cannot
    be the check): loading and running an artifact must still work."""
    artifact = build(random_model64, FAKE_FINGERPRINT, BuildSpec("text_encoder", 5, "float64"))
    script = f"""
import sys, numpy as np
sys.modules["torch"] = None  # any `import torch` now raises ImportError
from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.runtime import ComponentRunner, TVMKokoro
runner = ComponentRunner(Artifact.open({str(artifact.library.parent)!r}))
out = runner(np.arange(5, dtype=np.int64)[None], np.array([5], dtype=np.int64))
print(out[0].shape)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "(1, 512, 5)"


def test_spec_validation():
    with pytest.raises(ValueError, match="unknown component"):
        BuildSpec("vocoder", 4)
    with pytest.raises(ValueError, match="dtype"):
        BuildSpec("albert", 4, "float16")
    with pytest.raises(ValueError, match="positive"):
        BuildSpec("albert", 0)
    assert json.dumps(host_target())
