"""Where a GPU build's kernels launch: for a scheduled PrimFunc, each outermost thread-bound loop starts one
kernel launch, and the extents of the thread-bound loops inside it give its grid and threadgroup sizes
(kokoro_tvm.compiler.gpu_sources inventories and checks builds with them). A PrimFunc with no launch is not
bound to GPU threads: `unbound_functions` names those before TVM's VerifyMemory would stop the build."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Launch:
    """One kernel launch of a PrimFunc: grid (threadgroups) and threadgroup sizes, per axis x, y, z."""

    grid: list[int]
    threadgroup: list[int]

    @property
    def threads_per_group(self) -> int:
        return self.threadgroup[0] * self.threadgroup[1] * self.threadgroup[2]


def _children(stmt):
    from tvm import s_tir, tirx

    if isinstance(stmt, tirx.SeqStmt):
        return list(stmt.seq)
    if isinstance(stmt, tirx.IfThenElse):
        if isinstance(stmt.condition, tirx.IntImm):  # a constant condition: only the live branch is code
            live = stmt.then_case if int(stmt.condition) else stmt.else_case
            return [live] if live is not None else []
        return [s for s in (stmt.then_case, stmt.else_case) if s is not None]
    if isinstance(stmt, s_tir.SBlockRealize):
        return [stmt.block]
    if isinstance(stmt, s_tir.SBlock):
        return [s for s in (stmt.init, stmt.body) if s is not None]
    body = getattr(stmt, "body", None)
    return [body] if isinstance(body, tirx.Stmt) else []


def _thread_tag(stmt) -> str | None:
    from tvm import tirx

    if isinstance(stmt, tirx.For) and stmt.kind == tirx.ForKind.THREAD_BINDING:
        return str(stmt.thread_binding.thread_tag)
    if isinstance(stmt, tirx.AttrStmt) and stmt.attr_key == "thread_extent":
        return str(stmt.node.thread_tag)
    return None


def _extent(stmt) -> int:
    from tvm import tirx

    value = stmt.extent if isinstance(stmt, tirx.For) else stmt.value
    try:
        return int(value)
    except TypeError:  # a symbolic extent (dynamic length): recorded as -1
        return -1


def launches_of(func) -> list[Launch]:
    """The kernel launches of a scheduled PrimFunc: each outermost thread-bound loop starts one; the extents
    of every thread-bound loop inside it give its grid and threadgroup sizes."""
    launches: list[Launch] = []

    def collect(stmt, sizes: dict[str, int]):
        tag = _thread_tag(stmt)
        if tag is not None:
            sizes[tag] = max(sizes.get(tag, 1), _extent(stmt))
        for child in _children(stmt):
            collect(child, sizes)

    def find(stmt):
        if _thread_tag(stmt) is not None:
            sizes: dict[str, int] = {}
            collect(stmt, sizes)
            launches.append(
                Launch(
                    grid=[sizes.get(f"blockIdx.{a}", 1) for a in "xyz"],
                    threadgroup=[sizes.get(f"threadIdx.{a}", 1) for a in "xyz"],
                )
            )
            return
        for child in _children(stmt):
            find(child)

    find(func.body)
    return launches


def primfunc_launches(lowered) -> dict[str, list[Launch]]:
    """PrimFunc name -> launches, for every device PrimFunc of a lowered module (an empty list: not bound).
    Host functions are left out: a symbolic-length build's `shape_func` (the VM's shape arithmetic) runs on
    the CPU."""
    from tvm import tirx

    return {
        gv.name_hint: launches_of(f)
        for gv, f in lowered.functions.items()
        if isinstance(f, tirx.PrimFunc) and not (f.attrs and f.attrs.get("tirx.is_host_func"))
    }


def unbound_functions(launches: dict[str, list[Launch]]) -> list[str]:
    return sorted(name for name, ls in launches.items() if not ls)
