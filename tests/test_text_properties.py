"""Every text a user can type ends in phonemes the model can speak or in one TextError line: a property-based
test (hypothesis) of the English front-end over arbitrary unicode, digits, symbols, URLs, very long words and
mixed scripts. Unit tier: misaki's G2P and spaCy's small model load once (a few seconds), then ~4 ms a text."""

import os
import string

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from kokoro_tvm.config import MAX_PHONEMES, load_vocab
from kokoro_tvm.frontend.text import TextError, prepare, text_to_phonemes

WORDS = st.sampled_from(["hello", "world", "Dr.", "O'Neil's", "café", "naïve", "1990s", "3rd", "e.g.", "USA"])
NUMBERS = st.one_of(
    st.integers(-(10**15), 10**15).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.decimals(places=2, allow_nan=False, allow_infinity=False).map(lambda d: f"${d:,}"),
)
URLS = st.builds(
    lambda host, path: f"https://{host}.example/{path}?q=1#x",
    st.text(string.ascii_lowercase, min_size=1, max_size=12),
    st.text(string.ascii_letters + string.digits + "/-_.", max_size=20),
)
LONG_WORDS = st.text(string.ascii_letters, min_size=60, max_size=700)
SCRIPTS = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=60)
MIXED = st.lists(
    st.one_of(WORDS, NUMBERS, URLS, SCRIPTS, st.sampled_from(list("!?.,;:—…\"'()[]{}<>@#%^&*~`|\\\n\t"))), max_size=12
).map(" ".join)
TEXTS = st.one_of(SCRIPTS, MIXED, LONG_WORDS, URLS, NUMBERS, st.text(max_size=200))


def _check(text: str) -> str:
    """What became of `text`: "spoken" or the error class's name."""
    try:
        chunks = prepare(text=text)
    except TextError as exc:
        assert str(exc) and "\n" not in str(exc)  # one line (texts and phonemes are quoted with repr)
        if os.environ.get("SHOW"):
            print("\nREFUSED", repr(text), str(exc)[:200])
        return type(exc).__name__
    vocab = load_vocab()
    assert chunks and all(1 <= len(c.phonemes) <= MAX_PHONEMES for c in chunks)
    assert all(s in vocab for c in chunks for s in c.phonemes)
    # nothing lost between the G2P and the chunks: the chunks joined are the whole phoneme string
    assert " ".join(c.phonemes for c in chunks) == text_to_phonemes(text)
    return "spoken"


@pytest.mark.filterwarnings("ignore")
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(TEXTS)
def test_any_text_gives_speakable_chunks_or_one_clear_error(text):
    event(_check(text))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("\x00\x01", "EmptyTextError"),
        ("\u0301\u0300", "EmptyTextError"),
        ("\n\n.\n", "EmptyTextError"),
        ("🏳️\u200d🌈", "spoken"),  # misaki names emoji ("white rainbow")
        ("你好 мир", "spoken"),  # espeak-ng names foreign letters; a warning says so
        ("a" * 2000, "spoken"),  # one word longer than an utterance: split inside the word, with a warning
        ("https://example.com/" + "x" * 600, "spoken"),
    ],
)
def test_hard_texts(text, expected):
    assert _check(text) == expected
