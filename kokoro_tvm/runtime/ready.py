"""Compiled models that start without torch. Building (or finding) a build needs the weights' fingerprint, which
needs the weights loaded, which needs torch: 8.6 s and 1.5 GB before the first sample of a cached model. So once
a TVM backend has its five symbolic-length builds, their folders go into an index entry keyed by everything that
picked them and can be read without torch: the weights request (an explicit file's path, size and mtime, or the
default), the precision, this machine (kokoro_tvm.machine.cpu_identity), the build source's digest, the TVM
version and the tuning record in use (its file's size and mtime). `find` returns the artifacts of a matching
entry after checking each one's manifest (same source digest and TVM) and library hash; anything else is a miss
(logged), and the caller takes the building path, which writes the entry again.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path

from kokoro_tvm.artifacts import Artifact, ArtifactError, build_source_digest, file_sha256
from kokoro_tvm.components import NAMES
from kokoro_tvm.machine import cpu_identity, record_name
from kokoro_tvm.paths import TUNING_ENV, TUNING_RECORDS, WEIGHTS_ENV, cache_dir, temporary_sibling
from kokoro_tvm.runtime.vm import load_runtime

log = logging.getLogger(__name__)


def _file_state(path: Path) -> list | None:
    return [str(path.resolve()), path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else None


def _tuning_state() -> object:
    setting = os.environ.get(TUNING_ENV, "")
    if setting == "off":
        return "off"
    if setting:
        return _file_state(Path(setting))
    name = record_name(cpu_identity())
    return [_file_state(cache_dir() / "tuning" / name), _file_state(TUNING_RECORDS / name)]


def _tvm_version() -> str:
    """TVM's version from the package metadata: the key is computed before TVM is imported (start_without_torch)."""
    return importlib.metadata.version("apache-tvm")


def request_key(weights, precision: str, device: str) -> str:
    """The index key of a request (see the module docstring); `precision` as asked ("auto" is a request of its
    own, whose entry records what it resolved to)."""
    request = weights if weights is not None else os.environ.get(WEIGHTS_ENV) or None
    fields = {
        "weights": _file_state(Path(request).expanduser()) if request is not None else "default",
        "precision": precision,
        "device": device,
        "machine": cpu_identity(),
        "source": build_source_digest(),
        "tvm": _tvm_version(),
        "tuning": _tuning_state(),
    }
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:24]


def _entry(key: str) -> Path:
    return cache_dir() / "ready" / f"{key}.json"


@dataclass
class Ready:
    artifacts: dict[str, Artifact]  # component -> its symbolic-length build
    weights: dict  # the WeightsInfo the builds were made from, as the sidecar records it
    precision: str  # what the request resolved to ("auto": the tuner's choice when the entry was written)
    choice: str | None  # why, as the sidecar says it (None in entries written before it was recorded)

    def provider(self, component: str, length: int | None, batch: int = 1) -> Artifact:
        if length is not None or batch != 1:
            raise ArtifactError(
                f"ready builds are batch-1 symbolic-length builds; asked for {component} at length {length}, "
                f"batch {batch}"
            )
        return self.artifacts[component]


def find(weights, precision: str, device: str = "cpu") -> Ready | None:
    """The ready builds of this request, or None (no entry, or one whose builds no longer check out)."""
    path = _entry(request_key(weights, precision, device))
    if not path.is_file():
        return None
    try:
        entry = json.loads(path.read_text())
        artifacts = {name: Artifact.open(Path(entry["components"][name])) for name in NAMES}
        digest = build_source_digest()
        for artifact in artifacts.values():
            key = artifact.manifest["key"]
            if key.get("source") != digest or key.get("tvm") != _tvm_version():
                raise ArtifactError(f"{artifact.library.parent.name} was built from other source")
            if file_sha256(artifact.library) != artifact.manifest["library_sha256"]:
                raise ArtifactError(f"{artifact.library} does not match its recorded sha256")
        return Ready(artifacts, entry["weights"], entry["precision"], entry.get("choice"))
    except (OSError, ValueError, KeyError, ArtifactError) as exc:
        log.info("ready index %s does not hold: %s (building path)", path.name, exc)
        return None


def save(
    weights,
    precision: str,
    device: str,
    artifacts: dict[str, Artifact],
    weights_info: dict,
    asked: str | None = None,
    choice: str | None = None,
) -> Path:
    """Write the index entry of a request whose builds are `artifacts` (every component's symbolic build); under
    the `asked` precision ("auto") as well where that resolved to `precision`, `choice` saying why."""
    entry = {
        "components": {name: str(a.library.parent) for name, a in artifacts.items()},
        "weights": weights_info,
        "precision": precision,
        "choice": choice,
    }
    for requested in dict.fromkeys([precision, asked or precision]):
        path = _entry(request_key(weights, requested, device))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = temporary_sibling(path)
        tmp.write_text(json.dumps(entry, indent=1))
        os.replace(tmp, path)
    return path


def prune_entries() -> int:
    """Remove the index entries that can never hold again: unreadable, or naming a build folder that is gone
    (`kokoro-tvm compile --prune` removed it, or a hand did). An entry of other build sources is never looked up
    (the source digest is part of its key) but stays otherwise. Returns how many were removed."""
    removed = 0
    for path in sorted((cache_dir() / "ready").glob("*.json")):
        try:
            folders = [Path(f) for f in json.loads(path.read_text())["components"].values()]
            if all(f.is_dir() for f in folders):
                continue
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            pass
        path.unlink(missing_ok=True)
        removed += 1
    return removed


def indexed(weights, precision: str, device: str = "cpu") -> bool:
    """Whether this request has an index entry: its builds were made and run on this machine (the key holds its
    identity), so the precision and device checks it passed then need not load the compiler again."""
    return _entry(request_key(weights, precision, device)).is_file()


def start_without_torch(weights, precision: str, device: str = "cpu") -> bool:
    """Before anything imports TVM: where this request has an index entry, load TVM's runtime without torch and say
    so (True). tvm_ffi imports torch when it is imported (to convert torch tensors and share CUDA streams, which
    a ready start never does): 1.6 s and 340 MB of a start that needs neither. While the runtime loads `import
    torch` fails for it, and torch imports as usual afterwards; a process that has either loaded already, or no
    entry, changes nothing (False)."""
    if "tvm_ffi" in sys.modules or "torch" in sys.modules or not indexed(weights, precision, device):
        return False
    sys.modules["torch"] = None  # the import system's "not importable" mark
    try:
        load_runtime()
    finally:
        if "torch" in sys.modules and sys.modules["torch"] is None:
            del sys.modules["torch"]
    return True
