"""Real-weights tier, end to end: `kokoro-tvm say` with af_heart (and jm_kumo reading English), transcribed back
by Whisper tiny.en (the default judge of kokoro_tvm.evaluation.asr)."""

import json

import pytest

from kokoro_tvm.cli import main
from kokoro_tvm.evaluation.asr import transcribe, words
from kokoro_tvm.runtime.audio_io import read_wav

pytestmark = pytest.mark.real


@pytest.mark.parametrize(
    "text, voice",
    [("hello world", "af_heart"), ("one two three four five", "af_heart"), ("hello world", "jm_kumo")],
)
def test_spoken_words_come_back(text, voice, tmp_path, capsys):
    out = tmp_path / "speech.wav"
    assert main(["-q", "say", text, "--voice", voice, "--lang", "a", "-o", str(out)]) == 0
    audio, rate = read_wav(out)
    assert rate == 24_000 and audio.dtype.name == "float32"
    metadata = json.loads(out.with_suffix(".json").read_text())
    assert metadata["voice"] == voice and metadata["noise"] == "seeded:0" and metadata["language"] == "a"
    assert metadata["g2p"].startswith("misaki en.G2P")
    assert metadata["weights"]["fingerprint"] and metadata["weights"]["source"]
    heard = transcribe(audio, rate).split()
    assert set(words(text)) <= set(heard), f"said {text!r}, heard {' '.join(heard)!r}"
