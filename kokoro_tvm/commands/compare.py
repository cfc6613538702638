"""TVM against pt.dynamic on one utterance, at one precision, with identical explicit noise."""

from __future__ import annotations

import argparse

import numpy as np

from kokoro_tvm.commands.bench import print_record
from kokoro_tvm.compiled import check_device, check_precision, compiled_kokoro
from kokoro_tvm.errors import InputError
from kokoro_tvm.evaluation import metrics
from kokoro_tvm.evaluation.metrics import word_error_rate
from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, one_chunk
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of, load_voice
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.synthesis import check_noise

TOKEN_BUCKET_STEP = 16


def _audio_fields(reference: np.ndarray, other: np.ndarray) -> dict[str, float | None]:
    """The compare record's audio fields (`audio_` before each of metrics.audio_metrics's names it reports)."""
    if reference.shape != other.shape:
        return {"audio_snr_db": None, "audio_pesq_wb": None, "audio_stoi": None}
    return {
        "audio_snr_db": metrics.json_number(metrics.snr_db(reference, other)),
        "audio_pesq_wb": metrics.pesq_wb(reference, other),
        "audio_stoi": metrics.stoi(reference, other),
    }


def token_bucket_for(n_tokens: int) -> int:
    """Token-axis bucket used with a frame bucket: the next multiple of 16 (ALBERT's limit is 512)."""
    return min(-(-n_tokens // TOKEN_BUCKET_STEP) * TOKEN_BUCKET_STEP, 512)


def _whisper(text: str, audios: dict[str, np.ndarray]) -> dict:
    """Whisper's word error rate and transcript of each audio."""
    found = {}
    for name, audio in audios.items():
        wer, transcript = word_error_rate(text, audio, judge="whisper")
        found.update({f"whisper_wer_{name}": wer, f"whisper_transcript_{name}": transcript})
    return found


def compare_text(
    text: str,
    voice: str = DEFAULT_VOICE,
    precision: str = "fp32",
    seed: int = 0,
    weights=None,
    speed: float = 1.0,
    bucket: int | None = None,
    device: str = "cpu",
    buckets: str = "exact",
    asr: bool = False,
    language: str | None = None,
) -> dict:
    """The `kokoro-tvm compare` record: TVM on `device` against unpadded pt.dynamic (CPU) in `precision`'s dtype
    (bf16 and int8 builds: against float32). `buckets`: 'exact' (each length compiled as it is), a bucket set,
    or 'dynamic' (the symbolic-length builds) as for `say`; `bucket`: with 'exact', pad the aligned-frame axis
    to that many frames (and the token axis to token_bucket_for(T)). `asr`: also Whisper's word error rate on
    both (the CLI's default)."""
    import torch

    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.weights.resolve import load_kmodel

    dtype = check_precision(precision, device).dtype  # before any text, weights or build work
    noise = check_noise(seed)
    if bucket is not None and buckets != "exact":
        raise InputError("--bucket pads one utterance by hand; it goes with --buckets exact only")
    bucket_set = None if buckets == "exact" else parse_buckets(buckets)
    check_device(device, dtype)
    chunk = one_chunk(text, language or language_of(voice) or DEFAULT_LANGUAGE, "compare")  # G2P as `say`
    pack = load_voice(voice)
    style = pack.style(len(chunk.phonemes))
    model, info = load_kmodel(weights, dtype=getattr(torch, dtype))
    reference = run_stages(model, chunk.padded_ids, style, speed=speed, noise=noise)
    token_bucket = token_bucket_for(len(chunk.padded_ids)) if bucket is not None else None
    runtime = compiled_kokoro(model, info.fingerprint, precision, buckets=bucket_set, device=device)
    compiled = runtime.run_stages(chunk.padded_ids, style, speed, noise, token_bucket=token_bucket, frame_bucket=bucket)
    intelligibility = _whisper(text, {"torch": reference.audio, "tvm": compiled.audio}) if asr else {}
    return {
        "text": text,
        "voice": pack.name,
        "precision": precision,
        "device": device,
        "tokens": int(reference.token_ids.shape[0]),
        "frames": reference.n_frames,
        "buckets": bucket_set.describe() if bucket_set else "exact",
        "bucket": bucket,
        "token_bucket": token_bucket,
        "shapes": {"tokens": compiled.buckets[0], "frames": compiled.buckets[1]},
        "durations_equal": bool(np.array_equal(reference.durations, compiled.durations)),
        "stages": metrics.stage_errors(reference, compiled),
        **_audio_fields(reference.audio, compiled.audio),
        "noise": noise.description,
        "weights": info.source,
        "weights_fingerprint": info.fingerprint,
        **intelligibility,
    }


def run(args: argparse.Namespace) -> int:
    record = compare_text(
        args.text,
        voice=args.voice,
        precision=args.precision,
        seed=args.seed,
        weights=args.weights,
        bucket=args.bucket,
        device=args.device,
        buckets=args.buckets,
        asr=not args.no_asr,
        language=args.lang,
    )
    return print_record(record, args.json)
