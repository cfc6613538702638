"""Batched synthesis: B utterances of different lengths through one call of each component equal each utterance
spoken alone. Unit tier: batch-3 and batch-8 symbolic builds on random float64 weights against PyTorch one
utterance at a time, with garbage in every padded tail; `say --batch`'s input errors. Real tier:
`synthesize_batch` and `say --batch` at B = 3 against `synthesize` one text at a time, in two orders."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from kokoro_tvm.cli import main
from kokoro_tvm.compiler.symbolic import LENGTH_TILE, SymbolicShape
from kokoro_tvm.components import component
from kokoro_tvm.studies import batching

BATCH = 3  # the real tier's batch
# each case: every row its own length in steps (tokens, or frames for f0n). Batch 3: one short, one the whole
# build, one a partial tile; batch 8: 5 to 400 steps mixed, the longest not a whole tile
CASES = {3: (5, 3 * LENGTH_TILE, 13), 8: (5, 400, 37, 8, 123, 250, 64, 397)}


def _tiles(valid: tuple[int, ...]) -> int:
    return -(-max(valid) // LENGTH_TILE)


@pytest.fixture(scope="module", params=sorted(CASES), ids=lambda b: f"batch{b}")
def batched_runners(request, random_model64):
    """Symbolic float64 builds for one case's batch of the components with an LSTM (masked per row) and AdaIN
    (masked statistics per row): export, import, compile once per batch size. Returns (runners, valid)."""
    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.build import symbolic_relax_module
    from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS

    valid = CASES[request.param]
    runners = {}
    for name in ("duration", "text_encoder", "f0n"):
        shape = SymbolicShape(name, _tiles(valid), len(valid))
        mod, exported, _ = symbolic_relax_module(random_model64, shape)
        named = dict(exported.named_parameters())
        params = [named[p].detach().numpy() for p in exported.graph_signature.parameters]
        runners[name] = compile_and_load(mod, params=params, transform_params=TRANSFORM_PARAMS)
    return runners, valid


def _batch_inputs(name: str, valid: tuple[int, ...], garbage: bool) -> list[torch.Tensor]:
    """A batch of len(valid) at the longest row's tiles, row b valid for valid[b] steps; past that zeros, or
    (garbage) junk."""
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs

    steps = _tiles(valid) * LENGTH_TILE
    xs = list(example_inputs(ComponentShape(name, steps, len(valid)), torch.float64))
    g = torch.Generator().manual_seed(7)
    for i, spec in enumerate(component(name).inputs):
        if spec.values == "lengths":
            xs[i] = torch.tensor(valid, dtype=torch.int64)
            continue
        if spec.length_axis is None:
            continue
        for b, n in enumerate(valid):
            tail = xs[i][b].narrow(spec.length_axis - 1, n * spec.length_multiple, (steps - n) * spec.length_multiple)
            if not garbage:
                tail.zero_()
            elif spec.values == "ids":
                tail.copy_(torch.randint(0, 178, tail.shape, generator=g))
            else:
                tail.copy_(torch.randn(tail.shape, generator=g, dtype=tail.dtype) * 1e3)
    return xs


def _alone(model, name: str, xs: list[torch.Tensor], b: int, n: int) -> tuple[np.ndarray, ...]:
    """PyTorch on row b alone, cut to its valid length (no padding at all)."""
    from kokoro_tvm.compiler.export import component_module
    from kokoro_tvm.compiler.patches import export_patches
    from kokoro_tvm.reference.pt_dynamic import default_dtype

    row = []
    for x, spec in zip(xs, component(name).inputs, strict=True):
        x = x[b : b + 1]
        row.append(x if spec.length_axis is None else x.narrow(spec.length_axis, 0, n * spec.length_multiple))
    with torch.no_grad(), export_patches(model), default_dtype(torch.float64):
        found = component_module(model, name)(*row)
    return tuple(t.numpy() for t in (found if isinstance(found, tuple) else (found,)))


@pytest.mark.parametrize("name", ["duration", "text_encoder", "f0n"])
def test_each_row_of_a_batch_is_its_utterance_alone(name, batched_runners, random_model64):
    """float64: every row of one batched call (3 rows; 8 rows of 5 to 400 steps) equals PyTorch on that utterance
    alone (>= 100 dB is a relative error <= 1e-5; measured 1e-15), and junk in every padded tail changes no valid
    value by a single bit."""
    runners, valid = batched_runners
    runner = runners[name]
    clean = runner(*(x.numpy() for x in _batch_inputs(name, valid, garbage=False)), runner.shape(_tiles(valid)))
    dirty = runner(*(x.numpy() for x in _batch_inputs(name, valid, garbage=True)), runner.shape(_tiles(valid)))
    xs = _batch_inputs(name, valid, garbage=False)
    for b, n in enumerate(valid):
        want = _alone(random_model64, name, xs, b, n)
        for got, junk, w in zip(clean, dirty, want, strict=True):
            cut = tuple(slice(0, k) for k in w.shape[1:])  # the valid prefix of row b
            g, d = got[b][cut], junk[b][cut]
            # float64 throughout, sums in another order: ~1e-15; 1e-12 leaves room, a wrong row is O(1)
            assert np.linalg.norm(g - w[0]) / np.linalg.norm(w[0]) < 1e-12, (name, b, n)
            assert np.array_equal(g, d), (name, b)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["say", "--batch", "missing.txt", "-o", "out"], "cannot read the batch file missing.txt"),
        (["say", "hello", "--batch", "lines.txt", "-o", "out"], "not both"),
        (["say", "-o", "out"], "not both and not neither"),
        (["say", "--batch", "blank.txt", "-o", "out"], "has no text"),
        (["say", "--batch", "lines.txt", "-o", "-"], "not with --stream"),
        (["say", "--batch", "bad.txt", "-o", "out"], "text 2: "),
    ],
)
def test_say_batch_bad_input_is_one_line_before_any_model(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lines.txt").write_text("Hello there.\nGood night.\n")
    (tmp_path / "blank.txt").write_text("\n  \n")
    (tmp_path / "bad.txt").write_text("Hello there.\n?!\n")  # line 2: nothing to say
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


def test_a_batch_the_memory_cannot_hold_is_refused_and_batch_one_never_is(tmp_path):
    """runtime.kokoro.batch_memory_refusal at its measured rate (BATCH_BYTES_PER_ROW_FRAME): 16 rows of 1500
    frames (37.5 s of speech each) need 22.0 GiB, refused with 20 GiB free; 2 rows of 256 frames fit; one row
    always runs, and nothing is refused where the free memory is unknown. machine.available_memory reads
    MemAvailable from a meminfo file, None where there is none."""
    from kokoro_tvm.machine import MEMINFO, available_memory
    from kokoro_tvm.runtime.kokoro import BATCH_BYTES_PER_ROW_FRAME, batch_memory_refusal

    gib = 2**30
    assert 16 * 1500 * BATCH_BYTES_PER_ROW_FRAME > 20 * gib > 2 * 256 * BATCH_BYTES_PER_ROW_FRAME
    refusal = batch_memory_refusal(16, 1500, 20 * gib)
    assert refusal is not None and "16 utterances of up to 1500 frames" in refusal and "20.0 GiB is free" in refusal
    assert batch_memory_refusal(2, 256, 20 * gib) is None
    assert batch_memory_refusal(1, 5120, 1) is None and batch_memory_refusal(16, 1500, None) is None
    (tmp_path / "meminfo").write_text("MemTotal:       24576000 kB\nMemFree: 1000 kB\nMemAvailable:   20480000 kB\n")
    assert available_memory(tmp_path / "meminfo") == 20480000 * 1024
    assert available_memory(tmp_path / "none") is None
    if MEMINFO.exists():  # this machine's: positive, under its total
        total = int(MEMINFO.read_text().split("MemTotal:")[1].split()[0]) * 1024
        assert 0 < available_memory() <= total


TEXTS = (
    "Hi.",
    "The lighthouse keeper counted the ships that passed in the fog.",
    "Seven small boats.",
)


@pytest.mark.real
def test_say_batch_refuses_a_batch_the_memory_cannot_hold_in_one_line(tmp_path, capsys, monkeypatch):
    """The refusal reaches the command as one line, before the decoder runs and before any WAV is written, with
    this machine's free memory read as 1 MiB (the one thing replaced: what the kernel reports)."""
    import kokoro_tvm.runtime.kokoro as runtime

    monkeypatch.setattr(runtime, "available_memory", lambda: 2**20)
    (tmp_path / "lines.txt").write_text("\n".join(TEXTS) + "\n")
    argv = ["-q", "say", "--batch", str(tmp_path / "lines.txt"), "-o", str(tmp_path / "out"), "--batch-size", "3"]
    assert main([*argv, "--precision", "fp32"]) == 2
    err = capsys.readouterr().err
    assert "a batch of 3 utterances" in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert not list(tmp_path.glob("out/*.wav"))


def test_committed_batching_results_read_back_as_rows_against_batch_one(tmp_path):
    """What notebook 08 shows: a study result written by `--out` reads back one row per batch size, its throughput
    and its ratio to batch 1 of the same run (never another run's); every committed file has a batch-1 row."""

    def row(batch, wall):
        return {
            "batch": batch,
            "wall_s": wall,
            "spread_s": [wall, wall],
            "audio_s_per_s": 30.0 / wall,
            "components_s": {"decoder": wall / 2},
        }

    result = {
        "cpu": "X",
        "record": "cpu-f1-m2-abcd.json",
        "date": "2026-11-28",
        "precision": "fp32",
        "rows": [row(1, 10.0), row(4, 8.0)],
    }
    path = batching.save(result, tmp_path)
    assert path.name == "cpu-f1-m2-abcd-fp32.json"
    rows = batching.committed_rows(tmp_path)
    assert [(r["batch"], r["vs_batch_1"], r["audio_s_per_s"], r["decoder_s"]) for r in rows] == [
        (1, 1.0, 3.0, 5.0),
        (4, 1.25, 3.75, 4.0),
    ]
    for committed in batching.FOLDER.glob("*.json"):
        assert 1 in [r["batch"] for r in json.loads(committed.read_text())["rows"]], committed


@pytest.mark.real
def test_batch_of_three_equals_one_by_one_in_any_order(tmp_path, capsys):
    """fp32, seeded noise: each text of `say --batch` (batch 3: one call of each component for all three) has the
    durations and the audio `synthesize` gives it alone, wherever it sits in the batch."""
    from kokoro_tvm.runtime.audio_io import read_wav
    from kokoro_tvm.synthesis import synthesize
    from kokoro_tvm.synthesis.batch import synthesize_batch

    alone = [synthesize(t, backend="tvm", precision="fp32", noise=5) for t in TEXTS]
    (tmp_path / "lines.txt").write_text("\n".join(TEXTS) + "\n")
    argv = ["-q", "say", "--batch", str(tmp_path / "lines.txt"), "-o", str(tmp_path / "out"), "--seed", "5"]
    assert main([*argv, "--batch-size", "3", "--precision", "fp32"]) == 0
    written = capsys.readouterr().out.split()
    assert [p.rsplit("/", 1)[-1] for p in written] == ["0001.wav", "0002.wav", "0003.wav"]
    reordered = synthesize_batch(TEXTS[::-1], batch=BATCH, precision="fp32", noise=5)[::-1]
    for one, path, other in zip(alone, written, reordered, strict=True):
        audio, _ = read_wav(path)
        metadata = json.loads(Path(path).with_suffix(".json").read_text())
        assert metadata["tvm"]["batch"] == BATCH and len(metadata["tvm"]["shapes"]) == len(one.chunks)
        for speech_audio in (audio, other.audio):
            assert speech_audio.shape == one.audio.shape  # the same durations, so the same length
            # one utterance alone and in a batch: the same arithmetic per row, measured 320 dB apart (float32
            # sums in another order at most); 100 dB is marks.FP64_SNR_DB's exactness, far above any audible difference
            error = np.sum((speech_audio - one.audio) ** 2)
            assert 10 * np.log10(np.sum(one.audio**2) / max(error, 1e-30)) >= 100
        assert all(np.array_equal(a, b) for a, b in zip(one.durations, other.durations, strict=True))


@pytest.mark.parametrize("backend", ["torch", "tvm"])
def test_a_name_that_is_no_precision_says_so_for_either_backend(backend):
    """It said "applies to the tvm backend only" for the torch backend, as if int4 were a tvm precision."""
    from kokoro_tvm.errors import InputError
    from kokoro_tvm.synthesis import synthesize

    with pytest.raises(InputError, match="precision must be auto or one of fp32, fp64, bf16, int8, got 'int4'"):
        synthesize("Hello.", backend=backend, precision="int4")


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda api: api.synthesize(123), "text must be a string"),
        (lambda api: api.synthesize(phonemes=5), "phonemes must be a string"),
        (lambda api: api.synthesize("Hello.", voice=None), "voice must be a voice name"),
        # a str is a sequence: unrefused, "Hello" would be five one-letter utterances
        (lambda api: api.batch.synthesize_batch("Hello"), "texts must be a list of strings"),
    ],
)
def test_wrong_types_in_the_api_are_one_clear_type_error_before_any_model(call, message, monkeypatch):
    import kokoro_tvm.synthesis as api
    import kokoro_tvm.synthesis.batch

    def no_backend(*args, **kwargs):
        raise AssertionError("a backend was made before the arguments were checked")

    monkeypatch.setattr(api, "make_backend", no_backend)
    monkeypatch.setattr(kokoro_tvm.synthesis.batch, "make_backend", no_backend)
    with pytest.raises(TypeError, match=message):
        call(api)


@pytest.mark.parametrize(
    "ids, message",
    [
        ([0, 5, 178, 0], r"token ids must be 0\.\.177, got 0\.\.178"),
        ([0, -1, 0], r"token ids must be 0\.\.177, got -1\.\.0"),
        ([0, 1.7, 0], "token ids must be a list of whole numbers, got float64 of shape"),
        ([[0, 5, 0]], r"token ids must be a list of whole numbers, got int64 of shape \(1, 3\)"),
        ([[0, 5], [0]], "token ids must be a list of whole numbers, got a ragged list"),
    ],
)
def test_token_ids_outside_the_vocabulary_are_refused_before_any_component(ids, message):
    """The compiled embeddings read their rows unchecked (TVM's "fast" take): an id of 178 would read past the
    table; 1.7 was truncated to token 1."""
    from kokoro_tvm.errors import InputError
    from kokoro_tvm.runtime.kokoro import TVMKokoro

    def no_component(*key):
        raise AssertionError(f"a component was loaded for {key} before the ids were checked")

    with pytest.raises(InputError, match=message):
        TVMKokoro(no_component).run_stages(ids, np.zeros(256, dtype=np.float32))
