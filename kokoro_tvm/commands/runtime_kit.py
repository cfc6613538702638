"""A device check bundle's runtime kit: TVM's runtime as Python packages (tvm without its compiler library, tvm_ffi),
for a machine without apache-tvm (kokoro_tvm.commands.gpu_bundle carries it with `with_runtime=True`)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from kokoro_tvm.errors import ResourceError


def runtime_kit(dest: Path, python: str | None = None) -> int:
    """TVM's runtime as Python packages (tvm without its compiler library, sources or headers; tvm_ffi) under
    `dest`; returns its size in bytes. Used with TVM_USE_RUNTIME_LIB=1 and PYTHONPATH=dest on Linux x86-64.
    tvm is pure Python around its libraries; tvm_ffi has a CPython extension, so for another Python
    (`python="3.12"`) its wheel of the same version is fetched from the package index (pip download)."""
    import tvm
    import tvm_ffi

    skip = shutil.ignore_patterns("3rdparty", "src", "include", "web", "__pycache__", "libtvm_compiler.so")
    for package in (tvm, tvm_ffi):
        source = Path(package.__file__).parent
        shutil.copytree(source, Path(dest) / source.name, ignore=skip, dirs_exist_ok=True)
    if python is not None and python != f"{sys.version_info.major}.{sys.version_info.minor}":
        shutil.rmtree(Path(dest) / "tvm_ffi")
        with tempfile.TemporaryDirectory(prefix="kit-wheel-") as folder:
            wheel = _download_wheel("apache-tvm-ffi", tvm_ffi.__version__, python, Path(folder))
            _unpack_wheel(wheel, Path(dest), "tvm_ffi/")
    return sum(p.stat().st_size for p in Path(dest).rglob("*") if p.is_file())


# The manylinux tags a kit's wheel may carry (pip matches each exactly).
_PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_24_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
)


def _download_wheel(name: str, version: str, python: str, folder: Path) -> Path:
    platforms = [arg for tag in _PLATFORMS for arg in ("--platform", tag)]
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--python-version",
        python,
        "--implementation",
        "cp",
        *platforms,
        "-d",
        str(folder),
        f"{name}=={version}",
    ]
    done = subprocess.run(command, capture_output=True, text=True)
    wheels = list(folder.glob("*.whl"))
    if done.returncode != 0 or len(wheels) != 1:
        reason = (done.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ResourceError(f"no {name}=={version} wheel for Python {python} on Linux x86-64: {reason}")
    return wheels[0]


def _unpack_wheel(wheel: Path, dest: Path, prefix: str) -> None:
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(dest, members=[m for m in archive.namelist() if m.startswith(prefix)])
    for library in dest.joinpath(prefix).rglob("*.so"):
        library.chmod(0o755)
