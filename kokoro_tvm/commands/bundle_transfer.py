"""A check bundle (kokoro_tvm.commands.gpu_bundle) as an xz archive cut into parts, for a machine that takes a
limited size per copy (a lent GPU machine: 64 MiB per command).

`archive(bundle, dest, part_bytes)` writes `bundle.tar.xz.000`, `.001`, ... (each at most `part_bytes`) and
`transfer.json` (the parts, the sha256 of the whole archive, and the command that joins, checks, unpacks and runs
it there with Python's standard library alone). The bundle's parameters and recorded cases are stored
compressed on disk (zlib, in .npz); in the archive they go uncompressed, so xz compresses them itself (zlib's
output is noise to xz): 253 MiB of bundle became 134.5 MiB of archive (NOTES/metal.md).
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
from pathlib import Path

import numpy as np

ARCHIVE = "bundle.tar.xz"
RESULTS_ARCHIVE = "results.tar.gz"  # what run_all leaves in bundle/ to bring back, in pieces .00, .01, ...
# a lent machine gives back files of at most 16 MiB; the PyTorch peer's audio alone is about 10 MiB
RESULTS_PIECE_MIB = 15
# The most one copy to the GPU machine carries: a lent machine takes 64 MiB per command, the repository's own
# files (about 1.3 MiB) and bundle.json included; `kokoro-tvm gpu-check --bundle-only --part-mib N` sets another.
PART_BYTES = 60 * 2**20


class _PartWriter(io.RawIOBase):
    """A write-only stream over numbered files of at most `limit` bytes each, hashing what passes through."""

    def __init__(self, dest: Path, limit: int):
        self.dest, self.limit, self.parts, self.digest = dest, limit, [], hashlib.sha256()
        self._file, self._left = None, 0

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self.digest.update(view)
        while view:
            if self._left == 0:
                self._roll()
            step = min(self._left, len(view))
            self._file.write(view[:step])
            self._left -= step
            view = view[step:]
        return len(data)

    def _roll(self) -> None:
        if self._file is not None:
            self._file.close()
        name = f"{ARCHIVE}.{len(self.parts):03d}"
        self.parts.append(name)
        self._file, self._left = open(self.dest / name, "wb"), self.limit  # noqa: SIM115 (closed on roll/close)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
        super().close()


def _member_bytes(path: Path) -> bytes:
    """The file as it goes into the archive: an .npz rewritten uncompressed (same arrays), anything else as is."""
    if path.suffix != ".npz":
        return path.read_bytes()
    with np.load(path) as npz:
        arrays = {name: npz[name] for name in npz.files}
    buffer = io.BytesIO()
    np.savez(buffer, **arrays)
    return buffer.getvalue()


def archive(bundle, dest, part_bytes: int) -> dict:
    """Write the bundle folder `bundle` as an xz tar in parts of at most `part_bytes` into `dest`, with
    transfer.json; returns transfer.json's content."""
    bundle, dest = Path(bundle), Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob(f"{ARCHIVE}.*"):
        old.unlink()
    writer = _PartWriter(dest, part_bytes)
    with lzma.open(writer, "wb", preset=6) as xz, tarfile.open(fileobj=xz, mode="w|") as tar:
        for path in sorted(p for p in bundle.rglob("*") if p.is_file()):
            data = _member_bytes(path)
            info = tarfile.TarInfo(f"bundle/{path.relative_to(bundle).as_posix()}")
            info.size, info.mode = len(data), path.stat().st_mode & 0o777
            tar.addfile(info, io.BytesIO(data))
    writer.close()
    written = json.loads((bundle / "bundle.json").read_text())
    transfer = {
        "parts": writer.parts,
        "bytes": sum((dest / name).stat().st_size for name in writer.parts),
        "sha256": writer.digest.hexdigest(),
        "unpack": f'cat {ARCHIVE}.* > {ARCHIVE} && sha256sum {ARCHIVE} && python3 -c "import tarfile; '
        f"tarfile.open('{ARCHIVE}', 'r:xz').extractall('.', filter='data')\"",
        "run": f"cd bundle && {written['run']}",
    }
    runs = [written["run"]]
    for name in ("torch_peer", "batches"):  # PyTorch on the device (gpu_torch_peer); throughput (gpu_batches)
        if written.get(name):
            transfer[f"run_{name}"] = f"cd bundle && {written[name]['run']}"
            runs.append(written[name]["run"])
    # everything in one command, for a machine lent by the minute: each run whether the one before passed or not,
    # their results in one archive cut into pieces a copy back takes (`cat results.tar.gz.* | tar -xz` here)
    transfer["run_all"] = (
        f"{transfer['unpack']} && cd bundle && ({'; '.join(runs)}); "
        f"tar -czf - results | split -d -b {RESULTS_PIECE_MIB}m - {RESULTS_ARCHIVE}."
    )
    (dest / "transfer.json").write_text(json.dumps(transfer, indent=1))
    return transfer


def transfer_parts(folder, limit: int = PART_BYTES) -> list[list[str]]:
    """The bundle's files (relative paths) in groups of at most `limit` bytes, largest first, for carrying it to
    a machine in several commands (bundle.json, written afterwards, goes with the last part; a file larger
    than the limit is a part of its own, and cannot travel)."""
    folder = Path(folder)
    files = sorted((p for p in folder.rglob("*") if p.is_file()), key=lambda p: -p.stat().st_size)
    parts: list[tuple[int, list[str]]] = []
    for path in files:
        size = path.stat().st_size
        fit = next((part for part in parts if part[0] + size <= limit), None)
        if fit is None:
            parts.append((size, [str(path.relative_to(folder))]))
        else:
            parts[parts.index(fit)] = (fit[0] + size, fit[1] + [str(path.relative_to(folder))])
    return [names for _, names in parts]
