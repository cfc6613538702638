"""Text front-end, offline: text -> phonemes -> token ids, with long text split into chunks.

G2P is misaki's espeak-ng backend for US English (`misaki.espeak.EspeakG2P`), which runs offline with the
espeak-ng library that `espeakng-loader` ships; NOTES/text_frontend.md says why it was chosen over misaki's
lexicon G2P. Raw phoneme strings are accepted too. Nothing is dropped or truncated: symbols outside the vocab
raise `UnknownSymbolError`, and text longer than one utterance (510 phonemes) is split at sentence, then
punctuation, then word boundaries into chunks whose audio is concatenated.
"""

from __future__ import annotations

import functools
import logging
import re
import unicodedata
from dataclasses import dataclass

from kokoro_tvm.config import MAX_PHONEMES, PAD_TOKEN_ID, load_vocab

log = logging.getLogger(__name__)

G2P_LANGUAGE = "en-us"
SENTENCE_END = frozenset(".!?")
CLAUSE_END = frozenset(",;:—…")
# espeak-ng marks syllabic consonants with U+0329 ("button" -> bˈʌʔn̩), a symbol Kokoro's vocab lacks; Kokoro
# writes them as a reduced vowel before the consonant (ᵊn), the convention misaki's English G2P follows too.
SYLLABIC_CONSONANT = re.compile("(\\S)\u0329")
# Symbols that carry no sound of their own: an input made only of these says nothing.
SILENT_SYMBOLS = frozenset(";:,.!?—…\"()“” \t\n'-«»")


class TextError(ValueError):
    """Input text or phonemes that cannot be spoken; the message says why."""


class EmptyTextError(TextError):
    pass


class UnknownSymbolError(TextError):
    def __init__(self, unknown: dict[str, list[int]], phonemes: str):
        self.unknown = unknown
        listed = ", ".join(f"{s!r} (U+{ord(s):04X}) at {pos[:3]}" for s, pos in sorted(unknown.items()))
        super().__init__(
            f"{len(unknown)} phoneme symbol(s) are not in Kokoro's vocabulary: {listed}; phonemes: {phonemes!r}"
        )


@dataclass(frozen=True)
class Chunk:
    """One utterance the model speaks at once: at most MAX_PHONEMES phonemes."""

    phonemes: str
    token_ids: tuple[int, ...]  # without the pad tokens the model adds at both ends

    @property
    def padded_ids(self) -> list[int]:
        """[0, *token_ids, 0], as KModel.forward feeds forward_with_tokens."""
        return [PAD_TOKEN_ID, *self.token_ids, PAD_TOKEN_ID]


@functools.cache
def _espeak_g2p():
    from misaki.espeak import EspeakG2P  # loads the espeak-ng library: only when text is phonemized

    return EspeakG2P(language=G2P_LANGUAGE)


def foreign_letters(text: str) -> list[str]:
    """Letters outside the Latin script (Chinese, Cyrillic, Greek, ...), each once in order of appearance. The
    English G2P does not read them: espeak-ng names them instead ("Chinese letter", "Cyrillic ...")."""
    found = []
    for ch in text:
        if ch.isalpha() and "LATIN" not in unicodedata.name(ch, "") and ch not in found:
            found.append(ch)
    return found


def text_to_phonemes(text: str) -> str:
    """English text -> Kokoro phoneme string (espeak-ng en-us through misaki's symbol mapping). Letters outside
    the Latin script are spoken as espeak-ng's names for them, with a warning (the phonemes say what was said)."""
    if not any(ch.isalnum() for ch in text):
        raise EmptyTextError(f"nothing to say: the text {text!r} has no letters or digits")
    foreign = foreign_letters(text)
    if foreign:
        log.warning(
            "%d letter(s) outside the Latin script (%s): the English G2P does not read them, it names them "
            "(e.g. 'Chinese letter'); the phonemes in the output's sidecar show what is spoken",
            len(foreign),
            "".join(foreign[:10]),
        )
    phonemes, _ = _espeak_g2p()(text)
    phonemes = SYLLABIC_CONSONANT.sub("ᵊ\\1", " ".join(phonemes.split()))
    _require_sound(phonemes, f"the text {text!r}")
    return phonemes


def _require_sound(phonemes: str, what: str) -> None:
    if not phonemes or all(ch in SILENT_SYMBOLS for ch in phonemes):
        raise EmptyTextError(f"nothing to say: {what} gives no phonemes to speak ({phonemes!r})")


def tokenize(phonemes: str) -> tuple[int, ...]:
    """Phoneme string -> token ids; every symbol must be in the vocab (unknown ones are reported)."""
    vocab = load_vocab()
    unknown: dict[str, list[int]] = {}
    for i, symbol in enumerate(phonemes):
        if symbol not in vocab:
            unknown.setdefault(symbol, []).append(i)
    if unknown:
        raise UnknownSymbolError(unknown, phonemes)
    return tuple(vocab[s] for s in phonemes)


def split_phonemes(phonemes: str, max_len: int = MAX_PHONEMES) -> list[str]:
    """Split into pieces of at most `max_len` symbols, preferring sentence ends, then clause punctuation,
    then spaces. Joining the pieces with single spaces gives back the input (nothing is lost)."""
    if max_len < 1:
        raise ValueError("max_len must be positive")
    pieces = []
    rest = phonemes.strip()
    while len(rest) > max_len:
        cut = _best_cut(rest, max_len)
        pieces.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        pieces.append(rest)
    return pieces


def _best_cut(s: str, max_len: int) -> int:
    """Index to cut `s` at (the piece s[:cut] has at most max_len symbols)."""
    for boundary in (SENTENCE_END, CLAUSE_END):
        # a boundary symbol followed by a space; keep the symbol with the left piece
        cuts = [i + 1 for i in range(max_len) if s[i] in boundary and i + 1 < len(s) and s[i + 1] == " "]
        if cuts:
            return cuts[-1]
    spaces = [i for i in range(1, max_len + 1) if s[i] == " "]
    if spaces:
        return spaces[-1]
    log.warning("no word boundary in %d phonemes: splitting inside a word", max_len)
    return max_len


def prepare(text: str | None = None, phonemes: str | None = None, max_len: int = MAX_PHONEMES) -> list[Chunk]:
    """Text (or a raw phoneme string) -> chunks ready for the model; raises TextError on bad input."""
    if (text is None) == (phonemes is None):
        raise TypeError("give exactly one of text= or phonemes=")
    if phonemes is None:
        phonemes = text_to_phonemes(text)
    else:
        phonemes = " ".join(phonemes.split())
        _require_sound(phonemes, "the phoneme string")
    tokenize(phonemes)  # report every unknown symbol of the whole input at once
    chunks = [Chunk(p, tokenize(p)) for p in split_phonemes(phonemes, max_len)]
    if len(chunks) > 1:
        log.info("long input: %d phonemes split into %d chunks", len(phonemes), len(chunks))
    return chunks
