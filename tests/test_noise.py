import numpy as np
import pytest

from kokoro_tvm.reference.noise import N_HARMONICS, GivenNoise, SeededNoise, SineNoise, ZeroNoise, noise_source


def test_seeded_noise_is_reproducible_and_streams_differ():
    a = SeededNoise(3).sine_noise(1200, stream=0)
    b = SeededNoise(3).sine_noise(1200, stream=0)
    c = SeededNoise(3).sine_noise(1200, stream=1)
    assert np.array_equal(a.additive, b.additive) and np.array_equal(a.initial_phase, b.initial_phase)
    assert not np.array_equal(a.additive, c.additive)
    assert a.additive.shape == (1, 1200, N_HARMONICS)
    assert a.initial_phase[0, 0] == 0 and np.all((a.initial_phase >= 0) & (a.initial_phase < 1))


def test_zero_noise_is_zero():
    z = ZeroNoise().sine_noise(600, batch=2)
    assert z.additive.shape == (2, 600, N_HARMONICS) and not z.additive.any() and not z.initial_phase.any()


def test_given_noise_must_fit_the_utterance():
    given = GivenNoise(SineNoise(np.zeros((1, N_HARMONICS)), np.zeros((1, 600, N_HARMONICS))))
    assert given.sine_noise(600).n_samples == 600
    with pytest.raises(ValueError, match="1200"):
        given.sine_noise(1200)
    with pytest.raises(ValueError):
        SineNoise(np.zeros((1, 3)), np.zeros((1, 600, N_HARMONICS)))


def test_noise_source_parsing():
    assert isinstance(noise_source("zero"), ZeroNoise)
    assert noise_source("seeded:12").seed == 12
    assert noise_source(5).description == "seeded:5"
    for bad in ["random", "seeded:x", True, None]:
        with pytest.raises(ValueError):
            noise_source(bad)


def test_per_second_snr_follows_an_error_that_grows_along_the_audio():
    """The study behind bench's seeded quality noise (studies/noise_and_fp32.py) reads error growth per second: an
    error ten times larger in the second second is 20 dB lower there, and a partial last second is left out."""
    from kokoro_tvm.config import SAMPLE_RATE
    from kokoro_tvm.studies.noise_and_fp32 import per_second_snr

    rng = np.random.default_rng(0)
    reference = rng.standard_normal(SAMPLE_RATE * 2 + SAMPLE_RATE // 2)
    error = 1e-3 * rng.standard_normal(reference.shape)
    error[SAMPLE_RATE:] *= 10.0
    first, second = per_second_snr(reference, reference + error)
    assert abs(first - 60.0) < 0.5 and abs(second - 40.0) < 0.5  # 1e-3 and 1e-2 relative amplitude; 0.5 dB: sampling


@pytest.mark.parametrize("noise", [-1, "seeded:-2", SeededNoise(-3)])
def test_a_negative_seed_is_refused_in_one_line_before_any_model_loads(noise, monkeypatch):
    import kokoro_tvm.synthesis as synthesis
    from kokoro_tvm.errors import InputError

    def no_backend(*args, **kwargs):
        raise AssertionError("a backend was made before the noise was checked")

    monkeypatch.setattr(synthesis, "make_backend", no_backend)  # the name synthesize calls it by
    with pytest.raises(InputError, match="noise seed must be a non-negative integer"):
        synthesis.synthesize("Hello.", noise=noise)
