"""Text to speech through a chosen backend: chunks in, one waveform out (`synthesize`) or a stream of pieces
(`synthesize_stream`).

A backend (kokoro_tvm.synthesis.backends) turns one chunk (padded token ids, a style row, speed, noise) into
audio; `synthesize_batch` (kokoro_tvm.synthesis.batch) speaks many texts, the compiled model's chunks B at a time.
Long text is split by the text front-end; the chunks' audio is concatenated in order, every sample kept. Every
chunk starts and ends on Kokoro's pad token, so its audio starts and ends in the model's own near-silence: joins
need no cross-fade.
"""

from __future__ import annotations

import inspect
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from kokoro_tvm.config import SAMPLE_RATE, SAMPLES_PER_FRAME
from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.g2p import g2p_name
from kokoro_tvm.frontend.text import (
    DEFAULT_LANGUAGE,
    FIRST_PIECE_MAX,
    PIECE_GROWTH,
    Chunk,
    foreign_letters,
    iter_stream_pieces,
    phonemize,
    planned_limit,
    prepare,
    symbols,
    tokenize,
)
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of, load_voice
from kokoro_tvm.reference.noise import NoiseSource, SeededNoise, noise_source
from kokoro_tvm.synthesis.backends import check_backend, make_backend

log = logging.getLogger(__name__)

MIN_SPEED, MAX_SPEED = 0.25, 4.0
# Stream joins: each piece after the first starts this long before its speech does (its leading pad token's
# silence beyond that is dropped); "speech" is the first sample above SILENCE (-60 dBFS).
JOIN_LEAD_SECONDS = 0.1
SILENCE = 1e-3
# Stream pace: a later piece may take at most this share of the time the audio handed over but not yet played
# leaves, at the speed the piece before was spoken (its per-call overhead included, so a longer piece is
# spoken faster per symbol than this expects); the rest is room for the machine's speed to move between calls.
PACE_MARGIN = 0.7
CLOCK = time.perf_counter


@dataclass
class Speech:
    audio: np.ndarray  # float32 [samples] at SAMPLE_RATE
    chunks: list[Chunk]
    durations: list[np.ndarray]  # frames per token, per chunk
    metadata: dict = field(default_factory=dict)

    @property
    def seconds(self) -> float:
        return self.audio.shape[0] / SAMPLE_RATE


def check_speed(speed: float) -> float:
    if not (isinstance(speed, (int, float)) and math.isfinite(speed) and MIN_SPEED <= speed <= MAX_SPEED):
        raise InputError(f"speed must be a number in [{MIN_SPEED}, {MAX_SPEED}], got {speed!r}")
    return float(speed)


def check_noise(noise) -> NoiseSource:
    """noise_source's NoiseSource, its seed checked: numpy's generator refuses a negative one from deep inside, at
    the first draw. (Here, not in SeededNoise: kokoro_tvm.reference is a build source, hashed into every build.)"""
    source = noise_source(noise)
    if isinstance(source, SeededNoise) and source.seed < 0:
        raise InputError(f"the noise seed must be a non-negative integer, got {source.seed}")
    return source


@dataclass
class _Request:
    """What synthesize and synthesize_stream share, validated before any model loads: the phonemes (as the chunks
    `synthesize` speaks), the voice's pack, speed, noise, and the backend (built last)."""

    text: str | None
    chunks: list[Chunk]
    unspoken: tuple[str, ...]
    language: str
    pack: object
    speed: float
    noise: NoiseSource
    backend: object

    @classmethod
    def make(cls, text, phonemes, voice, speed, noise, backend, weights, buckets, device, precision, language):
        """The request `synthesize`'s arguments (in its order) make."""
        for name, value in (("text", text), ("phonemes", phonemes)):
            if value is not None and not isinstance(value, str):
                raise TypeError(f"{name} must be a string, got {type(value).__name__} {value!r}")
        if not isinstance(voice, (str, os.PathLike)):
            raise TypeError(f"voice must be a voice name or a pack file's path, got {voice!r}")
        speed, noise = check_speed(speed), check_noise(noise)
        if isinstance(backend, str):
            check_backend(backend, device, precision, weights)
        language = language or language_of(voice) or DEFAULT_LANGUAGE
        unspoken: tuple[str, ...] = ()
        if text is not None:
            phonemized = phonemize(text, language)
            phonemes, unspoken = phonemized.phonemes, phonemized.unspoken
        chunks = prepare(phonemes=phonemes)  # every symbol known, something to say: checked before any load
        pack = load_voice(voice)
        if isinstance(backend, str):
            backend = make_backend(backend, weights=weights, buckets=buckets, device=device, precision=precision)
        return cls(text, chunks, unspoken, language, pack, speed, noise, backend)

    @property
    def phonemes(self) -> str:
        return " ".join(c.phonemes for c in self.chunks)

    def speak(self, chunk: Chunk, stream: int) -> tuple[np.ndarray, np.ndarray]:
        style = self.pack.style(len(chunk.phonemes))
        audio, durations = self.backend.speak(chunk, style, self.speed, self.noise, stream)
        return np.asarray(audio, dtype=np.float32).reshape(-1), np.asarray(durations)

    def metadata(self, chunks: list[Chunk]) -> dict:
        text = self.text
        found = {
            "text": text,
            "phonemes": [c.phonemes for c in chunks],
            "language": self.language if text is not None else None,
            "g2p": g2p_name(self.language) if text is not None else "phonemes given",
            "foreign_letters": "".join(foreign_letters(text)) if text else "",  # named, not read: see the phonemes
            "symbols": "".join(symbols(text)) if text else "",  # read by name, or listed in unspoken
            "unspoken": list(self.unspoken),  # words or symbols no G2P could read (warned about)
            "voice": self.pack.name,
            "voice_source": self.pack.source,
            "speed": self.speed,
            "noise": self.noise.description,
            "backend": self.backend.name,
            "weights": self.backend.weights.as_dict(),
            "sample_rate": SAMPLE_RATE,
        }
        if hasattr(self.backend, "describe"):
            found["tvm"] = self.backend.describe(len(chunks))
        return found


def synthesize(
    text: str | None = None,
    *,
    phonemes: str | None = None,
    voice: str = DEFAULT_VOICE,
    speed: float = 1.0,
    noise: str | int | NoiseSource = 0,
    backend="torch",
    weights=None,
    buckets: str = "default",
    device: str = "cpu",
    precision: str = "fp32",
    language: str | None = None,
) -> Speech:
    """Speak `text` (or a raw phoneme string).

    `language`: a Kokoro language code for the G2P (default: the one the voice's name starts with, as KPipeline
    does; American English for a voice file). `noise`: 'zero', 'seeded:N', an int seed or a NoiseSource;
    `backend`: a name (built after the input is validated) or a backend object; `buckets` (TVM by name): a
    kokoro_tvm.runtime.buckets spec or 'exact'; `device` (TVM): "cpu", "metal" or "cuda", where one exists."""
    request = _Request.make(text, phonemes, voice, speed, noise, backend, weights, buckets, device, precision, language)
    spoken = [request.speak(chunk, stream=i) for i, chunk in enumerate(request.chunks)]
    return Speech(
        np.concatenate([audio for audio, _ in spoken]),
        request.chunks,
        [d for _, d in spoken],
        request.metadata(request.chunks),
    )


def synthesize_stream(text: str | None = None, *, first_max: int = FIRST_PIECE_MAX, **options) -> SpeechStream:
    """Speak `text` as a stream: iterating the result yields float32 audio pieces at SAMPLE_RATE, each as soon as
    it is spoken; the pieces end to end are the whole speech. Pieces follow kokoro_tvm.frontend.text.
    stream_pieces: the first ends at the first clause or sentence end past a few words, each later one is whole
    sentences (or clauses) within twice the one before, and within what StreamPace says this machine can speak
    before the audio already handed over has played. `options`: `synthesize`'s keyword arguments, with its
    defaults; bad input, an unknown voice or an unusable backend raises here, before the first piece."""
    bound = inspect.signature(synthesize).bind(text, **options)  # an unknown option is a TypeError, as there
    bound.apply_defaults()
    request = _Request.make(*bound.arguments.values())
    return SpeechStream(request, first_max)


class StreamPace:
    """How many phoneme symbols the next piece of a stream may have so that it is ready before the audio handed
    over so far has finished playing (played from the first piece's hand-over, without pause): the growth rule's
    `growth` times the piece before, cut to PACE_MARGIN of the time left at the speed the piece before was spoken.
    A machine that speaks the plan in time gets the plan; a slower one (or a busy one) gets shorter pieces, down
    to one clause. `cuts` counts the limits it set below the plan (the piece can still be the same whole
    sentence: a sentence is never cut)."""

    def __init__(self, growth: float = PIECE_GROWTH, margin: float = PACE_MARGIN, clock: Callable[[], float] = CLOCK):
        self.growth, self.margin, self.clock = growth, margin, clock
        self.play_end: float | None = None  # when the audio handed over so far has played, on `clock`
        self.seconds_per_symbol = 0.0
        self.cuts = 0

    def spoken(self, symbols: int, speak_s: float, audio_s: float) -> None:
        """A piece of `symbols` took `speak_s` to speak and gives `audio_s` of audio, handed over now."""
        now = self.clock()
        self.seconds_per_symbol = speak_s / max(1, symbols)
        self.play_end = (now if self.play_end is None else max(self.play_end, now)) + audio_s

    def limit(self, previous: str) -> int:
        """The next piece's limit in symbols, asked when it is about to be spoken."""
        planned = planned_limit(previous, self.growth)
        if self.play_end is None or self.seconds_per_symbol <= 0:
            return planned
        left = self.play_end - self.clock()
        affordable = int(self.margin * left / self.seconds_per_symbol)
        if affordable < planned:
            self.cuts += 1
            log.debug(
                "stream pace: next piece within %d symbols, not %d (%.2f s of audio left to play)",
                max(1, affordable),
                planned,
                left,
            )
        return max(1, min(planned, affordable))


class SpeechStream:
    """One utterance spoken piece by piece as it is iterated. `pieces`: each piece's phonemes, cut as it is
    wanted (kokoro_tvm.frontend.text.iter_stream_pieces, sized by `pace`); after the stream is spent, `chunks`
    and `durations` as in Speech and `metadata()` what `synthesize` records, with the pieces' count and how many
    limits the pace cut."""

    def __init__(self, request: _Request, first_max: int = FIRST_PIECE_MAX, pace: StreamPace | None = None):
        self.request, self.first_max, self.pace = request, first_max, pace or StreamPace()
        self.pieces: list[str] = []
        self.chunks: list[Chunk] = []
        self.durations: list[np.ndarray] = []

    def __iter__(self) -> Iterator[np.ndarray]:
        pieces = iter_stream_pieces(self.request.phonemes, self.pace.limit, self.first_max)
        for i, piece in enumerate(pieces):
            start = self.pace.clock()
            chunk = Chunk(piece, tokenize(piece))
            audio, durations = self.request.speak(chunk, stream=i)
            if i:
                audio = trim_leading_silence(audio, int(durations[0]) * SAMPLES_PER_FRAME)
            self.pieces.append(piece)
            self.chunks.append(chunk)
            self.durations.append(durations)
            self.pace.spoken(len(piece), self.pace.clock() - start, audio.size / SAMPLE_RATE)
            yield audio

    def metadata(self) -> dict:
        return dict(self.request.metadata(self.chunks), stream_pieces=len(self.pieces), stream_pace_cuts=self.pace.cuts)


def trim_leading_silence(audio: np.ndarray, pad_samples: int, keep: float = JOIN_LEAD_SECONDS) -> np.ndarray:
    """A later piece without the silence its leading pad token makes, up to `keep` seconds before the first
    sample above SILENCE: the join's pause is then the one the previous piece's punctuation made, as in the
    whole utterance, and the cut falls in digital silence (no click)."""
    loud = np.flatnonzero(np.abs(audio[:pad_samples]) > SILENCE)
    onset = int(loud[0]) if loud.size else min(pad_samples, audio.size)
    return audio[max(0, onset - int(keep * SAMPLE_RATE)) :]
