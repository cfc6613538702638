"""Our fixed CustomSTFT bases (kokoro_tvm.weights.stft) against torch.stft / torch.istft, what stock kokoro runs."""

import numpy as np
import pytest
import torch
from kokoro.custom_stft import CustomSTFT

from kokoro_tvm.weights.stft import bases_digest, match_stock_stft, overlap_envelope

N_FFT, HOP = 20, 5  # Kokoro-82M's generator (gen_istft_n_fft, gen_istft_hop_size)


def _stft(fixed: bool) -> CustomSTFT:
    stft = CustomSTFT(filter_length=N_FFT, hop_length=HOP, win_length=N_FFT)
    if fixed:
        match_stock_stft(stft)
    return stft


def _random_spectrum(frames: int = 40):
    g = torch.Generator().manual_seed(0)
    magnitude = torch.rand(2, N_FFT // 2 + 1, frames, generator=g)
    phase = (torch.rand(2, N_FFT // 2 + 1, frames, generator=g) * 2 - 1) * np.pi
    return magnitude, phase


def _stock_inverse(magnitude, phase):
    return torch.istft(magnitude * torch.exp(1j * phase), N_FFT, HOP, N_FFT, window=torch.hann_window(N_FFT))


def test_fixed_inverse_is_torch_istft_away_from_the_ends():
    """Any spectrum, not only one an STFT made. torch.istft divides each sample by the squared window's overlap-add
    it actually got; constant bases divide by the interior's 1.5, so the first and last HOP samples (where fewer
    frames overlap) are the one place they differ."""
    magnitude, phase = _random_spectrum()
    ours = _stft(fixed=True).inverse(magnitude, phase).reshape(2, -1)
    stock = _stock_inverse(magnitude, phase)
    assert ours.shape == stock.shape
    # float32 rounding of sums of 20 terms of size ~0.1-1 (6e-8 measured)
    assert torch.allclose(ours[:, HOP:-HOP], stock[:, HOP:-HOP], rtol=0, atol=1e-6)
    assert (ours[:, :HOP] - stock[:, :HOP]).abs().max() > 1e-4  # the ends differ, as said above


def test_kokoros_own_inverse_is_not_torch_istft():
    """Why the fix exists: kokoro's bases count bins 1..N/2-1 once and skip the overlap-add's division, so they
    are off by a quarter of the signal even away from the ends (if kokoro fixes its CustomSTFT, this fails and
    weights.stft should go)."""
    magnitude, phase = _random_spectrum()
    theirs = _stft(fixed=False).inverse(magnitude, phase).reshape(2, -1)[:, HOP:-HOP]
    stock = _stock_inverse(magnitude, phase)[:, HOP:-HOP]
    assert torch.linalg.norm(theirs - stock) / torch.linalg.norm(stock) > 0.1


def _spectra(stft, x):
    """The complex spectrum `stft` makes of x, beside torch.stft's (center=True: reflect pad), as stock kokoro's
    TorchSTFT calls it. Complex, so a phase at +pi in one and -pi in the other (float32 rounding of an imaginary
    part near 0) is the same value."""
    magnitude, phase = stft.transform(x)
    stock = torch.stft(x, N_FFT, HOP, N_FFT, window=torch.hann_window(N_FFT), return_complex=True)
    return magnitude * torch.exp(1j * phase), stock


def test_fixed_forward_is_torch_stft_to_the_last_frame():
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2))
    ours, stock = _spectra(_stft(fixed=True), x)
    assert ours.shape == stock.shape
    # float32 sums of 20 products of size ~1 (2e-6 measured)
    assert (ours - stock).abs().max() < 1e-5


def test_kokoros_own_centre_pad_differs_in_the_first_and_last_two_frames_only():
    """Why the fix sets the pad: kokoro's replicate pad gives the two frames at each end other samples than
    torch.stft's reflect pad, and no other frame (if kokoro switches to reflect, this fails)."""
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(2))
    stft = _stft(fixed=True)
    stft.pad_mode = _stft(fixed=False).pad_mode  # kokoro's: "replicate"
    ours, stock = _spectra(stft, x)
    error = (ours - stock).abs().amax(dim=(0, 1))  # per frame
    assert error[2:-2].max() < 1e-5 and error[[0, 1, -2, -1]].min() > 1e-2


def test_fixed_stft_round_trips_a_signal():
    x = torch.randn(3, 1000, generator=torch.Generator().manual_seed(1))
    stft = _stft(fixed=True)
    magnitude, phase = stft.transform(x)
    y = stft.inverse(magnitude, phase).reshape(3, -1)
    # float32: magnitude/phase round trip of values ~1 (measured 1e-6 at most)
    assert torch.allclose(y[:, HOP:-HOP], x[:, HOP : y.shape[1] - HOP], rtol=0, atol=1e-5)


def test_fixing_twice_changes_nothing_and_the_digest_follows_the_bases_and_the_pad():
    once = _stft(fixed=True)
    twice = _stft(fixed=True)
    match_stock_stft(twice)
    for name, buffer in once.state_dict().items():
        assert torch.equal(buffer, twice.state_dict()[name]), name
    assert bases_digest(once) == bases_digest(twice) != bases_digest(_stft(fixed=False))
    replicated = _stft(fixed=True)
    replicated.pad_mode = "replicate"  # an export keyed by the digest must not be reused across the pad either
    assert bases_digest(replicated) != bases_digest(once)
    assert once.weight_backward_imag[0].abs().max() == 0 and once.weight_forward_imag[-1].abs().max() == 0


def test_a_window_without_a_constant_overlap_add_is_refused():
    hann = torch.hann_window(N_FFT, periodic=True).numpy()
    assert overlap_envelope(hann, HOP) == pytest.approx(1.5, rel=1e-6)
    with pytest.raises(ValueError, match="not constant"):
        overlap_envelope(hann, N_FFT // 2)  # sin^4 + cos^4 varies
    with pytest.raises(ValueError, match="must divide"):
        overlap_envelope(hann, 3)
