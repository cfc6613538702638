"""Real-weights tier, end to end: `kokoro-tvm say` with jm_kumo, transcribed back by Whisper tiny.en (the default
judge of kokoro_tvm.evaluation.asr)."""

import json

import pytest

from kokoro_tvm.cli import main
from kokoro_tvm.evaluation.asr import transcribe, words
from kokoro_tvm.runtime.audio_io import read_wav

pytestmark = pytest.mark.real


@pytest.mark.parametrize("text", ["hello world", "one two three four five"])
def test_spoken_words_come_back(text, tmp_path, capsys):
    out = tmp_path / "speech.wav"
    assert main(["-q", "say", text, "--voice", "jm_kumo", "-o", str(out)]) == 0
    audio, rate = read_wav(out)
    assert rate == 24_000 and audio.dtype.name == "float32"
    metadata = json.loads(out.with_suffix(".json").read_text())
    assert metadata["voice"] == "jm_kumo" and metadata["noise"] == "seeded:0"
    assert metadata["weights"]["fingerprint"] and metadata["weights"]["source"]
    heard = transcribe(audio, rate).split()
    assert set(words(text)) <= set(heard), f"said {text!r}, heard {' '.join(heard)!r}"
