"""What a built component is on disk (shared by compile and runtime; imports neither torch nor TVM)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kokoro_tvm.errors import ResourceError

# The source that decides what a build computes, relative to the package root: the compiler, the component
# registry, and the reference model the export traces. Its digest is in every cache key, so an edit there (a
# schedule rule, a converter) never meets an artifact built before it.
BUILD_SOURCES = ("compiler", "components.py", "reference")


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


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@dataclass
class Artifact:
    """One component at one shape: the Relax VM library, its manifest, and the shared parameter file."""

    library: Path
    params: Path
    manifest: dict
    # parameters a cache check has just read and verified, handed to the first load_params (the runner) instead of
    # reading them again: 330 MB and 0.6 s for the five fp32 builds; handed over once, not kept
    verified: list | None = field(default=None, repr=False, compare=False)

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
        return cls(folder / "component.so", Path(manifest["params_file"]), manifest)

    def load_params(self) -> list[np.ndarray]:
        """The parameters in call order, verified against the manifest's digest."""
        if self.verified is not None:
            verified, self.verified = self.verified, None
            return verified
        try:
            with np.load(self.params) as npz:
                arrays = {name: npz[name] for name in self.param_names}
        except (OSError, KeyError, ValueError) as exc:
            raise ArtifactError(f"cannot read parameters {self.params}: {exc}") from exc
        if params_digest(arrays, self.param_names) != self.manifest["params_digest"]:
            raise ArtifactError(f"parameters {self.params} do not match the digest recorded for {self.library}")
        return [arrays[name] for name in self.param_names]
