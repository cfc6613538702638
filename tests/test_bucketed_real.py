"""Real-weights tier: the chosen bucket set (`--buckets bucketed`), the runtime's default before the symbolic
builds. Long text in the default runtime is tests/test_dynamic_real.py's; padded static buckets against the
unpadded model are tests/test_masking.py's (random weights) and tests/test_parity_real.py's (slow tier)."""

import json

import pytest

from kokoro_tvm.cli import main
from kokoro_tvm.components import NAMES, lengths_for

pytestmark = pytest.mark.real


def test_compile_precompiles_a_bucket_set_then_finds_it_cached(capsys):
    # the chosen set's smallest buckets: notebooks 05 and 07 build these too, so a run builds them once
    for expect_cached in (None, True):
        assert main(["-q", "compile", "--buckets", "tokens=32;frames=64"]) == 0
        records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
        assert sorted((r["component"], r["length"]) for r in records) == sorted(
            lengths_for(NAMES, tokens=32, frames=64).items()
        )
        assert all(r["library_bytes"] > 0 and r["build_seconds"] > 0 for r in records)
        if expect_cached:
            assert all(r["cached"] for r in records)


def test_bucketed_speaks_in_the_chosen_set(tmp_path):
    """`say --buckets bucketed` runs in the chosen set's smallest buckets for a short sentence (the ones built
    above), not in the default symbolic builds."""
    from kokoro_tvm.runtime.buckets import CANDIDATES, DEFAULT_SET

    out = tmp_path / "hi.wav"
    # fp32: the builds above (the default precision is the tuner's choice: int8 on an AVX-512 Xeon, ten more builds)
    command = ["-q", "say", "Hi there.", "--backend", "tvm", "--buckets", "bucketed", "--precision", "fp32"]
    assert main([*command, "-o", str(out)]) == 0
    metadata = json.loads(out.with_suffix(".json").read_text())
    assert metadata["tvm"]["buckets"] == CANDIDATES[DEFAULT_SET].describe()
    assert metadata["tvm"]["shapes"] == [[32, 64]]
