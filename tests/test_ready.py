"""The ready index (kokoro_tvm.runtime.ready): a cached compiled model starts without torch, and an entry that
no longer describes its builds is a miss, never a wrong model. The end-to-end start is in the real tier below."""

import json
import subprocess
import sys

import numpy as np
import pytest
import tvm

from kokoro_tvm.artifacts import build_source_digest, file_sha256
from kokoro_tvm.components import NAMES
from kokoro_tvm.runtime import ready


def _fake_builds(root, source=None):
    """Five artifact folders as the build writes them (a manifest, a library file, a parameter file)."""
    artifacts = {}
    for name in NAMES:
        folder = root / name
        folder.mkdir(parents=True)
        (folder / "component.so").write_bytes(name.encode() * 100)
        manifest = {
            "key": {"component": name, "source": source or build_source_digest(), "tvm": tvm.__version__},
            "params_file": str(root / f"{name}.npz"),
            "param_names": [],
            "params_digest": "",
            "library_sha256": file_sha256(folder / "component.so"),
        }
        (folder / "manifest.json").write_text(json.dumps(manifest))
        from kokoro_tvm.artifacts import Artifact

        artifacts[name] = Artifact.open(folder)
    return artifacts


def test_an_entry_is_found_for_its_request_only(unit_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("KOKORO_TVM_TUNING", raising=False)
    artifacts = _fake_builds(tmp_path / "builds")
    ready.save(None, "fp32", "cpu", artifacts, {"source": "embedded"})
    found = ready.find(None, "fp32", "cpu")
    assert found is not None and found.weights == {"source": "embedded"}
    assert found.provider("decoder", None).library == artifacts["decoder"].library
    with pytest.raises(Exception, match="symbolic-length"):
        found.provider("decoder", 64)
    assert ready.find(None, "int8", "cpu") is None  # another precision
    assert ready.find(str(tmp_path / "builds" / "decoder" / "component.so"), "fp32", "cpu") is None  # weights
    monkeypatch.setenv("KOKORO_TVM_TUNING", "off")
    assert ready.find(None, "fp32", "cpu") is None  # another tuning state: other builds


def test_an_entry_whose_builds_changed_is_a_miss(unit_cache, tmp_path, monkeypatch):
    monkeypatch.delenv("KOKORO_TVM_TUNING", raising=False)
    artifacts = _fake_builds(tmp_path / "stale", source="0" * 16)
    ready.save(None, "fp32", "cpu", artifacts, {})
    assert ready.find(None, "fp32", "cpu") is None  # built from other source
    artifacts = _fake_builds(tmp_path / "fresh")
    ready.save(None, "fp32", "cpu", artifacts, {})
    assert ready.find(None, "fp32", "cpu") is not None
    (tmp_path / "fresh" / "decoder" / "component.so").write_bytes(b"corrupt")
    assert ready.find(None, "fp32", "cpu") is None  # a library that does not match its hash


def test_the_english_g2p_loads_without_torch_and_leaves_it_importable():
    code = (
        "import sys\n"
        "from kokoro_tvm.frontend.text import phonemize\n"
        "print(phonemize('I read a book yesterday, and I will read another tomorrow.', 'a').phonemes)\n"
        "print('torch' in sys.modules)\n"
        "import torch\n"
        "print(torch.tensor([1.0]).item())\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    phonemes, torch_loaded, one = done.stdout.split("\n")[:3]
    assert torch_loaded == "False" and one == "1.0"
    assert "ɹˈɛd" in phonemes and "ɹˈid" in phonemes  # the homograph read by its tense: spaCy's tagger ran


@pytest.mark.real
def test_say_defaults_to_the_compiled_model_and_a_cached_one_starts_without_torch_or_tvms_compiler(tmp_path):
    from kokoro_tvm.compiled import READY, resolve_precision
    from kokoro_tvm.runtime.audio_io import read_wav

    code = (
        "import sys\n"
        "from kokoro_tvm.cli import main\n"
        "rc = main(['-q', 'say', 'The sun rose over the quiet hill.', '-o', sys.argv[1]])\n"
        "print('torch' in sys.modules, 'tvm' in sys.modules)\n"
        "sys.exit(rc)\n"
    )
    runs = []
    for name in ("first.wav", "second.wav"):  # the first finds or builds, and writes the index
        done = subprocess.run([sys.executable, "-c", code, str(tmp_path / name)], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr[-3000:]
        runs.append((done.stdout.split()[-2:], json.loads((tmp_path / name).with_suffix(".json").read_text())))
    (_, first), (loaded, second) = runs
    # neither torch nor the tvm package (TVM's compiler): the runtime library alone runs the cached builds
    assert loaded == ["False", "False"] and second["tvm"]["started"] == READY
    assert second["tvm"]["precision_choice"] == first["tvm"]["precision_choice"]
    assert first["backend"] == second["backend"] == "tvm"
    assert second["tvm"]["precision"] == resolve_precision("auto")[0]
    assert second["weights"] == first["weights"]
    np.testing.assert_array_equal(read_wav(tmp_path / "first.wav")[0], read_wav(tmp_path / "second.wav")[0])
