"""kokoro's conv-based CustomSTFT made to compute what stock kokoro computes (its default `TorchSTFT`:
`torch.stft` and `torch.istft`), by fixing its constant bases and its centre pad in place. Every model we load
gets it (`weights.resolve.load_kmodel`), so pt.dynamic, the compiled builds and our exports all compute stock
kokoro's STFT and iSTFT. This file is a build source (kokoro_tvm.artifacts.BUILD_SOURCES): both are in every build.

Three fixes:
- Rows that are exactly 0 in exact arithmetic (sin(pi k n / N) at k = 0 and k = N/2) are zeroed. kokoro computes
  them as about 1e-15: the Nyquist bin's imaginary part is then a sum of tiny terms whose sign depends on the
  summation order, so its phase flips between +pi and -pi from one backend (or precision) to the next.
- The inverse is made the inverse. kokoro's inverse bases are w(n) cos(2 pi k n / N) / N for every bin (its own
  comment: "approximate reconstruction"). A real inverse DFT counts bins 1 .. N/2 - 1 twice (each also stands
  for its conjugate), and `torch.istft` divides the overlap-add by the squared window's overlap-add, which for
  kokoro's periodic Hann window (N = 20, hop 5) is 1.5 at every sample but the first and last hop. Without the
  fix kokoro's decoder plays bins 1 .. N/2 - 1 at 2 / 1.5 = 2.5 dB below stock and DC and Nyquist 3.5 dB above:
  5.3 dB audio SNR against stock kokoro on "Hello world." (NOTES/reference_and_noise.md).
- The centre pad reflects. kokoro pads the waveform by n_fft / 2 at each end with `replicate` (the end sample
  repeated); `torch.stft(center=True)` reflects it (`x[1], x[2], ...` mirrored about the end sample). Only the
  first and last two frames of SineGen's source spectrum see it, yet it leaves the audio 68.7 dB from stock's on
  "Hello world." with the two fixes above, 114.5 dB with this one as well.
"""

from __future__ import annotations

import hashlib

import numpy as np
import torch


def inverse_bin_scale(n_fft: int) -> np.ndarray:
    """What each bin of a one-sided spectrum counts for in a real inverse DFT: 1 for DC (and Nyquist where n_fft
    is even), 2 for the bins between."""
    scale = np.full(n_fft // 2 + 1, 2.0)
    scale[0] = 1.0
    if n_fft % 2 == 0:
        scale[-1] = 1.0
    return scale


def overlap_envelope(window: np.ndarray, hop: int) -> float:
    """The squared window's overlap-add at hop `hop` away from the ends, where it must be one constant (else no
    constant bases make the overlap-add an inverse)."""
    n = window.shape[0]
    if n % hop:
        raise ValueError(f"window of {n} samples at hop {hop}: the hop must divide the window")
    envelope = (window.astype(np.float64) ** 2).reshape(n // hop, hop).sum(axis=0)
    # kokoro's window is float32: its phases' sums agree to float32 rounding (1.5 within 1e-7 for kokoro's)
    if not np.allclose(envelope, envelope.mean(), rtol=1e-6, atol=0.0):
        raise ValueError(f"the squared window's overlap-add at hop {hop} is not constant: {envelope}")
    return float(envelope.mean())


# torch.stft's centre pad (center=True, its default pad_mode)
STOCK_PAD_MODE = "reflect"


def match_stock_stft(stft) -> None:
    """Fix kokoro's CustomSTFT `stft` in place (module docstring): zero the exactly-zero rows, recompute the
    inverse bases from their definition in float64 (so a second call gives the same bases, not a scaled copy),
    and make its centre pad torch.stft's."""
    stft.pad_mode = STOCK_PAD_MODE
    n_fft, hop = stft.n_fft, stft.hop_length
    window = stft.window.detach().cpu().double().numpy()
    scale = inverse_bin_scale(n_fft) / (n_fft * overlap_envelope(window, hop))
    angle = 2 * np.pi * np.outer(np.arange(n_fft // 2 + 1), np.arange(n_fft)) / n_fft  # [bins, n_fft]
    backward = {
        "weight_backward_real": np.cos(angle) * window * scale[:, None],
        "weight_backward_imag": np.sin(angle) * window * scale[:, None],
    }
    with torch.no_grad():
        for name, basis in backward.items():
            target = getattr(stft, name)  # [n_fft / 2 + 1, 1, n_fft]
            target.copy_(torch.from_numpy(basis).to(target.dtype).reshape(target.shape))
        for name in ("weight_forward_imag", "weight_backward_imag"):
            basis = getattr(stft, name)
            basis[0].zero_()
            if n_fft % 2 == 0:
                basis[-1].zero_()


def bases_digest(stft) -> str:
    """sha256 (first 12 hex digits) of the STFT's bases and centre pad: what a file made from a model (an export)
    must be keyed by beside the weights' fingerprint, which covers the weights only."""
    digest = hashlib.sha256(f"pad_mode={stft.pad_mode}".encode())
    for name, buffer in sorted(stft.state_dict().items()):
        digest.update(name.encode() + b"\0" + buffer.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()[:12]
