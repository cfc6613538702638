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
