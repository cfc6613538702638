"""Padding invariance (unit tier, random weights, float64): a bucket gives the unpadded model's output on the
valid prefix, and garbage in the padded tail of every input changes nothing there."""

import numpy as np
import pytest
import torch
from random_builds import RANDOM_FINGERPRINT, VALID_FRAMES, VALID_TOKENS, bucket

from kokoro_tvm.compiler.build import BuildSpec, build
from kokoro_tvm.compiler.export import component_module
from kokoro_tvm.compiler.ops.masked_norm import PAD_TAILS, masked_instance_norm
from kokoro_tvm.components import NAMES
from kokoro_tvm.reference.pt_dynamic import default_dtype, explicit_sine_noise_tensors
from kokoro_tvm.runtime.vm import ComponentRunner

F64 = torch.float64
T, F = VALID_TOKENS, VALID_FRAMES
BUCKETS = {name: bucket(name) for name in NAMES}  # shared with tests/test_compile.py: built once per session
# float64, unpadded kokoro vs our masked graph: only the summation order of norms and convs differs
TOL = 1e-11


@pytest.fixture(scope="module")
def model(random_model64):
    return random_model64


def garbage(shape, seed):
    return 1e2 * torch.randn(*shape, dtype=F64, generator=torch.Generator().manual_seed(seed))


def unpadded_and_padded(model, component, seed):
    """(kokoro's own unpadded outputs, our component's padded inputs) for one component."""
    g = torch.Generator().manual_seed(1)
    s = torch.randn(1, 128, dtype=F64, generator=g)
    n = BUCKETS[component]
    with torch.no_grad(), default_dtype(F64):
        if component in ("albert", "text_encoder"):
            ids = torch.randint(1, 178, (1, T), generator=g)
            ids_b = torch.cat(
                [ids, torch.randint(1, 178, (1, n - T), generator=torch.Generator().manual_seed(seed))], 1
            )
            if component == "albert":
                want = (model.bert_encoder(model.bert(ids, attention_mask=torch.ones_like(ids))).transpose(-1, -2),)
                return want, (ids_b, (torch.arange(n) < T).long()[None])
            want = (model.text_encoder(ids, torch.tensor([T]), torch.zeros(1, T, dtype=torch.bool)),)
            return want, (ids_b, torch.tensor([T]))
        if component == "duration":
            d_en = torch.randn(1, 512, T, dtype=F64, generator=g)
            d = model.predictor.text_encoder(d_en, s, torch.tensor([T]), torch.zeros(1, T, dtype=torch.bool))
            want = (model.predictor.duration_proj(model.predictor.lstm(d)[0]), d)
            return want, (torch.cat([d_en, garbage((1, 512, n - T), seed)], -1), s, torch.tensor([T]))
        if component == "f0n":
            en = torch.randn(1, 640, F, dtype=F64, generator=g)
            want = model.predictor.F0Ntrain(en, s)
            return want, (torch.cat([en, garbage((1, 640, n - F), seed)], -1), s, torch.tensor([F]))
        asr = torch.randn(1, 512, F, dtype=F64, generator=g)
        f0 = torch.rand(1, 2 * F, dtype=F64, generator=g) * 200
        f0[:, :3] = 0  # an unvoiced start
        nn_ = torch.randn(1, 2 * F, dtype=F64, generator=g)
        phase = torch.rand(1, 9, dtype=F64, generator=g)
        phase[:, 0] = 0
        additive = torch.randn(1, 600 * F, 9, dtype=F64, generator=g)
        with explicit_sine_noise_tensors(model.decoder, phase, additive):
            want = (model.decoder(asr, f0, nn_, s).reshape(1, -1),)
        pad = n - F
        padded = (
            torch.cat([asr, garbage((1, 512, pad), seed)], -1),
            torch.cat([f0, garbage((1, 2 * pad), seed)], -1),
            torch.cat([nn_, garbage((1, 2 * pad), seed + 1)], -1),
            s,
            phase,
            torch.cat([additive, garbage((1, 600 * pad, 9), seed)], 1),
            torch.tensor([F]),
        )
        return want, padded


def valid(component, out, want):
    """The valid prefix of one padded output, shaped like the unpadded one."""
    if component == "duration":
        return out[:, : want.shape[1]]
    return out[..., : want.shape[-1]]


def test_masked_instance_norm_uses_only_valid_frames():
    norm = torch.nn.InstanceNorm1d(4, affine=True).double().eval()
    torch.nn.init.normal_(norm.weight)
    x = torch.randn(3, 4, 10, dtype=F64)
    lengths = torch.tensor([10, 2, 6])  # PyTorch InstanceNorm refuses 1 frame ("more than 1 spatial element")
    with torch.no_grad():
        got = masked_instance_norm(norm, x, lengths)
        want = [norm(x[b : b + 1, :, :n])[0] for b, n in enumerate(lengths.tolist())]
    for b, n in enumerate(lengths.tolist()):
        np.testing.assert_allclose(got[b, :, :n], want[b], atol=1e-12)
        assert not got[b, :, n:].any()


@pytest.mark.parametrize("mode", list(PAD_TAILS))
def test_a_pad_tail_gives_the_padded_end_what_the_unpadded_pad_gives_it(mode):
    """A centre pad of `pad` samples on a garbage-tailed buffer, with the tail filled by PAD_TAILS[mode], puts in
    front of each signal's end the very samples F.pad puts after the unpadded signal: exact (copies only)."""
    pad, x = 10, garbage((3, 64), 7)
    lengths = torch.tensor([64, 11, 37])  # the buffer's own length, reflect's shortest (pad + 1), one between
    padded = centre_pad(PAD_TAILS[mode](x, lengths), pad, mode)
    for b, n in enumerate(lengths.tolist()):
        want = centre_pad(x[b : b + 1, :n], pad, mode)[0]
        assert torch.equal(padded[b, : n + 2 * pad], want)


def centre_pad(x, pad, mode):
    return torch.nn.functional.pad(x[:, None], (pad, pad), mode=mode)[:, 0]


@pytest.mark.parametrize("component", list(BUCKETS))
def test_component_in_a_bucket_equals_the_unpadded_model(component, model):
    want, padded = unpadded_and_padded(model, component, seed=2)
    with torch.no_grad(), default_dtype(F64):
        got = component_module(model, component)(*padded)
    got = got if isinstance(got, tuple) else (got,)
    for g, w in zip(got, want, strict=True):
        assert float((valid(component, g, w) - w).abs().max()) <= TOL * max(1.0, float(w.abs().max()))


@pytest.mark.parametrize("component", list(BUCKETS))
def test_tvm_bucket_valid_prefix_ignores_garbage_and_matches(component, model, unit_cache):
    runner = ComponentRunner(build(model, RANDOM_FINGERPRINT, BuildSpec(component, BUCKETS[component], "float64")))
    want, first = unpadded_and_padded(model, component, seed=2)
    _, second = unpadded_and_padded(model, component, seed=3)  # other garbage in every padded tail
    out_a = runner(*(x.numpy() for x in first))
    out_b = runner(*(x.numpy() for x in second))
    for a, b, w in zip(out_a, out_b, want, strict=True):
        va, vb = valid(component, a, w.numpy()), valid(component, b, w.numpy())
        assert np.array_equal(va, vb), "garbage in the padded tail reached the valid prefix"
        assert np.abs(va - w.numpy()).max() <= TOL * max(1.0, np.abs(w.numpy()).max())


def test_a_bucket_shorter_than_the_utterance_is_a_clear_error():
    from kokoro_tvm.runtime.kokoro import BucketTooSmallError, _bucket

    with pytest.raises(BucketTooSmallError, match="frame bucket 64 is shorter than the utterance"):
        _bucket(64, 65, "frame")
    assert _bucket(None, 65, "frame") == 65 and _bucket(96, 65, "frame") == 96
