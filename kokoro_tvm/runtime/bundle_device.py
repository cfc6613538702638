"""The device half of the bundle runner (kokoro_tvm.runtime.bundle_runner): TVM's device runtime loaded where the
runtime-only mode leaves it out, and nvcc registered to compile a CUDA library's source as it loads. Standalone
like the runner (numpy and TVM's runtime only): copied into each bundle as `bundle_device.py`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path


class BundleError(RuntimeError):
    """The bundle is missing, incomplete or of another format."""


def load_device_runtime(device: str) -> None:
    """TVM's device runtime (libtvm_runtime_cuda.so, ...) beside libtvm_runtime.so. A full `import tvm` loads it
    with the backends; the runtime-only mode (TVM_USE_RUNTIME_LIB=1) does not, so it is loaded here. Without
    it a device library cannot be read ("a loader of that name is not registered")."""
    import tvm_ffi
    from tvm.base import _LOADED_LIBS
    from tvm_ffi.libinfo import load_lib_ctypes

    if device == "cpu" or tvm_ffi.get_global_func(f"ffi.Module.load_from_bytes.{device}", allow_missing=True):
        return
    runtime_dir = Path(_LOADED_LIBS["tvm_runtime"]._name).resolve().parent
    try:
        _LOADED_LIBS[f"tvm_runtime_{device}"] = load_lib_ctypes(
            "tvm", f"tvm_runtime_{device}", "RTLD_LOCAL", extra_lib_paths=[runtime_dir]
        )
    except (OSError, RuntimeError) as exc:  # e.g. libcuda.so.1 (the driver) or libcudart missing
        raise BundleError(f"cannot load TVM's {device} runtime from {runtime_dir}: {exc}") from exc


def register_cuda_compiler(dev) -> str:
    """A CUDA library built by this project holds CUDA source (the TVM wheel that builds it has no CUDA), which
    TVM's CUDA runtime compiles when the library loads, through the `tvm_callback_cuda_compile` callback.
    TVM's own callback (tvm.support.nvcc) needs the compiler library and compiles with fast math; this one calls
    nvcc for the device's architecture without fast math (SineGen's sin and the LSTM gates' exp and tanh keep
    full accuracy). Returns the command line (without file names) for results.json."""
    import tvm_ffi

    home_nvcc = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda")) / "bin" / "nvcc"
    nvcc = shutil.which("nvcc") or (str(home_nvcc) if home_nvcc.is_file() else None)
    if nvcc is None:
        raise BundleError("no nvcc to compile the CUDA kernels: put CUDA's bin folder on PATH or set CUDA_HOME")
    flags = ["--fatbin", "-O3", "-arch=sm_" + str(dev.compute_version).replace(".", "")]

    def compile_source(source: str) -> bytes:
        with tempfile.TemporaryDirectory() as tmp:
            (Path(tmp) / "kernels.cu").write_text(source)
            done = subprocess.run(
                [nvcc, *flags, "-o", "kernels.fatbin", "kernels.cu"], cwd=tmp, capture_output=True, text=True
            )
            if done.returncode != 0:  # its errors, not the unused-variable warnings TVM's source draws
                lines = done.stderr.splitlines()
                errors = [line.strip() for line in lines if "error" in line] or lines[-3:]
                raise BundleError(f"nvcc failed ({done.returncode}): {'; '.join(errors[:3])}")
            return (Path(tmp) / "kernels.fatbin").read_bytes()

    tvm_ffi.register_global_func("tvm_callback_cuda_compile", compile_source, override=True)
    version = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()
    return f"{nvcc} {' '.join(flags)} ({version[-1] if version else 'unknown version'})"
