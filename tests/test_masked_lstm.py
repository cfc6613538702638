"""The length-aware LSTM: custom op and TVM kernel against torch.nn.LSTM with packing."""

import numpy as np
import pytest
import torch

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.compiler.converters import to_relax
from kokoro_tvm.compiler.ops.lstm import masked_lstm

# fp32: the TVM kernel and torch accumulate 4H dot products in different orders; 1e-5 absolute on
# O(1) LSTM outputs is ~100 float32 ulps. fp64: the same reasoning at double precision.
ATOL = {torch.float32: 1e-5, torch.float64: 1e-12}


class OneLSTM(torch.nn.Module):
    def __init__(self, features, hidden, dtype):
        super().__init__()
        self.lstm = torch.nn.LSTM(features, hidden, 1, batch_first=True, bidirectional=True, dtype=dtype)

    def forward(self, x, lengths):
        return masked_lstm(x, lengths, self.lstm)


def packed_reference(lstm, x, lengths):
    """Each sample alone at its own length, zero-padded: what pack_padded_sequence means."""
    outs = []
    for b, n in enumerate(lengths.tolist()):
        y, _ = lstm(x[b : b + 1, :n])
        outs.append(torch.nn.functional.pad(y, (0, 0, 0, x.shape[1] - n)))
    return torch.cat(outs)


def build(module, x, lengths):
    ep = torch.export.export(module, (x, lengths))
    runner = compile_and_load(to_relax(ep), stock=True)
    return lambda xs, ls: runner(xs.numpy(), ls.numpy())[0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("batch", [1, 2, 4])
def test_tvm_kernel_matches_packed_lstm(dtype, batch):
    torch.manual_seed(batch)
    steps = 9
    module = OneLSTM(6, 5, dtype).eval()
    x = torch.randn(batch, steps, 6, dtype=dtype)
    run = build(module, x, torch.full((batch,), steps))
    for trial in range(3):
        lengths = torch.randint(1, steps + 1, (batch,))
        lengths[trial % batch] = [1, steps, 4][trial]  # always include the extremes 1 and T
        garbage = x.clone()
        for b, n in enumerate(lengths.tolist()):
            garbage[b, n:] = 1e3 * torch.randn(steps - n, 6, dtype=dtype)  # padded input must not matter
        with torch.no_grad():
            expected = packed_reference(module.lstm, x, lengths)
            eager = module(garbage, lengths)
        got = run(garbage, lengths)
        np.testing.assert_allclose(eager.numpy(), expected.numpy(), rtol=0, atol=ATOL[dtype])
        np.testing.assert_allclose(got, expected.numpy(), rtol=0, atol=ATOL[dtype])
        for b, n in enumerate(lengths.tolist()):
            assert not got[b, n:].any(), "outputs past the length must be exactly 0"


def test_relax_size_does_not_grow_with_steps():
    module = OneLSTM(4, 3, torch.float32).eval()
    sizes = []
    for steps in (8, 512):
        x = torch.randn(1, steps, 4)
        ep = torch.export.export(module, (x, torch.tensor([steps])))
        sizes.append(len(to_relax(ep).script().splitlines()))
    assert sizes[0] == sizes[1]
