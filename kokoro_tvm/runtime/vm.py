"""The Relax VM with numpy in and numpy out: the one place that runs compiled code. Never imports torch.

- `VMRunner`: an executable (fresh from the compiler) or a loaded library, on one device, with optional
  parameters appended to every call (after a one-off weight transform, if the build lifted one).
- `ComponentRunner`: a VMRunner for one cached artifact (kokoro_tvm.artifacts): library and parameters; on the
  CPU the first load keeps what the transform made, and later loads start from that.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import numpy as np

from kokoro_tvm.artifacts import Artifact, ArtifactError
from kokoro_tvm.machine import amx_tiles
from kokoro_tvm.runtime.devices import use_every_cpu

log = logging.getLogger(__name__)


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
        import tvm

        use_every_cpu()
        self.device = tvm.device(device, 0)
        self.function = function
        self.vm = tvm.relax.VirtualMachine(executable, self.device)
        self._tensor, self._shape = tvm.runtime.tensor, tvm.runtime.ShapeTuple
        # one parameter at a time, each host copy dropped once it is on the device (where the caller handed over
        # its list): the peak is one model's parameters plus one array, not two models' (the decoder: 216 MB)
        params = params if isinstance(params, list) else list(params)
        self.params = []
        for i in range(len(params)):
            self.params.append(self._tensor(np.ascontiguousarray(params[i]), device=self.device))
            params[i] = None
        if order is not None:  # one array for several inputs (kept by an earlier load): one tensor, shared
            self.params = [self.params[i] for i in order]
        if transform_params:  # weight-only work lifted out of main at build time: done once, here
            lifted = self.vm[transform_params](self.params)
            self.params = [lifted[i] for i in range(len(lifted))]

    def device_inputs(self, *inputs: np.ndarray) -> list:
        """`inputs` copied to the device once (for timing the VM alone: `run_on_device`); a shape argument
        (`shape`) passes through."""
        return [
            x if isinstance(x, self._shape) else self._tensor(np.ascontiguousarray(x), device=self.device)
            for x in inputs
        ]

    def shape(self, *dims: int):
        """A shape argument (a symbolic-length build's `tiles` input: kokoro_tvm.compiler.symbolic)."""
        return self._shape([int(d) for d in dims])

    def run_on_device(self, *tensors):
        """One call on inputs already on the device; the VM's own result (no copy back)."""
        return self.vm[self.function](*tensors, *self.params)

    def __call__(self, *inputs: np.ndarray) -> tuple[np.ndarray, ...]:
        out = self.run_on_device(*self.device_inputs(*inputs))
        if hasattr(out, "numpy"):
            return (out.numpy(),)
        return tuple(out[i].numpy() for i in range(len(out)))


class ComponentRunner(VMRunner):
    """One loaded artifact: its library on `device`, its parameters appended to every call."""

    def __init__(self, artifact: Artifact, device: str = "cpu"):
        import tvm

        self.artifact = artifact
        if artifact.manifest["key"].get("amx_kernel") and not amx_tiles():
            # its tile instructions would be SIGILL without the kernel's grant (kokoro_tvm.machine.amx_tiles)
            raise ArtifactError(
                f"{artifact.library.parent.name} uses AMX, which this process may not use (no amx_tile, or the "
                "kernel refused the tile state): rebuild here (the build then uses AVX-512 kernels)"
            )
        try:
            library = tvm.runtime.load_module(str(artifact.library))
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
