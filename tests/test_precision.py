"""The reduced-precision budget's emulations (kokoro_tvm.studies.precision): what each rounding keeps, that the
patches compute the rounded conv and come off again, and the multiply-add count. Tiny random modules, seconds."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from kokoro_tvm.studies import emulation


def _net():
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Conv1d(4, 6, 3, padding=2, dilation=2),
        torch.nn.ReLU(),
        torch.nn.ConvTranspose1d(6, 4, 4, stride=2, padding=1),
    ).eval()


def test_uint8_per_step_keeps_a_quiet_step_that_one_scale_per_tensor_loses():
    torch.manual_seed(0)
    x = torch.randn(1, 64, 5)
    x[..., 2] *= 1e-3  # a quiet stretch next to loud ones, as in speech
    step = emulation._uint8_per_step(x)
    # 255 levels between each step's own minimum and maximum: error at most half a level (plus float32 rounding)
    levels = (x.amax(dim=1) - x.amin(dim=1)) / 255
    assert ((step - x).abs() <= levels[:, None, :] * (0.5 + 1e-4)).all()
    assert torch.allclose(step.amax(dim=1), x.amax(dim=1), rtol=1e-6)  # each step's extremes are levels
    assert torch.allclose(step.amin(dim=1), x.amin(dim=1), rtol=1e-6)

    def quiet_error(rounded):
        return ((rounded - x)[..., 2].norm() / x[..., 2].norm()).item()

    # per step: the quiet step is held to its own 1/255 levels (relative error ~1e-3); one scale for the whole
    # tensor has levels a thousand times coarser than that step and rounds most of it to zero
    assert quiet_error(step) < 0.01
    assert quiet_error(emulation._int8_per_tensor(x)) > 0.5


def test_int8_weight_rounds_each_output_channel_on_its_own_scale():
    torch.manual_seed(1)
    w = torch.randn(6, 4, 3) * torch.tensor([1e-3, 1, 10, 1, 1, 100])[:, None, None]
    rounded = emulation._int8_weight(w)
    scale = w.abs().amax(dim=(1, 2)) / 127
    assert torch.allclose(rounded.abs().amax(dim=(1, 2)), w.abs().amax(dim=(1, 2)), rtol=1e-6)
    assert ((rounded - w).abs() <= scale[:, None, None] * (0.5 + 1e-4)).all()
    assert torch.allclose(rounded / scale[:, None, None], (rounded / scale[:, None, None]).round(), atol=1e-3)


@pytest.mark.parametrize("kind", sorted(emulation.EMULATIONS))
def test_emulated_precision_computes_the_rounded_conv_and_comes_off(kind):
    net = _net()
    x = torch.randn(1, 4, 11)
    with torch.no_grad():
        exact = net(x)
        rounded = emulation.EMULATIONS[kind]
        conv, relu, up = net
        h = relu(F.conv1d(*rounded(x, conv.weight, 0), conv.bias, 1, 2, 2))
        expected = F.conv_transpose1d(*rounded(h, up.weight, 1), up.bias, 2, 1)
        with emulation.emulated_precision(net, ["0", "2"], kind):
            got = net(x)
        after = net(x)
    assert torch.equal(got, expected)
    assert not torch.allclose(got, exact, rtol=0, atol=1e-6)  # really rounded
    assert torch.equal(after, exact)  # the class's own forward again


@pytest.mark.parametrize("out_dim", [0, 1])  # a conv's weight (out, in, k), a transposed conv's (in, out, k)
def test_int8_channel_is_an_integer_conv_with_one_scale_per_output_channel(out_dim):
    torch.manual_seed(2)
    x = torch.randn(1, 6, 40) * torch.tensor([0.01, 1, 5, 1, 1, 0.1])[None, :, None] + 0.3
    w = torch.randn(6, 5, 3) if out_dim == 1 else torch.randn(5, 6, 3)
    x_hat, w_hat = emulation.EMULATIONS["int8_channel"](x, w, out_dim)
    low = x.amin(dim=(0, 2)).clamp(max=0)
    scale = (x.amax(dim=(0, 2)).clamp(min=0) - low) / 255
    zero = (-low / scale).round()
    levels = x_hat / scale[None, :, None] + zero[None, :, None]  # q in 0..255: uint8 operands
    assert torch.allclose(levels, levels.round(), atol=1e-3)
    assert levels.round().min() >= 0 and levels.round().max() <= 255
    # zero padding is the zero point exactly: 0 is a level of every channel
    assert torch.equal(emulation.EMULATIONS["int8_channel"](torch.zeros(1, 6, 4), w, out_dim)[0], torch.zeros(1, 6, 4))
    # the folded weights, w * scale[c], are int8 with one scale per output channel
    shape = [-1 if d == 1 - out_dim else 1 for d in range(3)]
    folded = w_hat * scale.reshape(shape)
    per_out = folded.abs().amax(dim=tuple(d for d in range(3) if d != out_dim), keepdim=True) / 127
    integers = folded / per_out
    assert torch.allclose(integers, integers.round(), atol=1e-3) and integers.abs().max() <= 127 + 1e-3
    assert (x_hat - x).abs().max() <= scale.max() / 2 * (1 + 1e-4)  # half a level of the widest channel


def test_emulated_precision_refuses_an_unknown_kind_and_a_non_conv_restoring_what_it_patched():
    net = _net()
    x = torch.randn(1, 4, 11)
    with torch.no_grad():
        exact = net(x)
    with pytest.raises(ValueError, match="kind must be one of"):
        with emulation.emulated_precision(net, ["0"], "int4"):
            pass
    with pytest.raises(ValueError, match="ReLU, not a convolution"):
        with emulation.emulated_precision(net, ["0", "1"], "bf16"):
            pass
    with torch.no_grad():
        assert torch.equal(net(x), exact)


def test_mixed_precision_assigns_each_layer_one_kind_and_refuses_two():
    net = _net()
    with emulation.mixed_precision(net, {"int8_step": ["0"], "bf16": ["2"]}) as chosen:
        assert chosen == {"0": "int8_step", "2": "bf16"}
    with pytest.raises(ValueError, match="under both"):
        with emulation.mixed_precision(net, {"int8_step": ["0", "2"], "bf16": ["2"]}):
            pass


def test_counted_macs_is_multiply_adds_per_step_times_output_steps():
    net = _net()
    x = torch.randn(1, 4, 11)
    with torch.no_grad(), emulation.counted_macs(net) as macs:
        net(x)
        net(x)
    # conv: 6 x 4 x 3 per output step over 11 steps; transposed conv: each of its 11 input steps meets all
    # 6 x 4 x 4 weights once (22 output steps, two taps each)
    assert macs == {"0": 2 * 6 * 4 * 3 * 11, "2": 2 * 6 * 4 * 4 * 11}
    with torch.no_grad():
        net(x)
    assert macs["0"] == 2 * 6 * 4 * 3 * 11  # counting stops with the block


def test_emulated_bf16_linear_computes_on_rounded_operands_and_comes_off():
    torch.manual_seed(3)
    net = torch.nn.Sequential(torch.nn.Linear(8, 5), torch.nn.ReLU()).eval()
    x = torch.randn(3, 8)
    with torch.no_grad():
        exact = net(x)
        linear = net[0]
        expected = torch.relu(F.linear(x.bfloat16().float(), linear.weight.bfloat16().float(), linear.bias))
        with emulation.emulated_precision(net, ["0"], "bf16"):
            got = net(x)
        after = net(x)
    assert torch.equal(got, expected)
    assert not torch.equal(got, exact)
    assert torch.equal(after, exact)
    with pytest.raises(ValueError, match="not a convolution"):  # the int8 roundings take convolutions only
        with emulation.emulated_precision(net, ["0"], "int8_channel"):
            pass


def test_duration_budget_counts_every_token_and_leaves_the_model_as_it_was():
    import numpy as np

    from kokoro_tvm.errors import InputError
    from kokoro_tvm.frontend.text import prepare
    from kokoro_tvm.frontend.voices import load_voice
    from kokoro_tvm.reference.pt_dynamic import predict_durations
    from kokoro_tvm.studies.precision import duration_budget
    from kokoro_tvm.weights.resolve import kmodel_skeleton

    torch.manual_seed(0)
    model = kmodel_skeleton().eval()
    texts = ["Hello world.", "A rod is used to catch pink salmon."]
    chunks = [c for t in texts for c in prepare(text=t)]
    voice = load_voice()
    before = [predict_durations(model, c.padded_ids, voice.style(len(c.phonemes))) for c in chunks]
    record = duration_budget(model, "bert.", texts)
    assert record["layers"] == 8  # ALBERT's shared layer (q, k, v, dense, ffn, ffn_output), its input mapping, pooler
    assert record["chunks"] == len(chunks) and record["tokens"] == sum(len(c.padded_ids) for c in chunks)
    assert 0 <= record["tokens_changed"] <= record["tokens"] and record["chunks_changed"] <= record["chunks"]
    after = [predict_durations(model, c.padded_ids, voice.style(len(c.phonemes))) for c in chunks]
    assert all(np.array_equal(a, b) for a, b in zip(before, after, strict=True))
    with pytest.raises(InputError, match="no Linear layer"):
        duration_budget(model, "decoder.nothing.", texts)
