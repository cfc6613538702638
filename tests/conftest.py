"""Test tiers: unit tests (default, seconds), `real` (embedded Kokoro-82M weights, minutes, part of `make test`)
and `slow` (not in `make test`; `make test-slow`)."""

import pytest


@pytest.fixture(scope="session")
def kmodel():
    """The real model on the resolved weights (the embedded default on a fresh machine), float32."""
    from kokoro_tvm.weights import load_kmodel

    model, info = load_kmodel()
    return model, info


@pytest.fixture(scope="session")
def jm_kumo():
    from kokoro_tvm.voices import load_voice

    return load_voice("jm_kumo")
