"""The precision floor (notebook 07): how far PyTorch's own float32 model is from its float64 model on the same
inputs, the distance any correct float32 reimplementation lands about (kokoro_tvm.evaluation.backends compares
the backends themselves). Needs torch."""

from __future__ import annotations

import numpy as np

from kokoro_tvm.evaluation.metrics import audio_metrics
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.frontend.voices import load_voice
from kokoro_tvm.reference.noise import SeededNoise


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
