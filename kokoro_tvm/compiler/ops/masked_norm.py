"""Length-aware normalization and the padding-invariant AdaIN residual block, in plain torch ops.

Padding rule (DESIGN.md): a tensor [B, C, L] entering a conv, upsample or norm has a valid prefix of
`lengths[b]` frames and exact zeros after it, which is what the unpadded model sees past its end. Masked
norms take statistics over the valid prefix only; every block re-zeroes its output tail. Plain torch ops:
export keeps them as reductions and `where`, and the converter table already covers them in every dtype.
"""

from __future__ import annotations

import torch


def frame_mask(lengths: torch.Tensor, steps: int, dtype: torch.dtype) -> torch.Tensor:
    """[B, 1, steps] with 1 on valid frames and 0 on padding."""
    valid = torch.arange(steps, device=lengths.device)[None, :] < lengths[:, None]
    return valid.to(dtype)[:, None, :]


def zero_tail(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [B, C, L] with every frame at or past `lengths` set to exactly 0 (garbage there never leaks)."""
    return torch.where(frame_mask(lengths, x.shape[-1], x.dtype) > 0, x, torch.zeros_like(x))


def masked_instance_norm(norm: torch.nn.InstanceNorm1d, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """InstanceNorm1d (biased variance, eval mode) with mean and variance over each sample's valid frames."""
    mask = frame_mask(lengths, x.shape[-1], x.dtype)
    count = lengths.to(x.dtype)[:, None, None]

    def centered():  # the padded tail may hold anything: masked before and after centering
        return (x * mask - mean) * mask

    # `centered()` is written out twice on purpose: the exported graph then holds two copies of these cheap
    # elementwise ops, TVM fuses each into its consumer (the variance sum, the output), and neither x * mask
    # nor the centered signal is ever written to memory (they were: ~5 ms per norm at 128 x 57,632)
    mean = (x * mask).sum(dim=-1, keepdim=True) / count
    variance = (centered() * centered()).sum(dim=-1, keepdim=True) / count
    out = centered() * torch.rsqrt(variance + norm.eps)
    if norm.affine:
        out = out * norm.weight[None, :, None] + norm.bias[None, :, None]
    return out * mask


def masked_adain(adain, x: torch.Tensor, s: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """kokoro's AdaIN1d: (1 + gamma(s)) * norm(x) + beta(s), normalized over valid frames; zero tail."""
    h = adain.fc(s)[:, :, None]
    gamma, beta = torch.chunk(h, chunks=2, dim=1)
    return zero_tail((1 + gamma) * masked_instance_norm(adain.norm, x, lengths) + beta, lengths)


def masked_adain_resblock(block, x: torch.Tensor, s: torch.Tensor, lengths: torch.Tensor):
    """kokoro's AdainResBlk1d on a zero-tailed x [B, C, L]. Returns (out with a zero tail, output lengths).

    With upsampling the frame lengths double; the nearest upsample and the depthwise ConvTranspose see
    zeros past the end, exactly like the unpadded model.
    """
    up = block.upsample_type != "none"
    out_lengths = lengths * 2 if up else lengths
    residual = block.actv(masked_adain(block.norm1, x, s, lengths))
    residual = zero_tail(block.pool(residual), out_lengths)
    residual = block.conv1(block.dropout(residual))
    residual = block.actv(masked_adain(block.norm2, residual, s, out_lengths))
    residual = block.conv2(block.dropout(residual))
    shortcut = nearest_repeat(x, 2) if up else x
    if block.learned_sc:
        shortcut = block.conv1x1(shortcut)
    return zero_tail((residual + shortcut) * torch.rsqrt(torch.tensor(2)), out_lengths), out_lengths


def nearest_repeat(x: torch.Tensor, times: int) -> torch.Tensor:
    """`F.interpolate(x, scale_factor=times, mode="nearest")` on [B, C, L] as a broadcast and a reshape: the
    same values (every sample `times` times), and it exports with a symbolic L (the interpolation's float
    scale does not)."""
    b, c, steps = x.shape
    return x[..., None].expand(b, c, steps, times).reshape(b, c, times * steps)


def masked_adain_resblock1(block, x: torch.Tensor, s: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """kokoro's AdaINResBlock1 (generator: AdaIN, Snake, dilated convs) on a zero-tailed x; zero tail out.
    Snake(0) = 0, so a zero tail stays zero before each conv."""
    for c1, c2, n1, n2, a1, a2 in zip(
        block.convs1, block.convs2, block.adain1, block.adain2, block.alpha1, block.alpha2, strict=True
    ):
        xt = c1(_snake(masked_adain(n1, x, s, lengths), a1))
        xt = c2(_snake(masked_adain(n2, xt, s, lengths), a2))
        x = zero_tail(xt + x, lengths)
    return x


def _snake(x: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """kokoro's x + (1/a) sin(a x)^2, squaring by a multiply: torch's pow(., 2) is the same product, and TVM
    would otherwise call powf per element."""
    wave = torch.sin(alpha * x)
    return x + (1 / alpha) * (wave * wave)


def replicate_tail(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [B, L] with every sample at or past `lengths` replaced by the last valid one (what a replicate pad
    or a clamped interpolation index sees past the end of the unpadded signal)."""
    last = x.gather(-1, (lengths - 1)[:, None])  # [B, 1]
    valid = torch.arange(x.shape[-1], device=x.device)[None, :] < lengths[:, None]
    return torch.where(valid, x, last)


def reflect_tail(x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """x [B, L] with the samples at and past `lengths` mirrored about the last valid one (sample n + j is
    sample n - 2 - j: what a reflect pad sees past the end of the unpadded signal, for as many samples as the
    signal is long; further on, sample 0 again, a value no valid output reads)."""
    steps = torch.arange(x.shape[-1], device=x.device)[None, :]
    mirrored = (2 * lengths[:, None] - 2 - steps).clamp(min=0)
    index = torch.where(steps < lengths[:, None], steps, mirrored)
    return x.gather(-1, index)


# What the padded builds put past each signal's end for a centre pad of each mode (torch.nn.functional.pad's
# names), so the frames at its end see what the unpadded signal's pad gives them.
PAD_TAILS = {"replicate": replicate_tail, "reflect": reflect_tail}
