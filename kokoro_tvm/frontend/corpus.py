"""The project's English corpus (kokoro_tvm/data/sentences_en.txt): the sentences the bucketing, the audio
comparison, the G2P check and the device check draw from."""

from __future__ import annotations

from importlib import resources

CORPUS = "sentences_en.txt"


def load_sentences() -> list[str]:
    """Every sentence of the corpus, in order (blank lines and # comments skipped)."""
    text = resources.files("kokoro_tvm").joinpath("data", CORPUS).read_text(encoding="utf-8")
    return [line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
