"""The precision floor (notebook 07): how far PyTorch's own float32 model is from its float64 model on the same
inputs, the distance any correct float32 reimplementation lands about (kokoro_tvm.evaluation.backends compares
the backends themselves); and the STFT gap: how far the conv-based CustomSTFT model we compile is from stock
kokoro's TorchSTFT model, with kokoro's bases and with ours (kokoro_tvm.weights.stft); and where a build's error
lies in time (`error_by_window`: even, or a local burst). Needs torch."""

from __future__ import annotations

import numpy as np

from kokoro_tvm.compiled import compiled_kokoro
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.evaluation.metrics import audio_metrics, pesq_wb, snr_db, windowed_snr_db
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.runtime.buckets import parse_buckets


def precision_floor(text: str = "Hello world.", voice: str = "af_heart", seed: int = 0) -> dict:
    """How far PyTorch's own float32 model is from its float64 model on one utterance (same tokens, style and
    seeded noise): the scale against which a float32 build's audio SNR must be read. Durations, audio SNR,
    PESQ-WB and STOI of pt.dynamic fp32 against pt.dynamic fp64.
    `python -c "from kokoro_tvm.studies.audio_comparison import precision_floor as f; print(f())"`"""
    import torch

    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.weights.resolve import load_kmodel

    (chunk,) = prepare(text=text)
    style = load_voice(voice).style(len(chunk.phonemes))
    runs = {}
    for dtype in (torch.float32, torch.float64):
        model, _ = load_kmodel(dtype=dtype)
        runs[dtype] = run_stages(model, chunk.padded_ids, style, noise=SeededNoise(seed))
    fp32, fp64 = runs[torch.float32], runs[torch.float64]
    durations_equal = bool(np.array_equal(fp32.durations, fp64.durations))
    metrics = audio_metrics(fp64.audio, fp32.audio) if durations_equal else {}
    return {
        "text": text,
        "durations_equal": durations_equal,
        **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi")},
    }


STFT_GAP_TEXTS = (
    "Hello world.",
    "A pot of tea helps to pass the evening, and the kettle sings while the rain comes down.",
)


def stock_stft_gap(
    texts=STFT_GAP_TEXTS, voice: str = "af_heart", seed: int = 0, bases=("ours", "kokoro")
) -> list[dict]:
    """Stock kokoro's default model (`KModel()`, `disable_complex=False`: torch.stft / torch.istft) against the
    conv-based CustomSTFT model we compile (`disable_complex=True`) with kokoro's own bases (`kokoro`) and with ours
    (`ours`, what every model we load gets; kokoro_tvm.weights.stft): durations, audio SNR, PESQ-WB and STOI against
    stock, each `forward_with_tokens` seeded alike. `bases` picks which of the two.
    `python -c "from kokoro_tvm.studies.audio_comparison import stock_stft_gap as f; print(f())"`"""
    import torch
    from kokoro.custom_stft import CustomSTFT

    from kokoro_tvm.reference.pt_dynamic import stock_forward
    from kokoro_tvm.weights.resolve import load_kmodel

    if not bases or set(bases) - {"ours", "kokoro"}:
        raise ValueError(f"bases must be some of 'ours', 'kokoro', got {bases!r}")
    models = {"stock": load_kmodel(disable_complex=False)[0]}
    for name in bases:
        models[name], _ = load_kmodel(disable_complex=True)
    if "kokoro" in models:
        fixed = models["kokoro"].decoder.generator.stft
        models["kokoro"].decoder.generator.stft = CustomSTFT(fixed.n_fft, fixed.hop_length, fixed.win_length)
    rows = []
    for text in texts:
        (chunk,) = prepare(text=text)
        style = load_voice(voice).style(len(chunk.phonemes))
        runs = {}
        for name, model in models.items():
            torch.manual_seed(seed)
            with torch.no_grad():
                runs[name] = stock_forward(model, chunk.padded_ids, style)
        (reference, durations) = runs["stock"]
        for name in bases:
            audio, other_durations = runs[name]
            metrics = audio_metrics(reference, audio)
            rows.append(
                {
                    "text": text,
                    "stft_bases": name,
                    "durations_equal": bool(np.array_equal(durations, other_durations)),
                    **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi")},
                }
            )
    return rows


def error_by_window(
    text: str, precisions=("int8", "fp32"), seeds=(0, 2), voice: str = "af_heart", window_ms: float = 20.0
) -> list[dict]:
    """Each symbolic-length TVM build in `precisions` against pt.dynamic float32 with the same seeded noise, per
    seed: audio SNR and PESQ-WB of the whole utterance, and the SNR of every `window_ms` window (median, and the
    five worst with their time and the reference's level there). Tells a build whose error is even from one with
    a local burst, and a PESQ score that moves with the noise at an unchanged error from one that follows it.
    `python -c "from kokoro_tvm.studies.audio_comparison import error_by_window as f; print(f('...'))"`"""
    import torch

    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.weights.resolve import load_kmodel

    (chunk,) = prepare(text=text)
    style = load_voice(voice).style(len(chunk.phonemes))
    model, info = load_kmodel(dtype=torch.float32)
    builds = {p: compiled_kokoro(model, info.fingerprint, p, buckets=parse_buckets("dynamic")) for p in precisions}
    window = round(window_ms * SAMPLE_RATE / 1000)
    rows = []
    for seed in seeds:
        reference = run_stages(model, chunk.padded_ids, style, noise=SeededNoise(seed))
        for precision, build in builds.items():
            audio = build.run_stages(chunk.padded_ids, style, 1.0, SeededNoise(seed)).audio
            local, level = windowed_snr_db(reference.audio, audio, window)
            worst = np.argsort(local)[:5]
            rows.append(
                {
                    "seed": seed,
                    "precision": precision,
                    "snr_db": snr_db(reference.audio, audio),
                    "pesq_wb": pesq_wb(reference.audio, audio),
                    "window_snr_median_db": float(np.median(local)),
                    "worst_windows": [
                        {
                            "at_s": float(i * window / SAMPLE_RATE),
                            "snr_db": float(local[i]),
                            "level_db": float(level[i]),
                        }
                        for i in worst
                    ],
                }
            )
    return rows
