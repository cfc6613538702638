import pytest

from kokoro_tvm.config import MAX_PHONEMES, load_vocab
from kokoro_tvm.frontend.text import (
    EmptyTextError,
    UnknownSymbolError,
    prepare,
    split_phonemes,
    text_to_phonemes,
    tokenize,
)


def test_text_to_tokens_round_trip():
    chunks = prepare(text="Hello world.")
    assert len(chunks) == 1
    vocab = load_vocab()
    inverse = {i: s for s, i in vocab.items()}
    assert "".join(inverse[i] for i in chunks[0].token_ids) == chunks[0].phonemes
    assert chunks[0].padded_ids[0] == 0 and chunks[0].padded_ids[-1] == 0


@pytest.mark.parametrize("text", ["", "   ", "\n\t", "?!...", "— … ,;:", "“”()"])
def test_empty_or_punctuation_only_text_is_rejected(text):
    with pytest.raises(EmptyTextError, match="nothing to say"):
        prepare(text=text)


@pytest.mark.parametrize("phonemes", ["", "  ", "...", "!?"])
def test_empty_phonemes_are_rejected(phonemes):
    with pytest.raises(EmptyTextError):
        prepare(phonemes=phonemes)


def test_unknown_symbols_are_all_reported_not_dropped():
    with pytest.raises(UnknownSymbolError) as info:
        prepare(phonemes="hɛlˈO ☃ wˈɜːld € ☃")
    assert set(info.value.unknown) == {"☃", "€"}
    assert info.value.unknown["☃"] == [6, 17]
    assert "U+2603" in str(info.value)


def test_raw_phonemes_are_accepted():
    chunks = prepare(phonemes="həlˈO wˈɜːld.")
    assert chunks[0].token_ids == tokenize("həlˈO wˈɜːld.")


def _sentences(n):
    words = "ðə kwˈɪk bɹˈWn fˈɑːks ʤˈʌmpt ˌOvɚ ðə lˈAzi dˈɑːɡ"
    return " ".join(f"{words} {i % 10}." for i in range(n))


def _no_loss(pieces, original):
    return "".join(p.replace(" ", "") for p in pieces) == original.replace(" ", "")


def test_long_phonemes_split_at_sentence_ends():
    phonemes = _sentences(40)  # ~2000 symbols
    pieces = split_phonemes(phonemes)
    assert len(pieces) >= 4
    assert all(len(p) <= MAX_PHONEMES for p in pieces)
    assert all(p.endswith(".") for p in pieces)
    assert " ".join(pieces) == phonemes


def test_one_long_sentence_splits_at_commas_then_spaces():
    clause = "ðə kwˈɪk bɹˈWn fˈɑːks ʤˈʌmpt, "
    phonemes = (clause * 40).strip()
    pieces = split_phonemes(phonemes)
    assert all(len(p) <= MAX_PHONEMES for p in pieces)
    assert all(p.endswith(",") for p in pieces[:-1])
    assert _no_loss(pieces, phonemes)
    words_only = " ".join(["ʤˈʌmpt"] * 200)
    pieces = split_phonemes(words_only)
    assert all(len(p) <= MAX_PHONEMES and not p.startswith(" ") for p in pieces)
    assert " ".join(pieces) == words_only


def test_no_boundary_at_all_still_loses_nothing():
    phonemes = "a" * 1200
    pieces = split_phonemes(phonemes)
    assert [len(p) for p in pieces] == [510, 510, 180]
    assert _no_loss(pieces, phonemes)


def test_long_text_becomes_several_chunks_of_at_most_510_tokens():
    text = " ".join(f"Sentence number {i} is here to make this text long enough to split." for i in range(30))
    chunks = prepare(text=text)
    assert len(chunks) > 1
    assert all(1 <= len(c.token_ids) <= MAX_PHONEMES for c in chunks)
    assert _no_loss([c.phonemes for c in chunks], text_to_phonemes(text))


def test_exactly_one_of_text_or_phonemes():
    with pytest.raises(TypeError):
        prepare()
    with pytest.raises(TypeError):
        prepare(text="a", phonemes="a")


@pytest.mark.parametrize("word", ["button", "kitten", "certain"])
def test_syllabic_consonants_become_vocab_symbols(word):
    """espeak-ng writes these with U+0329 (not in Kokoro's vocab; found by the bucketing corpus when espeak-ng was
    our English G2P). misaki's lexicon has them without it; espeak-ng's form, where it still reaches us (the
    other languages, misaki's fallback), is written as Kokoro writes it."""
    from kokoro_tvm.frontend.text import SYLLABIC_CONSONANT

    phonemes = text_to_phonemes(word)
    assert "\u0329" not in phonemes
    assert prepare(text=word)[0].token_ids == tokenize(phonemes)
    assert SYLLABIC_CONSONANT.sub("ᵊ\\1", "bˈʌʔn\u0329") == "bˈʌʔᵊn"


def test_letters_outside_the_latin_script_are_found_and_warned_about(caplog):
    from kokoro_tvm.frontend.text import foreign_letters

    assert foreign_letters("Café naïve Ærø") == []  # accented Latin letters are read
    assert foreign_letters("你好 мир, 你") == ["你", "好", "м", "и", "р"]
    with caplog.at_level("WARNING", logger="kokoro_tvm.frontend.text"):
        (chunk,) = prepare(text="你好 hello")
    assert "2 letter(s) outside the Latin script (你好)" in caplog.text
    assert chunk.phonemes  # still spoken (espeak-ng names them), never dropped silently
    caplog.clear()
    with caplog.at_level("WARNING", logger="kokoro_tvm.frontend.text"):
        prepare(text="hello there")
    assert "outside the Latin script" not in caplog.text


@pytest.mark.parametrize(
    ("text", "dropped"),
    [
        ("I give it a ★ today.", ["★"]),  # no name in espeak-ng: misaki gives it no phonemes
        ("x ^ y and a | b", ["^", "|"]),
        ("a < b", ["<"]),
    ],
)
def test_symbols_no_g2p_reads_are_recorded_and_warned_about_not_dropped_silently(caplog, text, dropped):
    from kokoro_tvm.frontend.text import phonemize

    with caplog.at_level("WARNING", logger="kokoro_tvm.frontend.text"):
        found = phonemize(text)
    assert list(found.unspoken) == dropped
    assert f"{len(dropped)} word(s) or symbol(s) no G2P can read are not spoken: {' '.join(dropped)}" in caplog.text


def test_symbols_read_by_name_are_said_and_ordinary_punctuation_is_not_reported(caplog):
    from kokoro_tvm.frontend.text import phonemize, symbols

    assert symbols("I ♥ it, ♥ 🙂 + 5 € & #") == ["♥", "🙂"]  # pictographs only: +, €, &, # are read as words
    with caplog.at_level("WARNING", logger="kokoro_tvm.frontend.text"):
        found = phonemize("I ♥ it.")
    assert found.unspoken == () and "hˈɑɹt" in found.phonemes
    assert "1 symbol(s) are read by name: ♥ as 'hˈɑɹt sˈut'" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="kokoro_tvm.frontend.text"):
        found = phonemize('"Well," she said (twice) - 5 + 3 = 8 & more.')
    assert found.unspoken == () and "symbol" not in caplog.text
