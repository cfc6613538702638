"""Many texts in one go (`synthesize_batch`, `kokoro-tvm say --batch FILE`): every text is read and checked first,
then the compiled model speaks all their chunks `batch` at a time, each component called once per group
(kokoro_tvm.runtime.kokoro.TVMKokoro.run_many); PyTorch speaks them one by one.

Each text's Speech is what `synthesize` gives it alone: the same chunks, each chunk's SineGen noise from its own
stream (its index within its text, whatever its place in a group), and the components are padding-invariant per
row, so a chunk's audio does not depend on the others in its group (tests/test_batched.py).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from kokoro_tvm.errors import InputError
from kokoro_tvm.frontend.voices import DEFAULT_VOICE
from kokoro_tvm.synthesis import Speech, _Request
from kokoro_tvm.synthesis.backends import TVMBackend, check_backend, make_backend

log = logging.getLogger(__name__)

# Chunks per call of each component. On the CPU batching does not pay: notebook 07's 20 sentences on the 2-core
# Emerald Rapids Xeon, fp32, 2.74 s of audio per second at batch 1, 2.36 at 2, 1.79 at 16 (the decoder is
# compute-bound and pays for padding; NOTES/performance.md "Batching", `python -m kokoro_tvm.studies.batching`),
# so one; `--batch-size` asks for more.
DEFAULT_BATCH = 1


def synthesize_batch(
    texts: Sequence[str],
    *,
    voices: str | Sequence[str] = DEFAULT_VOICE,
    batch: int = DEFAULT_BATCH,
    speed: float = 1.0,
    noise=0,
    backend="tvm",
    weights=None,
    buckets: str = "default",
    device: str = "cpu",
    precision: str = "fp32",
    language: str | None = None,
) -> list[Speech]:
    """One Speech per text, in order; `voices`: one voice for all, or one per text. Every text is phonemized and
    checked before any model loads; a bad one raises an InputError naming its place (`text 3: ...`)."""
    if isinstance(texts, str):  # a str is a sequence too: each character would be an utterance
        raise TypeError("texts must be a list of strings, one per utterance; got one string (wrap it in a list)")
    texts = list(texts)
    voices = [voices] * len(texts) if isinstance(voices, str) else list(voices)
    if not texts or len(voices) != len(texts):
        raise InputError(
            f"synthesize_batch takes texts and one voice or a voice per text; got {len(texts)} "
            f"text(s) and {len(voices)} voice(s)"
        )
    if not isinstance(batch, int) or batch < 1:
        raise InputError(f"the batch size must be a positive whole number, got {batch!r}")
    if isinstance(backend, str):
        check_backend(backend, device, precision, weights)
    requests = []
    for place, (text, voice) in enumerate(zip(texts, voices, strict=True), start=1):
        try:
            # the backend comes once for every text, below: none per request (its own options unused: None)
            unused = dict(backend=None, weights=None, buckets=None, device=None, precision=None)
            requests.append(_Request.make(text, None, voice, speed, noise, language=language, **unused))
        except InputError as exc:
            raise InputError(f"text {place}: {exc}") from None
    if isinstance(backend, str):
        backend = make_backend(backend, weights, buckets, device, precision, batch)
    rows = [(r, chunk, r.pack.style(len(chunk.phonemes)), i) for r in requests for i, chunk in enumerate(r.chunks)]
    if isinstance(backend, TVMBackend):
        spoken = backend.speak_many([row[1:] for row in rows], requests[0].speed, requests[0].noise, batch)
    else:
        spoken = [backend.speak(chunk, style, r.speed, r.noise, stream) for r, chunk, style, stream in rows]
    shapes = iter(backend.shapes[-len(rows) :] if isinstance(backend, TVMBackend) else [])
    spoken = iter(spoken)
    return [_speech(request, backend, [next(spoken) for _ in request.chunks], shapes, batch) for request in requests]


def _speech(request: _Request, backend, spoken: list, shapes, batch: int) -> Speech:
    """One text's Speech from its chunks' (audio, durations), with its sidecar's metadata."""
    request.backend = backend
    metadata = request.metadata(request.chunks)
    if "tvm" in metadata:  # this text's chunks' shapes (the backend's last ones are another text's)
        metadata["tvm"].update(shapes=[next(shapes) for _ in request.chunks], batch=batch)
    audio = np.concatenate([np.asarray(a, dtype=np.float32).reshape(-1) for a, _ in spoken])
    return Speech(audio, request.chunks, [np.asarray(d) for _, d in spoken], metadata)
