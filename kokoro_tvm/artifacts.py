"""What a built component is on disk (shared by compile and runtime; imports neither torch nor TVM): a library, a
manifest and the shared parameter file, plus, once a CPU load has run the build's weight transform, what it made
(`Artifact.keep_lifted`), which later loads read instead."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kokoro_tvm.errors import ResourceError
from kokoro_tvm.paths import cache_lock, temporary_sibling

log = logging.getLogger(__name__)

# Beside a CPU build's library: its weight transform's results, kept at the first load (Artifact.keep_lifted)
LIFTED_FILE = "lifted_params.npz"

# The source that decides what a build computes, relative to the package root: the compiler, the component
# registry, the reference model the export traces, and the STFT bases we fix in every model. Its digest is in
# every cache key, so an edit there (a schedule rule, a converter) never meets an artifact built before it.
BUILD_SOURCES = ("compiler", "components.py", "reference", "weights/stft.py")


def build_source_digest(root: Path | None = None, sources=BUILD_SOURCES) -> str:
    """sha256 (first 16 hex digits) over the path and bytes of every .py file under `sources` of `root` (the
    kokoro_tvm package), in sorted order. A comment edit changes it too: a rebuild is cheaper than a stale
    artifact."""
    root = Path(root) if root is not None else Path(__file__).resolve().parent
    files = []
    for source in sources:
        path = root / source
        if not path.exists():
            raise FileNotFoundError(f"build source {path} is missing: the package is incomplete")
        files += [path] if path.is_file() else [f for f in path.rglob("*.py") if "__pycache__" not in f.parts]
    digest = hashlib.sha256()
    for path in sorted(files):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


class ArtifactError(ResourceError):
    """A compiled artifact is missing, corrupt, or not what its manifest says."""


def params_digest(arrays: dict[str, np.ndarray], names: list[str]) -> str:
    """sha256 over each parameter in `names` order: the UTF-8 name, then the array's bytes."""
    digest = hashlib.sha256()
    for name in names:
        digest.update(name.encode("utf-8"))
        digest.update(np.ascontiguousarray(arrays[name]).tobytes())
    return digest.hexdigest()


def _check_order(order: list[int], arrays: int) -> None:
    """Each input of the kept transform results names one of its `arrays`."""
    if not all(isinstance(i, int) and 0 <= i < arrays for i in order):
        raise ValueError("its order names arrays it lacks")


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class RuntimeParams:
    """A runner's parameters: `arrays`, and `order` (the array of each input `main` takes after the user inputs)
    where arrays are shared, else one array an input; `transform`: the function that turns them into `main`'s
    inputs once, at load (None: they are `main`'s inputs already)."""

    arrays: list[np.ndarray]
    order: list[int] | None = None
    transform: str | None = None


@dataclass
class Artifact:
    """One component at one shape: the Relax VM library, its manifest, and the shared parameter file."""

    library: Path
    params: Path
    manifest: dict
    # what a cache check has just read and verified (`runtime_params`), handed to the first runner instead of
    # reading it again: 330 MB and 0.6 s for the five fp32 builds; handed over once, not kept
    verified: RuntimeParams | None = field(default=None, repr=False, compare=False)

    @property
    def param_names(self) -> list[str]:
        return self.manifest["param_names"]

    @property
    def component(self) -> str:
        return self.manifest["key"]["component"]

    @property
    def length_tile(self) -> int | None:
        """A symbolic-length build's tile (its callers pass the tile count after the inputs); None if static."""
        return self.manifest.get("length_tile")

    @classmethod
    def open(cls, folder: Path) -> Artifact:
        """Read an artifact folder written by kokoro_tvm.compiler.build (manifest.json, component.so)."""
        folder = Path(folder)
        try:
            manifest = json.loads((folder / "manifest.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ArtifactError(f"{folder} is not a kokoro-tvm artifact: {exc}") from exc
        # relative to the artifact's folder (a cache moved or mounted elsewhere still finds its parameters);
        # an absolute path is what builds before that wrote
        params = Path(os.path.normpath(folder / manifest["params_file"]))
        return cls(folder / "component.so", params, manifest)

    @property
    def lifted_file(self) -> Path:
        """The weight transform's results, kept by the first CPU runner that ran it (`keep_lifted`)."""
        return self.library.parent / LIFTED_FILE

    def keep_lifted(self, arrays: list[np.ndarray], order: list[int]) -> None:
        """Store what the load-time transform made (`arrays`, each distinct tensor once, and each input's index
        into them), tied to this library and these parameters, so later loads read it instead of the parameters
        (the int8 decoder: 187 MB read, not 213 MB read plus 187 MB made from them). A cache that cannot be
        written is logged and left as it is."""
        named = {f"a{i}": array for i, array in enumerate(arrays)}
        _check_order(order, len(named))
        state = {**self._lifted_for(), "order": order}
        try:
            tmp = temporary_sibling(self.lifted_file)
            with open(tmp, "wb") as handle:  # a file object: np.savez would append .npz to a name
                np.savez(handle, __state__=np.frombuffer(json.dumps(state).encode(), np.uint8), **named)
            os.replace(tmp, self.lifted_file)
        except OSError as exc:
            log.warning("lifted parameters not kept for %s: %s", self.library.parent.name, exc)

    def _lifted_for(self) -> dict:
        return {
            "library_sha256": self.manifest["library_sha256"],
            "params_digest": self.manifest["params_digest"],
            "transform": self.manifest.get("transform_params"),
        }

    def load_lifted(self) -> RuntimeParams | None:
        """The kept transform results, verified (each array against the CRC-32 its zip member records, which numpy
        checks as it reads the member: a flipped bit or a cut file raises; and made by this library from these
        parameters), or None (none kept, or not for this build: logged). No sha256 over the arrays on top: it
        caught nothing the CRC does not and cost a cold `say` 0.17 s for the int8 decoder's 187 MB."""
        if not self.manifest.get("transform_params") or not self.lifted_file.is_file():
            return None
        try:
            with np.load(self.lifted_file) as npz:
                state = json.loads(npz["__state__"].tobytes())
                names = [f"a{i}" for i in range(len(npz.files) - 1)]
                arrays = {name: npz[name] for name in names}
            if {k: state.get(k) for k in self._lifted_for()} != self._lifted_for():
                raise ValueError("made by another library or from other parameters")
            _check_order(state["order"], len(arrays))
        except (OSError, EOFError, KeyError, TypeError, ValueError, zipfile.BadZipFile) as exc:
            log.warning("lifted parameters of %s not used (%s): transforming at load", self.library.parent.name, exc)
            return None
        return RuntimeParams([arrays[name] for name in names], list(state["order"]))

    def runtime_params(self) -> RuntimeParams:
        """What a CPU runner appends to every call, verified: the transform's results where an earlier load kept
        them, else the parameters and the transform the runner calls once at load. A cache check's copy is handed over
        once (`verified`), then read from the files again."""
        if self.verified is not None:
            verified, self.verified = self.verified, None
            return verified
        return self.load_lifted() or RuntimeParams(self.load_params(), transform=self.manifest.get("transform_params"))

    def verify(self) -> None:
        """Read and check every file a load may read (the parameters too where kept transform results would
        spare a load them: they stay the source of truth); the first runner takes what a load would read."""
        params = self.load_params()
        self.verified = self.load_lifted() or RuntimeParams(params, transform=self.manifest.get("transform_params"))

    def load_params(self) -> list[np.ndarray]:
        """The parameters in call order, verified against the manifest's digest."""
        try:
            with np.load(self.params) as npz:
                arrays = {name: npz[name] for name in self.param_names}
        except (OSError, KeyError, ValueError) as exc:
            raise ArtifactError(f"cannot read parameters {self.params}: {exc}") from exc
        if params_digest(arrays, self.param_names) != self.manifest["params_digest"]:
            raise ArtifactError(f"parameters {self.params} do not match the digest recorded for {self.library}")
        return [arrays[name] for name in self.param_names]


def prune_artifacts(folder: Path, source: str, tvm_version: str) -> tuple[int, int]:
    """Remove the artifact folders under `folder` (the cache's artifacts/) that this checkout can never load: built
    from other build sources (their `build_source_digest` is not `source`) or by another TVM. Each went stale when
    those sources changed (an update, an edit) and stays until removed: 636 folders, 59 GB, in the cache of the
    machine this project is developed on. Kept: every current folder, whatever its weights, target or tuning record
    (another CPU's or device's builds), and a folder without a manifest yet (a build under way). Returns (folders
    removed, bytes freed)."""
    removed = freed = 0
    for path in sorted(Path(folder).glob("*")):
        if not path.is_dir() or path.name.startswith("."):
            continue
        try:
            key = json.loads((path / "manifest.json").read_text())["key"]
            current = key["source"] == source and key["tvm"] == tvm_version
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if current:
            continue
        with cache_lock(path):  # not while another process builds or checks it
            size = sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
            shutil.rmtree(path)
        Path(f"{path}.lock").unlink(missing_ok=True)
        removed, freed = removed + 1, freed + size
    return removed, freed
