"""The kernel papermill starts for a notebook run (`pipeline`, `sweep`): on Unix-domain sockets in a private
temporary folder, not TCP ports on localhost. Over TCP, ipykernel 7 warns on every start that "all
communication ... is susceptible to eavesdropping", a line in every run's log that says nothing about the run;
a socket folder only its owner can open (mode 0700) needs no such warning. The folder goes when the kernel
shuts down.
"""

from __future__ import annotations

import os
import shutil
import tempfile

from jupyter_client.manager import AsyncKernelManager

# What papermill.execute_notebook takes as `kernel_manager_class` (nbclient imports it by name).
KERNEL_MANAGER = f"{__name__}.SocketFolderKernelManager"


class SocketFolderKernelManager(AsyncKernelManager):
    """An AsyncKernelManager whose kernel listens on IPC sockets `<private folder>/kernel-<port>`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.socket_folder = tempfile.mkdtemp(prefix="kokoro-tvm-kernel-")
        self.transport = "ipc"
        self.ip = os.path.join(self.socket_folder, "kernel")

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        if not restart:  # a restarted kernel binds in the same folder again
            shutil.rmtree(self.socket_folder, ignore_errors=True)

    cleanup_resources = _async_cleanup_resources
