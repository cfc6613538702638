"""Backends side by side on one sentence set, every metric against pt.dynamic (notebook 07, `kokoro-tvm evaluate`).
Needs torch.

Backends (all fp32, the resolved weights, one voice):
- pt_dynamic: kokoro_tvm.reference.pt_dynamic.run_stages with explicit seeded SineGen noise: the reference.
- torch_stock: stock `KModel.forward_with_tokens`, SineGen noise from torch's RNG: the natural floor of
  run-to-run difference (what two PyTorch runs of the same sentence differ by).
- tvm_exact / tvm_bucketed / tvm_dynamic: the compiled model at exact lengths / in the chosen bucket set
  (`--buckets bucketed`) / in the symbolic-length builds (`--buckets dynamic`, what `say` runs by default),
  given the same noise as pt_dynamic.
- tvm_bf16: the symbolic-length builds with bf16 convolutions (`--precision bf16`, kokoro_tvm.compiler.bf16), same
  noise; only on a CPU with AVX512_BF16 (`Speakers.backends` leaves it out elsewhere).
- tvm_int8: the same with the generator's resblocks in int8 (`--precision int8`, kokoro_tvm.compiler.int8), same
  noise; only on a CPU with AVX512_BF16 and AVX512_VNNI.
- ort_int8: ONNX Runtime on the embedded int8 export (its own noise; int8 arithmetic).

Reference-based metrics need the same length, i.e. the same durations; where a backend's audio length differs
from the reference's, those metrics are None and the length difference is reported. Intelligibility (WER of
Whisper tiny.en's transcript against the text, and pocketsphinx's as a second judge) is computed for every backend,
the reference included.
"""

from __future__ import annotations

import functools
import logging
import time

import numpy as np

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError
from kokoro_tvm.evaluation.metrics import audio_metrics, word_error_rate
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.runtime.buckets import parse_buckets

log = logging.getLogger(__name__)

REFERENCE = "pt_dynamic"
BACKENDS = (REFERENCE, "torch_stock", "tvm_exact", "tvm_bucketed", "tvm_dynamic", "tvm_bf16", "tvm_int8", "ort_int8")
REDUCED = {"tvm_bf16": "bf16", "tvm_int8": "int8"}  # reduced-precision backends -> their --precision


def pick_sentences(sentences: list[str], n: int) -> list[str]:
    """`n` sentences spread evenly over the corpus's range of lengths (shortest to longest, by characters)."""
    ordered = sorted(sentences, key=len)
    if n >= len(ordered):
        return ordered
    return [ordered[round(i)] for i in np.linspace(0, len(ordered) - 1, n)]


class Speakers:
    """Each backend as `speak(sentence) -> float32 audio`. The weights and voice load here; each compiled build, and
    the ONNX Runtime session, on the first sentence that backend speaks (then kept): an `evaluate` worker running two
    backends loads two builds, not seven."""

    def __init__(self, voice: str, seed: int, threads: int | None = None):
        import torch

        from kokoro_tvm.compiler.bf16 import host_supports_bf16
        from kokoro_tvm.compiler.int8 import host_supports_int8
        from kokoro_tvm.weights.resolve import load_kmodel

        self.model, self.weights = load_kmodel()
        self.pack, self.noise, self.seed, self.threads = load_voice(voice), SeededNoise(seed), seed, threads
        runs = {"tvm_bf16": host_supports_bf16(), "tvm_int8": host_supports_bf16() and host_supports_int8()}
        self.backends = tuple(b for b in BACKENDS if b not in REDUCED or runs[b])
        self._torch = torch

    @functools.cached_property
    def tvm_exact(self):
        return self._compiled()

    @functools.cached_property
    def tvm_bucketed(self):
        return self._compiled(buckets=parse_buckets("bucketed"))

    @functools.cached_property
    def tvm_dynamic(self):
        return self._compiled(buckets=parse_buckets("dynamic"))

    @functools.cached_property
    def tvm_bf16(self):
        return self._compiled(buckets=parse_buckets("dynamic"), precision=REDUCED["tvm_bf16"])

    @functools.cached_property
    def tvm_int8(self):
        return self._compiled(buckets=parse_buckets("dynamic"), precision=REDUCED["tvm_int8"])

    @functools.cached_property
    def ort(self):
        from kokoro_tvm.peers.catalog import OrtInt8

        return OrtInt8(self.threads)

    def _compiled(self, **options):

        return compiled_kokoro(self.model, self.weights.fingerprint, **options)

    def speak(self, backend: str, sentence: str) -> np.ndarray:
        from kokoro_tvm.reference.pt_dynamic import run_stages, stock_forward

        (chunk,) = prepare(text=sentence)  # one utterance per sentence (the corpus is checked for it)
        style = self.pack.style(len(chunk.phonemes))
        if backend == REFERENCE:
            audio = run_stages(self.model, chunk.padded_ids, style, noise=self.noise).audio
        elif backend == "torch_stock":
            self._torch.manual_seed(self.seed + 1)  # a different draw than the reference, but reproducible
            audio, _ = stock_forward(self.model, chunk.padded_ids, style)
        elif backend in ("tvm_exact", "tvm_bucketed", "tvm_dynamic") or backend in REDUCED and backend in self.backends:
            audio = getattr(self, backend).run_stages(chunk.padded_ids, style, noise=self.noise).audio
        elif backend == "ort_int8":
            audio = self.ort.speak(chunk.padded_ids, style)
        else:
            raise InputError(f"unknown backend {backend!r}; available: {', '.join(BACKENDS)}")
        return np.asarray(audio, dtype=np.float32).reshape(-1)


def compare_backends(speakers: Speakers, sentences: list[str], backends=None, exact_limit: int | None = None):
    """(rows, audio): one row per (sentence, backend) with every metric against the reference, and the audio
    as {sentence index: {backend: array}}. `backends`: default every backend this machine runs
    (`speakers.backends`). `exact_limit`: tvm_exact only for the first N sentences (one build per distinct
    length)."""
    backends = speakers.backends if backends is None else backends
    rows, audio = [], {}
    for index, sentence in enumerate(sentences):
        audio[index] = {}
        for backend in backends:
            if backend == "tvm_exact" and exact_limit is not None and index >= exact_limit:
                continue
            start = time.perf_counter()
            audio[index][backend] = speakers.speak(backend, sentence)
            log.info("%s: sentence %d in %.1f s", backend, index, time.perf_counter() - start)
        reference = audio[index][REFERENCE]
        for backend, waveform in audio[index].items():
            row = {"sentence": index, "backend": backend, "seconds": len(waveform) / SAMPLE_RATE}
            row.update(samples_vs_reference=len(waveform) - len(reference), finite=bool(np.isfinite(waveform).all()))
            if not row["finite"]:  # no metric can read NaN or inf: the row says so instead
                log.warning("%s: sentence %d gives non-finite audio; no metric computed", backend, index)
                row.update(wer=None, transcript=None, wer_pocketsphinx=None)
                rows.append(row)
                continue
            wer, transcript = word_error_rate(sentence, waveform, judge="whisper")
            wer_sphinx, _ = word_error_rate(sentence, waveform, judge="pocketsphinx")
            row.update(wer=wer, transcript=transcript, wer_pocketsphinx=wer_sphinx)
            if backend != REFERENCE:
                same_length = len(waveform) == len(reference)
                row.update(audio_metrics(reference, waveform) if same_length else {})
            rows.append(row)
    return rows, audio
