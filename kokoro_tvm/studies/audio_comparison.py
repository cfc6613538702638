"""The precision floor (notebook 07): how far PyTorch's own float32 model is from its float64 model on the same
inputs, the distance any correct float32 reimplementation lands about (kokoro_tvm.evaluation.backends compares
the backends themselves); and the STFT gap: how far the conv-based CustomSTFT model we compile is from stock
kokoro's TorchSTFT model, with kokoro's bases and pad and with ours (kokoro_tvm.weights.stft); and where a
build's error lies in time (`error_by_window`: even, or a local burst). Needs torch."""

from __future__ import annotations

import contextlib

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
    "One two three four five.",
)
# The conv-based CustomSTFT models stock_stft_gap compares with stock: ours (kokoro_tvm.weights.stft: bases and
# centre pad), ours with kokoro's replicate centre pad, kokoro's own.
STFT_VARIANTS = ("ours", "kokoro_pad", "kokoro")


@contextlib.contextmanager
def source_phases(model):
    """Every phase of SineGen's source spectrum `model` computes inside the block (the generator reads it as a
    number, so a bin at +pi in one model and -pi in another feeds it values 2 pi apart)."""
    stft = model.decoder.generator.stft
    seen, own = [], stft.transform

    def transform(waveform):
        magnitude, phase = own(waveform)
        seen.append(phase)
        return magnitude, phase

    stft.transform = transform
    try:
        yield seen
    finally:
        del stft.transform


def _stft_models(stfts) -> dict:
    from kokoro.custom_stft import CustomSTFT

    from kokoro_tvm.weights.resolve import load_kmodel

    if not stfts or set(stfts) - set(STFT_VARIANTS):
        raise ValueError(f"stfts must be some of {STFT_VARIANTS}, got {stfts!r}")
    models = {"stock": load_kmodel(disable_complex=False)[0]}
    for name in stfts:
        models[name], _ = load_kmodel(disable_complex=True)
        stft = models[name].decoder.generator.stft
        if name == "kokoro_pad":
            stft.pad_mode = CustomSTFT(stft.n_fft, stft.hop_length, stft.win_length).pad_mode
        if name == "kokoro":
            models[name].decoder.generator.stft = CustomSTFT(stft.n_fft, stft.hop_length, stft.win_length)
    return models


def stock_stft_gap(
    texts=STFT_GAP_TEXTS, voice: str = "af_heart", seed: int = 0, stfts=("ours", "kokoro")
) -> list[dict]:
    """Stock kokoro's default model (`KModel()`, `disable_complex=False`: torch.stft / torch.istft) against the
    conv-based CustomSTFT models of `stfts` (STFT_VARIANTS; `ours` is what every model we load gets), each
    `forward_with_tokens` seeded alike: durations, audio SNR, PESQ-WB and STOI against stock, and how many phases
    of the source spectrum differ from stock's by more than pi (for `ours`, only bins whose imaginary part float32
    rounding puts on the other side of 0, where the phase is +-pi).
    `python -c "from kokoro_tvm.studies.audio_comparison import stock_stft_gap as f; print(f())"`"""
    import torch

    from kokoro_tvm.reference.pt_dynamic import stock_forward

    models = _stft_models(stfts)
    rows = []
    for text in texts:
        (chunk,) = prepare(text=text)
        style = load_voice(voice).style(len(chunk.phonemes))
        runs = {}
        for name, model in models.items():
            torch.manual_seed(seed)
            with torch.no_grad(), source_phases(model) as phases:
                runs[name] = (*stock_forward(model, chunk.padded_ids, style), torch.cat(phases, dim=-1).numpy())
        (reference, durations, reference_phase) = runs["stock"]
        for name in stfts:
            audio, other_durations, phase = runs[name]
            durations_equal = bool(np.array_equal(durations, other_durations))
            metrics = audio_metrics(reference, audio) if durations_equal else {}
            flips = int((np.abs(phase - reference_phase) > np.pi).sum()) if durations_equal else None
            rows.append(
                {
                    "text": text,
                    "stft": name,
                    "durations_equal": durations_equal,
                    **{k: metrics.get(k) for k in ("snr_db", "pesq_wb", "stoi")},
                    "phase_flips": flips,
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
