"""The English front-end speaks Kokoro's own G2P: phonemes identical to `kokoro.KPipeline(lang_code="a")` (and
"b" for British voices) on every corpus sentence, offline. Unit tier: spaCy's small model and misaki's lexicons
load once per worker (a few seconds); the 226 sentences take ~3 s per language."""

import subprocess
import sys

import pytest

from kokoro_tvm.frontend import g2p
from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, text_to_phonemes
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of


@pytest.fixture(scope="module", params=["a", "b"])
def kpipeline(request):
    """Kokoro's pipeline without a model, built offline the same way as ours (spaCy's model from its package)."""
    from kokoro import KPipeline

    with g2p.spacy_model_from_package():
        return request.param, KPipeline(lang_code=request.param, repo_id="hexgrad/Kokoro-82M", model=False)


def test_phonemes_equal_kpipeline_on_every_corpus_sentence(kpipeline):
    language, pipeline = kpipeline
    sentences = load_sentences()
    assert len(sentences) == 226
    differ = []
    for sentence in sentences:
        theirs = " ".join(result.phonemes for result in pipeline(sentence))
        if text_to_phonemes(sentence, language) != theirs:
            differ.append(sentence)
    assert differ == []


def test_line_breaks_are_split_as_kpipeline_splits_them(kpipeline):
    language, pipeline = kpipeline
    text = "First line, with a pause\n\nSecond line: $1,234.56 for the dog.\nThird"
    assert text_to_phonemes(text, language) == " ".join(r.phonemes for r in pipeline(text))


def test_espeak_reads_unknown_words_as_kpipeline(kpipeline):
    """misaki's espeak-ng fallback is made at the first word its lexicon lacks (importing it costs ~2 s per process
    start), and then reads that word as KPipeline's does; text without such words never imports it (below)."""
    language, pipeline = kpipeline
    invented = "The zorblax quivvered near Vlotnik."
    assert text_to_phonemes(invented, language) == " ".join(r.phonemes for r in pipeline(invented))


def test_espeak_is_imported_only_for_a_word_misaki_lacks():
    script = """
import sys
from kokoro_tvm.frontend.text import text_to_phonemes
known = text_to_phonemes("Hello there, how are you?", "a")
print("misaki.espeak" in sys.modules)
text_to_phonemes("The zorblax quivvered.", "a")
print("misaki.espeak" in sys.modules)
"""
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["False", "True"]


def test_misaki_reads_what_espeak_misread():
    """The examples that made us switch: money read as money, and Kokoro's own vowel in "dog"."""
    phonemes = text_to_phonemes("$1,234.56 for the dog.")
    assert phonemes.startswith("wˈʌn θˈWzᵊnd tˈu hˈʌndɹəd θˈɜɹTi fˈɔɹ dˈɑləɹz ænd fˈɪfti sˈɪks sˈɛnts")
    assert phonemes.endswith("dˈɔɡ.")


def test_the_spacy_adapter_is_reversible():
    import spacy
    import spacy.util

    before = (spacy.load, spacy.util.is_package)
    with g2p.spacy_model_from_package():
        assert spacy.util.is_package(g2p.SPACY_MODEL)
        assert (spacy.load, spacy.util.is_package) != before
    assert (spacy.load, spacy.util.is_package) == before


def test_the_language_follows_the_voice_name():
    assert DEFAULT_VOICE == "af_heart" and language_of(DEFAULT_VOICE) == DEFAULT_LANGUAGE == "a"
    assert [language_of(v) for v in ("bm_george", "ef_dora", "jm_kumo", "zf_xiaobei")] == ["b", "e", "j", "z"]
    assert language_of("my_voice.bin") == ""  # a file's name says nothing: American English by default


def test_espeak_languages_and_unknown_codes():
    assert "ˈ" in text_to_phonemes("Hola, ¿cómo estás?", "e")  # espeak-ng Spanish, as KPipeline("e")
    with pytest.raises(g2p.G2PUnavailableError, match="unknown language code 'x'"):
        text_to_phonemes("hello", "x")


@pytest.mark.parametrize("code", ["j", "z"])
def test_japanese_and_chinese_speak_or_say_what_to_install(code):
    """misaki's ja / zh extras are not in the project's dependencies: without the package each needs, one line says
    what to install and how to read English with such a voice instead; with it, Kokoro phonemes come out. Which
    of the two must happen is decided by what is installed, not by what the call did."""
    import importlib.util

    from kokoro_tvm.config import load_vocab

    needs = {"j": ("pyopenjtalk",), "z": ("jieba", "pypinyin", "cn2an")}[code]  # misaki.ja / misaki.zh import them
    text = {"j": "こんにちは", "z": "你好"}[code]
    if any(importlib.util.find_spec(name) is None for name in needs):
        with pytest.raises(g2p.G2PUnavailableError) as raised:
            text_to_phonemes(text, code)
        assert f"misaki[{'ja' if code == 'j' else 'zh'}]" in str(raised.value) and "--lang a" in str(raised.value)
        assert len(str(raised.value).splitlines()) == 1
    else:
        phonemes = text_to_phonemes(text, code)
        assert phonemes.strip() and set(phonemes) <= set(load_vocab()) | {" "}


def test_the_g2p_study_measures_differences():
    from kokoro_tvm.studies.g2p_choice import edit_distance, phoneme_differences

    assert edit_distance("kitten", "sitting") == 3 and edit_distance("", "ab") == 2
    (row,) = phoneme_differences(["$1,234.56 for the dog."])
    assert not row["equal"] and row["edit_distance"] > 10  # espeak reads "dollar one, ..." first
    assert "dˈɑːɡ" in row["espeak"] or "dˈɑɡ" in row["espeak"]


def test_misakis_lexicon_comes_from_our_cache_as_misaki_makes_it(tmp_path, monkeypatch, caplog):
    """The first Lexicon under `lexicon_from_cache` is misaki's own and is kept; the next one is read from the
    kept file (a mark put in the file shows it); both equal what misaki makes; a damaged file is made again."""
    import pickle

    from misaki import en

    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path))
    own, misakis = en.Lexicon.__init__, vars(en.Lexicon(False))
    with g2p.lexicon_from_cache():
        assert vars(en.Lexicon(False)) == misakis
    (kept,) = (tmp_path / "g2p").iterdir()
    kept.write_bytes(pickle.dumps({**pickle.loads(kept.read_bytes()), "marked": True}))
    with g2p.lexicon_from_cache():
        cached = vars(en.Lexicon(False))
    assert cached.pop("marked") is True and cached == misakis
    for damaged in (b"not a pickle", pickle.dumps({"british": False})):  # unreadable; not a whole lexicon
        kept.write_bytes(damaged)
        caplog.clear()
        with caplog.at_level("WARNING"), g2p.lexicon_from_cache():
            assert vars(en.Lexicon(False)) == misakis
        assert "unreadable" in caplog.text and pickle.loads(kept.read_bytes()) == misakis
    assert en.Lexicon.__init__ is own  # reversible: misaki's own __init__ again after the block


def test_the_g2p_loads_only_the_pipes_misaki_runs():
    """misaki enables tok2vec and tagger; the other pipes are not even loaded (the KPipeline test above, whose
    spaCy loads them all, checks the phonemes are the same), and spaCy's `load` is its own after the block."""
    import spacy

    assert g2p.english_g2p(False).nlp.component_names == ["tok2vec", "tagger"]
    before = spacy.load
    with g2p.spacy_loads_only_enabled_pipes():
        assert spacy.load is not before
    assert spacy.load is before
