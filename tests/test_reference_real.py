"""Real-weights tier: pt.dynamic with explicit noise against stock kokoro, and the stages' consistency."""

import copy

import numpy as np
import pytest
import torch

from kokoro_tvm import marks
from kokoro_tvm.config import SAMPLES_PER_FRAME
from kokoro_tvm.evaluation.metrics import snr_db
from kokoro_tvm.frontend.text import prepare
from kokoro_tvm.reference.noise import GivenNoise, SeededNoise, SineNoise, ZeroNoise
from kokoro_tvm.reference.pt_dynamic import run_stages, stock_forward
from kokoro_tvm.studies.audio_comparison import source_phases
from kokoro_tvm.weights.resolve import load_kmodel

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def utterance(default_voice):
    chunk = prepare(text="One two three four five.")[0]
    return chunk.padded_ids, default_voice.style(len(chunk.phonemes))


def test_same_noise_gives_identical_audio(kmodel, utterance):
    model, _ = kmodel
    a = run_stages(model, *utterance, noise=SeededNoise(7))
    b = run_stages(model, *utterance, noise=SeededNoise(7))
    c = run_stages(model, *utterance, noise=SeededNoise(8))
    assert np.array_equal(a.audio, b.audio)
    assert not np.array_equal(a.audio, c.audio)
    assert np.array_equal(a.durations, c.durations)  # noise enters only the decoder


def test_given_noise_reproduces_stock_kokoro_bit_for_bit(kmodel, utterance):
    """Draw what stock SineGen draws (torch.rand phase, then randn_like on a [B, 9, L]-ordered tensor)."""
    model, _ = kmodel
    torch.manual_seed(1234)
    stock_audio, stock_durations = stock_forward(model, *utterance)
    torch.manual_seed(1234)
    phase = torch.rand(1, 9)
    phase[:, 0] = 0
    additive = torch.empty(1, 9, stock_audio.shape[0]).transpose(1, 2).normal_()
    stages = run_stages(model, *utterance, noise=GivenNoise(SineNoise(phase.numpy(), additive.numpy())))
    assert np.array_equal(stages.durations, stock_durations)
    assert np.array_equal(stages.audio, stock_audio)


def test_stage_shapes_are_consistent(kmodel, utterance):
    model, _ = kmodel
    s = run_stages(model, *utterance, noise=ZeroNoise())
    n_tokens, n_frames = len(utterance[0]), int(s.durations.sum())
    assert s.d_en.shape == (1, 512, n_tokens) and s.t_en.shape == (1, 512, n_tokens)
    assert s.duration_logits.shape == (1, n_tokens, 50) and s.d.shape == (1, n_tokens, 640)
    assert s.alignment.shape == (n_frames,) and np.array_equal(np.bincount(s.alignment), s.durations)
    assert s.en.shape == (1, 640, n_frames) and s.asr.shape == (1, 512, n_frames)
    assert s.F0.shape == (1, 2 * n_frames) and s.N.shape == (1, 2 * n_frames)
    assert s.audio.shape == (n_frames * SAMPLES_PER_FRAME,)
    np.testing.assert_array_equal(s.asr[0], s.t_en[0][:, s.alignment])  # the one-hot matmul is a gather
    assert s.noise == "zero"


def test_float64_reference_runs_in_float64_throughout(kmodel, utterance):
    model, _ = kmodel
    model64 = copy.deepcopy(model).double()
    s64 = run_stages(model64, *utterance, noise=SeededNoise(0))
    s32 = run_stages(model, *utterance, noise=SeededNoise(0))
    assert all(a.dtype in (np.float64, np.int64) for a in s64.arrays().values())
    assert np.array_equal(s64.durations, s32.durations)
    # encoder stages are well conditioned: fp32 within 1e-4 relative L2 of fp64 (ALBERT's 12 layers in fp32)
    rel = np.linalg.norm(s32.d_en - s64.d_en) / np.linalg.norm(s64.d_en)
    assert rel < 1e-4
    assert torch.get_default_dtype() == torch.float32  # restored after the float64 run


@pytest.fixture(scope="module")
def stock_run(utterance):
    """Stock kokoro's default model (`disable_complex=False`: torch.stft / torch.istft), seeded: its audio, durations
    and the phase of SineGen's source spectrum."""
    stock, _ = load_kmodel(disable_complex=False)
    torch.manual_seed(0)
    with torch.no_grad(), source_phases(stock) as phases:
        audio, durations = stock_forward(stock, *utterance)
    return audio, durations, torch.cat(phases, dim=-1)


def test_the_model_we_compile_is_stock_kokoros_default(kmodel, utterance, stock_run):
    """What we load and compile (CustomSTFT, its bases and centre pad fixed by weights.stft) against stock kokoro's
    default model on the same weights and seed."""
    model, _ = kmodel
    stock_audio, stock_durations, _ = stock_run
    torch.manual_seed(0)
    with torch.no_grad():
        audio, durations = stock_forward(model, *utterance)
    assert np.array_equal(durations, stock_durations)
    # the bar's reason: kokoro_tvm.marks (a source phase on the other side of +-pi from stock's costs 63-86 dB)
    assert snr_db(stock_audio, audio) >= marks.STOCK_STFT_SNR_DB


def test_with_stocks_phase_branch_the_model_we_compile_is_stock_to_float32_rounding(kmodel, utterance, stock_run):
    """The same, with each phase of our source spectrum moved by 2 pi onto stock's side of +-pi (where float32
    rounding put an imaginary part near 0 on the other side): then only rounding differs. This sentence has three
    such phases; kokoro's replicate centre pad differs in what it computes and fails here (77.9 dB)."""
    model, _ = kmodel
    stock_audio, _, stock_phase = stock_run
    stft = model.decoder.generator.stft
    own = stft.transform

    def on_stocks_branch(waveform):
        magnitude, phase = own(waveform)
        return magnitude, phase + 2 * np.pi * torch.round((stock_phase - phase) / (2 * np.pi))

    stft.transform = on_stocks_branch
    try:
        torch.manual_seed(0)
        with torch.no_grad():
            audio, _ = stock_forward(model, *utterance)
    finally:
        del stft.transform
    assert snr_db(stock_audio, audio) >= marks.STOCK_STFT_SAME_PHASE_SNR_DB
