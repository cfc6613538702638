"""Reading a packed kernel's x86 assembly in tests (bf16's vdpbf16ps, int8's vpdpbusd)."""

from __future__ import annotations

import re


def executable_asm(executable) -> str:
    """The assembly of every library a Relax executable imports (a TIR executable's own, where it imports none)."""
    return "\n".join(m.inspect_source("asm") for m in executable.mod.imports or [executable.mod])


def hot_loop(asm: str, mnemonic: str) -> tuple[int, list[str]]:
    """(how many `mnemonic` the basic block with the most of them holds, the vector stores to memory in that block
    up to its first jump): a kernel whose tile stays in registers stores nothing there."""
    blocks = re.split(r"\n(?=\.LBB)", asm)
    hot = max(blocks, key=lambda block: block.count(mnemonic))
    loop = re.split(r"\n\s*j\w+\s", hot)[0]
    stores = [line for line in loop.splitlines() if re.match(r"\s*vmov\w*\s+%[xyz]mm\d+, [^%]", line)]
    return hot.count(mnemonic), stores


# A CPU with every instruction our packed kernels use (AVX512_BF16's vdpbf16ps, AVX512_VNNI's vpdpbusd), whose
# code LLVM emits on any x86-64 machine: a test that only reads a kernel's code reads it for this CPU where the
# machine running the tests lacks the instructions (an AVX2 CI machine), instead of being skipped there
ZEN4 = {"kind": "llvm", "mcpu": "znver4"}


def code_target(runs_here: bool) -> dict | None:
    """The target a kernel's code is read for: this machine's where it runs the kernel (`runs_here`), else ZEN4 on
    x86-64, else None (no x86 code to read)."""
    import platform

    from kokoro_tvm.compiler.targets import host_target

    if runs_here:
        return host_target()
    return ZEN4 if platform.machine().lower() in ("x86_64", "amd64") else None
