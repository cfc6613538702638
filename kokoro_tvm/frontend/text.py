"""Text front-end, offline: text -> phonemes -> token ids, with long text split into chunks.

G2P follows Kokoro's own pipeline (`kokoro.KPipeline`), by the language code a voice's name starts with
(kokoro_tvm.frontend.g2p): misaki's English G2P for "a" (American, the default) and "b" (British), espeak-ng for
e, f, h, i, p. For English the phonemes are exactly KPipeline's: the text is split at line breaks as KPipeline
does, each part phonemized by misaki and joined the way KPipeline joins tokens. Raw phoneme strings are accepted
too. Nothing is dropped or truncated: symbols outside the vocab raise `UnknownSymbolError`, a word or symbol no
G2P can read is warned about and recorded, and text longer than one utterance (510 phonemes) is split at sentence, then
punctuation, then word boundaries into chunks whose audio is concatenated.
"""

from __future__ import annotations

import logging
import re
import unicodedata
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from kokoro_tvm.config import MAX_PHONEMES, PAD_TOKEN_ID, load_vocab
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend import g2p

log = logging.getLogger(__name__)

DEFAULT_LANGUAGE = "a"  # American English, the language of the default voice af_heart
LINE_BREAKS = re.compile(r"\n+")  # KPipeline's split_pattern: each part is phonemized on its own
SENTENCE_END = frozenset(".!?")
CLAUSE_END = frozenset(",;:—…")
# espeak-ng marks syllabic consonants with U+0329 ("button" -> bˈʌʔn̩), a symbol Kokoro's vocab lacks; Kokoro
# writes them as a reduced vowel before the consonant (ᵊn), the convention misaki's English G2P follows too.
SYLLABIC_CONSONANT = re.compile("(\\S)\u0329")
# Symbols that carry no sound of their own: an input made only of these says nothing.
SILENT_SYMBOLS = frozenset(";:,.!?—…\"()“” \t\n'-«»")
# Punctuation that is read aloud where the G2P knows it ("#" hash, "&" and, "@" at): like letters, digits and
# symbols (★, ^, |, <, emoji), an input that holds one means something, so a G2P that gives it no sound drops it.
READ_PUNCTUATION = frozenset("#%&*@/\\§¶†‡")


class TextError(InputError):
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


@dataclass(frozen=True)
class Phonemized:
    """The phonemes of a text, and the words or symbols (if any) that no G2P could read: those are not spoken."""

    phonemes: str
    unspoken: tuple[str, ...] = ()


def _means_something(text: str) -> bool:
    """A letter, a digit, a symbol or punctuation that is read aloud: what a listener expects to hear."""
    return any(ch.isalnum() or unicodedata.category(ch)[0] == "S" or ch in READ_PUNCTUATION for ch in text)


def _sounds(phonemes: str) -> bool:
    return any(ch not in SILENT_SYMBOLS for ch in phonemes)


def symbols(text: str) -> list[str]:
    """Pictographs and other symbols (★, ♥, ©, emoji; Unicode category So), each once in order of appearance: the
    English G2P reads them by name where espeak-ng has one ('♥' heart suit) and drops the others."""
    return list(dict.fromkeys(ch for ch in text if unicodedata.category(ch) == "So"))


def foreign_letters(text: str) -> list[str]:
    """Letters outside the Latin script (Chinese, Cyrillic, Greek, ...), each once in order of appearance. The
    English G2P does not read them: its espeak-ng fallback names them instead ("Chinese letter", ...)."""
    return list(dict.fromkeys(ch for ch in text if ch.isalpha() and "LATIN" not in unicodedata.name(ch, "")))


def phonemize(text: str, language: str = DEFAULT_LANGUAGE) -> Phonemized:
    """Text -> Kokoro phoneme string in `language` (a Kokoro language code; see kokoro_tvm.frontend.g2p)."""
    g2p.check_language(language)
    if not text.strip():
        raise EmptyTextError(f"nothing to say: the text {text!r} is empty")
    unspoken: list[str] = []
    named: list[str] = []
    if language in g2p.ENGLISH:
        foreign = foreign_letters(text)
        if foreign:
            log.warning(
                "%d letter(s) outside the Latin script (%s): the English G2P does not read them, it names them "
                "(e.g. 'Chinese letter'); the phonemes in the output's sidecar show what is spoken",
                len(foreign),
                "".join(foreign[:10]),
            )
        parts = []
        for line in LINE_BREAKS.split(text.strip()):
            if not line.strip():
                continue
            tokens = g2p.english_tokens(line, british=language == "b")
            unspoken += [t.text for t in tokens if _means_something(t.text) and not _sounds(t.phonemes or "")]
            named += [f"{t.text} as {t.phonemes!r}" for t in tokens if symbols(t.text) and _sounds(t.phonemes or "")]
            parts.append(g2p.tokens_to_phonemes(tokens))
        phonemes = " ".join(p for p in parts if p)
        if named:
            log.warning("%d symbol(s) are read by name: %s", len(named), ", ".join(named[:10]))
    else:
        phonemes = g2p.other_language_phonemes(text, language)
    if unspoken:
        log.warning(
            "%d word(s) or symbol(s) no G2P can read are not spoken: %s", len(unspoken), " ".join(unspoken[:10])
        )
    phonemes = _without_silent_marks(SYLLABIC_CONSONANT.sub("ᵊ\\1", " ".join(phonemes.split())))
    _require_sound(phonemes, f"the text {text!r}")
    return Phonemized(phonemes, tuple(unspoken))


def _without_silent_marks(phonemes: str) -> str:
    """The G2P passes punctuation and symbols through ("¡", "«", "}"); those outside Kokoro's vocab carry no
    sound and KModel itself skips them, so they are dropped here, with a warning. Letters outside the vocab are
    kept, for `tokenize` to refuse."""
    vocab = load_vocab()
    marks = sorted({ch for ch in phonemes if ch not in vocab and unicodedata.category(ch)[0] in "PSZC"})
    if not marks:
        return phonemes
    log.warning("punctuation or symbols with no sound and no token in Kokoro's vocab are skipped: %s", marks)
    return " ".join("".join(ch for ch in phonemes if ch not in marks).split())


def text_to_phonemes(text: str, language: str = DEFAULT_LANGUAGE) -> str:
    """Text -> Kokoro phoneme string (KPipeline's for English)."""
    return phonemize(text, language).phonemes


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


# Streaming (kokoro_tvm.synthesis.synthesize_stream), in phoneme symbols:
# - the first piece ends at the first clause or sentence end at or after FIRST_PIECE_MIN symbols (a lone
#   "Hello," would leave the next piece too little time), within FIRST_PIECE_MAX (else at the last space);
# - each later piece is as many whole sentences as fit in PIECE_GROWTH times the previous piece; if not even one
#   does, as many whole clauses; if not even one clause, that one clause whole (a piece never ends inside a
#   clause unless the clause alone is longer than MAX_PHONEMES). A piece of n seconds takes RTF x n seconds to
#   speak, so at RTF < 1 / PIECE_GROWTH (less the per-call overhead) each piece is ready before the previous one
#   has finished playing; a clause longer than the limit may arrive late, and `bench --first-audio` says so.
FIRST_PIECE_MIN = 16
FIRST_PIECE_MAX = 100
PIECE_GROWTH = 2.0


def stream_pieces(
    phonemes: str,
    first_max: int = FIRST_PIECE_MAX,
    growth: float = PIECE_GROWTH,
    max_len: int = MAX_PHONEMES,
    first_min: int = FIRST_PIECE_MIN,
) -> list[str]:
    """Phoneme pieces for streaming (the rule above), all at once, each later piece within `growth` times the
    one before; joined with single spaces they give back the input."""
    pieces = iter_stream_pieces(
        phonemes, lambda previous: planned_limit(previous, growth), first_max, max_len, first_min
    )
    return list(pieces)


def planned_limit(previous: str, growth: float = PIECE_GROWTH) -> int:
    """The growth rule: a later piece's limit in symbols, `growth` times the piece before."""
    return int(growth * len(previous))


def iter_stream_pieces(
    phonemes: str,
    limit: Callable[[str], int],
    first_max: int = FIRST_PIECE_MAX,
    max_len: int = MAX_PHONEMES,
    first_min: int = FIRST_PIECE_MIN,
) -> Iterator[str]:
    """The pieces of `phonemes` one at a time: the first by the rule above, each later one within
    `limit(previous piece)` symbols, asked only when that piece is wanted (a stream sizes it by how far it is
    ahead of playback then). Punctuation that would carry no sound goes with the piece before it, or at the
    very start with the first; joined with single spaces the pieces give back the input."""
    rest, carry, previous = " ".join(phonemes.split()), "", None
    while rest:
        if previous is None:
            cut = _first_cut(rest, min(first_min, max_len), min(first_max, max_len))
        else:
            cut = _later_cut(rest, min(max_len, max(1, limit(previous))), max_len)
        piece, rest = f"{carry} {rest[:cut].strip()}".strip(), rest[cut:].strip()
        if previous is None and rest and not _has_sound(piece):
            carry = piece  # a silent start: spoken with the first piece that has sound
            continue
        while rest:  # the silent clauses that follow go with this piece
            end = _segment_end(rest)
            if _has_sound(rest[:end]) or len(piece) + 1 + end > max_len:
                break
            piece, rest = f"{piece} {rest[:end].strip()}", rest[end:].strip()
        carry, previous = "", piece
        yield piece


def _segment_end(s: str) -> int:
    """The end of s's first clause or sentence (after its mark), or len(s)."""
    ends = _ends(s, SENTENCE_END | CLAUSE_END, len(s))
    return ends[0] if ends else len(s)


def _ends(s: str, symbols: frozenset, limit: int) -> list[int]:
    """Cut positions after a `symbols` mark followed by a space, each piece s[:cut] at most `limit` symbols."""
    return [i + 1 for i in range(min(limit, len(s) - 1)) if s[i] in symbols and s[i + 1] == " "]


def _first_cut(s: str, first_min: int, first_max: int) -> int:
    ends = [c for c in _ends(s, SENTENCE_END | CLAUSE_END, first_max) if c >= first_min]
    if ends:
        return ends[0]
    return len(s) if len(s) <= first_max else _best_cut(s, first_max)


def _later_cut(s: str, limit: int, max_len: int) -> int:
    if len(s) <= limit:
        return len(s)
    for symbols in (SENTENCE_END, SENTENCE_END | CLAUSE_END):
        ends = _ends(s, symbols, limit)
        if ends:
            return ends[-1]
    beyond = _ends(s, SENTENCE_END | CLAUSE_END, max_len)  # one whole clause, longer than the limit
    if beyond:
        return beyond[0]
    return len(s) if len(s) <= max_len else _best_cut(s, max_len)


def _has_sound(phonemes: str) -> bool:
    return any(symbol not in SILENT_SYMBOLS for symbol in phonemes)


def prepare(
    text: str | None = None,
    phonemes: str | None = None,
    max_len: int = MAX_PHONEMES,
    language: str = DEFAULT_LANGUAGE,
) -> list[Chunk]:
    """Text in `language` (or a raw phoneme string) -> chunks ready for the model; raises TextError on bad
    input."""
    if (text is None) == (phonemes is None):
        raise TypeError("give exactly one of text= or phonemes=")
    if phonemes is None:
        phonemes = text_to_phonemes(text, language)
    else:
        phonemes = " ".join(phonemes.split())
        _require_sound(phonemes, "the phoneme string")
    tokenize(phonemes)  # report every unknown symbol of the whole input at once
    chunks = [Chunk(p, tokenize(p)) for p in split_phonemes(phonemes, max_len)]
    if len(chunks) > 1:
        log.info("long input: %d phonemes split into %d chunks", len(phonemes), len(chunks))
    return chunks


def one_chunk(text: str, language: str = DEFAULT_LANGUAGE, purpose: str = "this command") -> Chunk:
    """The one chunk of a text that must fit one utterance (at most MAX_PHONEMES phonemes); a longer text is a
    TextError naming `purpose` (e.g. "bench"), never cut short."""
    chunks = prepare(text=text, language=language)
    if len(chunks) != 1:
        raise TextError(
            f"{purpose} takes one utterance (at most {MAX_PHONEMES} phonemes); this text makes {len(chunks)} chunks"
        )
    return chunks[0]
