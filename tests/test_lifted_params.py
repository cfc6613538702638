"""The weight transform's results kept beside a CPU build (kokoro_tvm.artifacts.Artifact.keep_lifted), unit tier on
random weights: the first load runs the transform and keeps what it made; later loads read that instead of the
parameters, share what the transform shared, and compute the same bits; a kept file that is corrupt or made by
another library is not used (one warning) and is made again."""

import json
import shutil

import numpy as np
import pytest
import torch
from random_builds import RANDOM_FINGERPRINT, bucket

from kokoro_tvm.artifacts import Artifact
from kokoro_tvm.compiler.build import BuildSpec, build
from kokoro_tvm.compiler.export import ComponentShape, example_inputs
from kokoro_tvm.runtime.vm import ComponentRunner

# ALBERT: one shared layer serves all 12, so its transform hands the same tensor to several inputs of `main`
COMPONENT = "albert"


@pytest.fixture
def albert(unit_cache, random_model64, tmp_path):
    """A private copy of the session's float64 ALBERT build (the shared one stays as other tests expect it),
    with no kept transform results, and the inputs of one call. The copy keeps the cache's layout: the manifest
    names its parameter file relative to the artifact's folder."""
    built = build(random_model64, RANDOM_FINGERPRINT, BuildSpec(COMPONENT, bucket(COMPONENT), "float64"))
    folder = tmp_path / built.library.parent.relative_to(unit_cache)
    shutil.copytree(built.library.parent, folder)
    params = tmp_path / built.params.relative_to(unit_cache)
    params.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(built.params, params)
    (folder / built.lifted_file.name).unlink(missing_ok=True)
    inputs = [x.numpy() for x in example_inputs(ComponentShape(COMPONENT, bucket(COMPONENT)), torch.float64)]
    return Artifact.open(folder), inputs


def _shared(runner) -> int:
    """How many inputs of `main` share their tensor with an earlier one."""
    pointers = [np.from_dlpack(p).ctypes.data for p in runner.params]
    return len(pointers) - len(set(pointers))


def test_the_first_load_keeps_the_transform_results_and_later_loads_read_them(albert):
    artifact, inputs = albert
    assert artifact.manifest["transform_params"] and not artifact.lifted_file.exists()
    first = ComponentRunner(artifact)
    expected = first(*inputs)
    assert artifact.lifted_file.is_file()
    kept = Artifact.open(artifact.library.parent).runtime_params()
    assert kept.transform is None and len(kept.order) == len(first.params)
    assert len(kept.arrays) < len(kept.order), "ALBERT's shared layer is kept once"
    # a later load needs neither the parameters nor the transform: with the parameter file gone it still runs
    artifact.params.rename(artifact.params.with_suffix(".away"))
    try:
        later = ComponentRunner(Artifact.open(artifact.library.parent))
        got = later(*inputs)
    finally:
        artifact.params.with_suffix(".away").rename(artifact.params)
    assert _shared(later) == _shared(first) > 0  # shared as the transform shared them, not copied
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)  # the same arrays in: the same bits out


@pytest.mark.parametrize("damage", ["truncated", "a flipped bit", "another library"])
def test_kept_results_that_do_not_check_out_are_not_used_and_are_made_again(albert, damage, caplog):
    artifact, inputs = albert
    expected = ComponentRunner(artifact)(*inputs)
    kept = artifact.lifted_file.read_bytes()
    if damage == "truncated":
        artifact.lifted_file.write_bytes(kept[: len(kept) // 2])
    elif damage == "a flipped bit":  # inside the largest array's bytes: only its zip member's CRC-32 can tell
        with np.load(artifact.lifted_file) as npz:
            largest = max((npz[name] for name in npz.files if name != "__state__"), key=lambda a: a.nbytes)
        middle = largest.tobytes()[largest.nbytes // 2 :][:16]
        at = kept.index(middle)
        assert kept.count(middle) == 1, "the flipped byte must be in this array and no other"
        artifact.lifted_file.write_bytes(kept[:at] + bytes([kept[at] ^ 1]) + kept[at + 1 :])
    else:  # the library rebuilt: the kept file names the old one's hash
        manifest = json.loads((artifact.library.parent / "manifest.json").read_text())
        manifest["library_sha256"] = "0" * 64
        (artifact.library.parent / "manifest.json").write_text(json.dumps(manifest))
    reopened = Artifact.open(artifact.library.parent)
    with caplog.at_level("WARNING"):
        got = ComponentRunner(reopened)(*inputs)
    assert "not used" in caplog.text and "transforming at load" in caplog.text
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_array_equal(g, e)
    assert reopened.load_lifted() is not None  # made again, for this library
