"""Length-aware bidirectional LSTM: a torch custom op (so export keeps it whole) and its PyTorch twin.

Semantics are exactly `pack_padded_sequence` -> `nn.LSTM(bidirectional=True)` -> `pad_packed_sequence`: the
forward direction runs over each sample's first `length` steps, the reverse direction starts at each sample's
own last valid step, and outputs past `length` are 0. The TVM lowering lives in `kokoro_tvm.compiler.ops.lstm_tir`.

The op is registered on first use (`masked_lstm_op()`), never at import.
"""

from __future__ import annotations

import functools

import torch

OP_NAMESPACE = "kokoro_tvm"
OP_NAME = "masked_lstm"
# The exported graph names the node target "masked_lstm.default"; the converter table keys on that.
ATEN_TARGET_NAME = f"{OP_NAME}.default"


def lstm_weights(lstm: torch.nn.LSTM) -> list[torch.Tensor]:
    """The 8 weight tensors of a 1-layer bidirectional nn.LSTM, in the op's argument order."""
    if not (lstm.bidirectional and lstm.num_layers == 1 and lstm.bias and lstm.batch_first):
        raise ValueError("masked_lstm covers 1-layer, bidirectional, batch-first LSTMs with biases")
    return [
        getattr(lstm, f"{kind}_l0{suffix}")
        for suffix in ("", "_reverse")
        for kind in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
    ]


def masked_lstm_reference(x: torch.Tensor, lengths: torch.Tensor, *weights: torch.Tensor) -> torch.Tensor:
    """x [B, T, I], lengths [B] int64 (1 <= length <= T) -> [B, T, 2H], via torch's packed LSTM."""
    batch, steps, features = x.shape
    hidden = weights[1].shape[1]
    lstm = torch.nn.LSTM(features, hidden, 1, batch_first=True, bidirectional=True, dtype=x.dtype)
    with torch.no_grad():
        for param, value in zip(lstm_weights(lstm), weights, strict=True):
            param.copy_(value)
    packed = torch.nn.utils.rnn.pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    out, _ = lstm(packed)
    out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=steps)
    return out.contiguous()


@functools.cache
def masked_lstm_op():
    """Register (once) and return `torch.ops.kokoro_tvm.masked_lstm`."""

    @torch.library.custom_op(f"{OP_NAMESPACE}::{OP_NAME}", mutates_args=())
    def masked_lstm(
        x: torch.Tensor,
        lengths: torch.Tensor,
        w_ih: torch.Tensor,
        w_hh: torch.Tensor,
        b_ih: torch.Tensor,
        b_hh: torch.Tensor,
        w_ih_reverse: torch.Tensor,
        w_hh_reverse: torch.Tensor,
        b_ih_reverse: torch.Tensor,
        b_hh_reverse: torch.Tensor,
    ) -> torch.Tensor:
        weights = (w_ih, w_hh, b_ih, b_hh, w_ih_reverse, w_hh_reverse, b_ih_reverse, b_hh_reverse)
        with torch.no_grad():
            return masked_lstm_reference(x, lengths, *weights)

    @masked_lstm.register_fake
    def _(x, lengths, w_ih, w_hh, *rest):
        return x.new_empty((x.shape[0], x.shape[1], 2 * w_hh.shape[1]))

    return torch.ops.kokoro_tvm.masked_lstm.default


def masked_lstm(x: torch.Tensor, lengths: torch.Tensor, lstm: torch.nn.LSTM) -> torch.Tensor:
    """Run `lstm` (bidirectional, batch-first) over the valid prefix of each sample; zeros past it."""
    return masked_lstm_op()(x, lengths, *lstm_weights(lstm))
