"""The Relax VM with numpy in and numpy out: the one place that runs compiled code. Never imports torch, and on the
CPU not the `tvm` package either: TVM's runtime library through tvm_ffi runs a cached build. `import tvm` brings
the compiler too (libtvm_compiler.so, with LLVM), which running never uses: 147 MB resident and about a second of
every start (`load_runtime`).

- `VMRunner`: an executable (fresh from the compiler) or a loaded library, on one device, with optional
  parameters appended to every call (after a one-off weight transform, if the build lifted one).
- `ComponentRunner`: a VMRunner for one cached artifact (kokoro_tvm.artifacts): library and parameters; on the
  CPU the first load keeps what the transform made, and later loads start from that.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.machinery
import logging
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from kokoro_tvm.artifacts import Artifact, ArtifactError
from kokoro_tvm.machine import amx_tiles
from kokoro_tvm.runtime.devices import use_every_cpu

log = logging.getLogger(__name__)

POOLED_ALLOCATOR = 2  # the VM's allocator kind (TVM's VirtualMachine default)


@functools.cache
def load_runtime() -> SimpleNamespace:
    """tvm_ffi, TVM's runtime library (loaded as `import tvm` loads it, for its symbols to be global) and the tensor
    functions the runner needs from it. Where `tvm` is imported already, its library is the one loaded."""
    import tvm_ffi
    from tvm_ffi.libinfo import load_lib_ctypes

    # where the package is, found on sys.path without importing it (nor asking sys.modules)
    folder = Path(importlib.machinery.PathFinder.find_spec("tvm").origin).parent / "lib"
    load_lib_ctypes("tvm", "tvm_runtime", "RTLD_GLOBAL", extra_lib_paths=[folder])
    get = tvm_ffi.get_global_func
    return SimpleNamespace(
        ffi=tvm_ffi,
        alloc=get("runtime.TVMTensorAllocWithScope"),
        copy_from=get("runtime.TVMTensorCopyFromBytes"),
    )


def _device(name: str):
    """The device `name`, index 0; a GPU's runtime library comes with `import tvm`, which loads every one there is."""
    if name != "cpu":
        import tvm  # noqa: F401

    return load_runtime().ffi.device(name, 0)


def _host(tensor) -> np.ndarray:
    """A VM result as a numpy array of its own (tvm's Tensor where `tvm` is imported, else through DLPack)."""
    return tensor.numpy() if hasattr(tensor, "numpy") else np.from_dlpack(tensor).copy()


class VMRunner:
    """Call it with numpy inputs, get a tuple of numpy outputs (one per output of `function`)."""

    def __init__(
        self,
        executable,
        device: str = "cpu",
        params: Sequence[np.ndarray] = (),
        transform_params: str | None = None,
        function: str = "main",
        order: Sequence[int] | None = None,
    ):
        use_every_cpu()
        runtime = load_runtime()
        self.device = _device(device)
        self.function = function
        module = executable if isinstance(executable, runtime.ffi.Module) else executable.jit()
        self.vm = module["vm_load_executable"]()
        devices = [self.device] + ([runtime.ffi.device("cpu", 0)] if device != "cpu" else [])  # shapes: on the CPU
        self.vm["vm_initialization"](*[v for d in devices for v in (d.dlpack_device_type(), d.index, POOLED_ALLOCATOR)])
        self._shape = runtime.ffi.Shape
        # one parameter at a time, each host copy dropped once it is on the device (where the caller handed over
        # its list): the peak is one model's parameters plus one array, not two models' (the decoder: 216 MB)
        params = params if isinstance(params, list) else list(params)
        self.params = []
        for i in range(len(params)):
            self.params.append(self.tensor(params[i]))
            params[i] = None
        if order is not None:  # one array for several inputs (kept by an earlier load): one tensor, shared
            self.params = [self.params[i] for i in order]
        if transform_params:  # weight-only work lifted out of main at build time: done once, here
            lifted = self.vm[transform_params](self.params)
            self.params = [lifted[i] for i in range(len(lifted))]

    def tensor(self, array: np.ndarray):
        """`array` copied into a tensor of the runtime's own (aligned as compiled code expects) on the device."""
        array = np.ascontiguousarray(array)
        runtime = load_runtime()
        tensor = runtime.alloc(runtime.ffi.Shape(array.shape), runtime.ffi.dtype(str(array.dtype)), self.device, None)
        runtime.copy_from(tensor, array.ctypes.data_as(ctypes.c_void_p), array.nbytes)
        return tensor

    def device_inputs(self, *inputs: np.ndarray) -> list:
        """`inputs` copied to the device once (for timing the VM alone: `run_on_device`); a shape argument
        (`shape`) passes through."""
        return [x if isinstance(x, self._shape) else self.tensor(x) for x in inputs]

    def shape(self, *dims: int):
        """A shape argument (a symbolic-length build's `tiles` input: kokoro_tvm.compiler.symbolic)."""
        return self._shape([int(d) for d in dims])

    def set_instrument(self, instrument) -> None:
        """Call `instrument(func, name, before, ret, *args)` around every call the VM makes (TVM's VM
        instrument; it returns 0 to go on): how kernel profiles (runtime.profile) see each function."""
        self.vm["set_instrument"](load_runtime().ffi.convert(instrument))

    def run_on_device(self, *tensors):
        """One call on inputs already on the device; the VM's own result (no copy back)."""
        return self.vm[self.function](*tensors, *self.params)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        out = self.run_on_device(*self.device_inputs(*inputs))
        if isinstance(out, load_runtime().ffi.Tensor):
            return (_host(out),)
        return tuple(_host(out[i]) for i in range(len(out)))


class ComponentRunner(VMRunner):
    """One loaded artifact: its library on `device`, its parameters appended to every call."""

    def __init__(self, artifact: Artifact, device: str = "cpu"):
        self.artifact = artifact
        if artifact.manifest["key"].get("amx_kernel") and not amx_tiles():
            # its tile instructions would be SIGILL without the kernel's grant (kokoro_tvm.machine.amx_tiles)
            raise ArtifactError(
                f"{artifact.library.parent.name} uses AMX, which this process may not use (no amx_tile, or the "
                "kernel refused the tile state): rebuild here (the build then uses AVX-512 kernels)"
            )
        try:
            library = load_runtime().ffi.load_module(str(artifact.library))
        except Exception as exc:  # TVM raises its own error types for unreadable libraries
            raise ArtifactError(f"cannot load compiled library {artifact.library}: {exc}") from exc
        params = artifact.runtime_params()  # the transform's results where an earlier load kept them
        super().__init__(library, device, params.arrays, params.transform, order=params.order)
        if params.transform and device == "cpu":
            try:
                arrays, order = self._distinct_params()
            except (BufferError, TypeError, ValueError) as exc:  # a dtype numpy cannot view (none so far)
                log.warning("lifted parameters of %s not kept: %s", artifact.library.parent.name, exc)
            else:
                artifact.keep_lifted(arrays, order)

    def _distinct_params(self) -> tuple[list[np.ndarray], list[int]]:
        """The parameters as host arrays (views, no copy), each shared tensor once (ALBERT's one layer serves 12),
        and each input's index into them."""
        arrays, index, order = [], {}, []
        for tensor in self.params:
            array = np.from_dlpack(tensor)
            key = (array.ctypes.data, array.shape, array.dtype.str)
            if key not in index:
                index[key] = len(arrays)
                arrays.append(array)
            order.append(index[key])
        return arrays, order
