"""Audio-comparison metrics (unit tier) on signals whose answers are known by construction."""

import math

import numpy as np
import pytest

from kokoro_tvm.evaluation.metrics import (
    LOG_FLOOR,
    PESQ_WINDOW_SECONDS,
    correlation,
    f0_metrics,
    f0_track,
    log_mel,
    log_mel_l1,
    mel_cepstral_distortion,
    mel_filterbank,
    pesq_wb,
    pesq_windows,
    snr_db,
    stoi,
    windowed_snr_db,
)

RATE = 24_000


def _gliding_tone(seconds=3.0, silence_s=0.5):
    """A two-harmonic tone whose f0 glides 120..180 Hz, after `silence_s` of silence; and the true f0."""
    t = np.arange(int(RATE * seconds)) / RATE
    f0 = 150 + 30 * np.sin(2 * np.pi * 0.5 * t)
    phase = 2 * np.pi * np.cumsum(f0) / RATE
    x = 0.5 * np.sin(phase) + 0.2 * np.sin(2 * phase)
    x[t < silence_s] = 0
    return x, t, f0


def test_yin_follows_a_gliding_tone_and_leaves_silence_unvoiced():
    x, t, f0 = _gliding_tone()
    estimate, voiced = f0_track(x, RATE)
    centers = np.arange(len(estimate)) * 0.01 + 0.02  # frame centres (40 ms frames, 10 ms hop)
    truth = np.interp(centers, t, f0)
    assert not voiced[centers < 0.48].any()  # the silent start
    assert voiced[centers > 0.55].all()
    # within 1 Hz: the parabola-refined lag resolves ~0.1 sample at 24 kHz, and f0 moves < 1 Hz per frame
    assert np.abs(estimate[voiced] - truth[voiced]).max() < 1.0


def test_f0_metrics_see_a_transposition_in_cents():
    x, _, _ = _gliding_tone()
    t = np.arange(len(x)) / RATE
    f0 = 150 + 30 * np.sin(2 * np.pi * 0.5 * t)
    up = np.sin(2 * np.pi * np.cumsum(f0 * 2 ** (100 / 1200)) / RATE) * 0.5  # 100 cents higher
    up[t < 0.5] = 0
    record = f0_metrics(x, up, RATE)
    assert record["voicing_agreement"] > 0.97
    assert record["f0_rmse_cents"] == pytest.approx(100, abs=5)  # YIN's ~1 Hz error is ~12 cents at worst


def test_identical_signals_have_zero_distance():
    x, _, _ = _gliding_tone()
    assert log_mel_l1(x, x, RATE) == 0 and mel_cepstral_distortion(x, x, RATE) == 0
    assert correlation(x, x) == pytest.approx(1.0)


def test_a_gain_change_moves_log_mel_but_not_the_cepstra_past_c0():
    # broadband noise: every mel band above the log floor in every frame, else the floor breaks the pure offset
    x = np.random.default_rng(0).standard_normal(RATE) * 30
    gain = 0.5
    assert log_mel(gain * x, RATE).min() > math.log(LOG_FLOOR)  # the precondition: no band at the floor
    # log power shifts by 2 ln(gain) in every mel band; that constant goes entirely to c0, which MCD excludes
    assert log_mel_l1(x, gain * x, RATE) == pytest.approx(abs(2 * math.log(gain)), rel=1e-6)
    assert mel_cepstral_distortion(x, gain * x, RATE) < 1e-9


def test_mel_filters_cover_the_spectrum_once():
    bank = mel_filterbank(RATE)
    assert bank.shape == (80, 513) and bank.min() >= 0
    covered = bank.sum(axis=0)[5:-5]  # between the first and last filter centres, triangles sum to 1
    inner = covered[covered > 0]
    assert np.allclose(inner[len(inner) // 10 : -len(inner) // 10], 1.0, atol=1e-9)


def test_correlation_refuses_different_lengths():
    with pytest.raises(ValueError, match="shapes differ"):
        correlation(np.zeros(3), np.zeros(4))


@pytest.mark.parametrize(
    "text, expected",
    [
        (" 1, 2, 3, 4, 5.", "one two three four five"),  # how Whisper writes spoken numbers
        ("Sold 51 bonds at 105", "sold fifty one bonds at one hundred five"),
        ("In 2024", "in two zero two four"),  # past 999: digit by digit
        ("The girl's booth!", "the girl's booth"),
    ],
)
def test_transcripts_and_references_compare_as_spoken_words(text, expected):
    from kokoro_tvm.evaluation.asr import words

    assert " ".join(words(text)) == expected


def test_pesq_scores_audio_past_the_c_limit_by_its_worst_window():
    # 130 s: past the length at which the pesq C code crashes the process (see PESQ_WINDOW_SECONDS). Noise is
    # added to the last window only, so the score must be that window's and below the clean first window's.
    x, t, _ = _gliding_tone(seconds=130.0, silence_s=0.0)
    x = x * np.abs(np.sin(2 * np.pi * 2 * t))  # syllable-like bursts, so PESQ finds speech activity
    windows = pesq_windows(len(x), RATE)
    assert len(windows) == 3 and windows[0].start == 0 and windows[-1].stop == len(x)
    assert all(a.stop == b.start for a, b in zip(windows[:-1], windows[1:], strict=True))
    assert max(w.stop - w.start for w in windows) <= PESQ_WINDOW_SECONDS * RATE
    noisy = x.copy()
    noisy[windows[-1]] += 0.05 * np.random.default_rng(0).standard_normal(windows[-1].stop - windows[-1].start)
    first, last = (pesq_wb(x[w], noisy[w], RATE) for w in (windows[0], windows[-1]))
    assert last < first - 0.5  # clean scores the ceiling (about 4.6); this much noise costs well over half a point
    assert pesq_wb(x, noisy, RATE) == last


def test_a_backend_with_non_finite_audio_is_counted_not_scored():
    """ONNX Runtime's int8 export gives NaN audio on one of notebook 07's sentences with af_heart: the summary
    counts it and scores the rest, instead of PESQ failing on NaN."""
    from kokoro_tvm.evaluation.results_table import summarize

    rows = [
        {"backend": "peer", "samples_vs_reference": 0, "finite": True, "wer": 0.1, "pesq_wb": 4.0},
        {"backend": "peer", "samples_vs_reference": 0, "finite": False, "wer": None},
        {"backend": "peer", "samples_vs_reference": 0, "finite": True, "wer": 0.3, "pesq_wb": 3.0},
    ]
    (entry,) = summarize(rows)
    assert entry["non_finite"] == 1 and entry["sentences"] == 3
    assert entry["wer_mean"] == pytest.approx(0.2) and entry["pesq_wb"] == pytest.approx(3.5)
    assert entry["pesq_wb_worst"] == 3.0 and entry["stoi_worst"] is None  # the worst sentence, where computable


def test_windowed_snr_tells_an_even_error_from_a_local_burst():
    x, _, _ = _gliding_tone(seconds=2.0, silence_s=0.0)
    rng = np.random.default_rng(0)
    even = x + 10 ** (-30 / 20) * np.sqrt(np.mean(x**2)) * rng.standard_normal(x.size)  # 30 dB below, everywhere
    burst = x.copy()
    burst[24_000:24_480] += 0.3  # one 20 ms window only
    snr, level = windowed_snr_db(x, even, 480)
    assert snr.shape == level.shape == (100,)
    # 480 samples of Gaussian noise: each window's error energy within about +-1.5 dB of its mean (3 sigma: 0.8 dB)
    assert np.all(np.abs(snr - 30.0) < 1.5) and abs(np.median(snr) - snr_db(x, even)) < 0.5
    snr, _ = windowed_snr_db(x, burst, 480)
    assert np.isinf(np.delete(snr, 50)).all() and snr[50] < 10  # the burst's window alone, nowhere else
    silent = np.zeros(960)
    snr, level = windowed_snr_db(silent, silent, 480)
    assert np.isinf(snr).all() and np.isneginf(level).all()
    with pytest.raises(ValueError, match="window"):
        windowed_snr_db(x, x, 0)
    with pytest.raises(ValueError, match="1-D"):
        windowed_snr_db(x, x[:-1], 480)


def test_stoi_of_too_little_speech_is_none_not_pystois_stand_in(recwarn):
    """`kokoro-tvm compare --text Hi` reported STOI 1e-05 (pystoi's stand-in below 30 frames of speech) beside a
    PESQ-WB of 4.61: a score that reads as unintelligible audio. Too short is None (summaries skip it), silently."""
    rng = np.random.default_rng(0)
    t = np.arange(int(RATE * 1.0)) / RATE
    speech = rng.standard_normal(t.size) * (1 + np.sin(2 * np.pi * 4 * t))  # noise at a 4 Hz syllable rate
    noisy = speech + 3 * rng.standard_normal(t.size)
    short = slice(0, int(0.3 * RATE))  # 0.3 s: fewer than pystoi's 30 frames of 12.8 ms
    assert stoi(speech[short], speech[short]) is None and stoi(speech[short], noisy[short]) is None
    assert not [w for w in recwarn if "STFT frames" in str(w.message)]
    # a second of it is scored: itself 1 (to rounding), under noise at 3x its level far below the 0.99 bars
    assert stoi(speech, speech) == pytest.approx(1.0, abs=1e-9)
    assert 0.0 < stoi(speech, noisy) < 0.8
