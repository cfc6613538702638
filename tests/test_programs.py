"""One shape built twice in a process (another precision, another cache) is exported and decomposed once
(kokoro_tvm.compiler.programs), and the second build is the first one's bits; a model with other weights under
the same fingerprint is exported afresh. Unit tier: the float64 duration component on random weights."""

import logging

import numpy as np
import torch
from random_builds import bucket

from kokoro_tvm.artifacts import file_sha256
from kokoro_tvm.compiler import programs
from kokoro_tvm.compiler.build import BuildSpec, build, decomposed_program

FINGERPRINT = "random-weights-for-the-program-tests"  # its own: no other test's artifact in its caches


def test_a_shape_built_again_reuses_its_program_and_builds_the_same_bits(random_model64, tmp_path, monkeypatch, caplog):
    programs.forget_programs()
    spec = BuildSpec("duration", bucket("duration"), "float64")
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path / "first"))
    with caplog.at_level(logging.INFO, logger="kokoro_tvm.compiler.programs"):
        first = build(random_model64, FINGERPRINT, spec)
        assert "reusing" not in caplog.text  # nothing kept yet: this one exported for itself
        monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path / "second"))  # an empty cache: it must build
        second = build(random_model64, FINGERPRINT, spec)
    assert "reusing the program" in caplog.text
    assert first.library != second.library and file_sha256(first.library) == file_sha256(second.library)
    first_params, second_params = first.load_params(), second.load_params()
    assert len(first_params) == len(second_params)
    assert all(np.array_equal(a, b) for a, b in zip(first_params, second_params, strict=True))


def test_other_weights_under_the_same_fingerprint_are_exported_afresh(random_model64, caplog):
    programs.forget_programs()
    spec = BuildSpec("duration", bucket("duration"), "float64")
    programs.keep_program(FINGERPRINT, spec, decomposed_program(random_model64, spec))
    assert programs.kept_program(random_model64, FINGERPRINT, spec) is not None
    layer = random_model64.predictor.duration_proj.linear_layer
    kept_weight = layer.weight
    try:  # the same model but for one duration weight, a new tensor, 1e-9 off in one element
        layer.weight = torch.nn.Parameter(kept_weight.detach().clone())
        with torch.no_grad():
            layer.weight[0, 0] += 1e-9
        with caplog.at_level(logging.INFO, logger="kokoro_tvm.compiler.programs"):
            assert programs.kept_program(random_model64, FINGERPRINT, spec) is None
    finally:
        layer.weight = kept_weight
    assert "holds other weights" in caplog.text
    programs.forget_programs()
