"""The masked-LSTM recurrence as a GPU kernel (Metal, CUDA): one threadgroup per (direction, sample), one
thread per hidden unit, a serial loop over time, h shared in threadgroup memory.

Same contract as `kokoro_tvm.compiler.ops.lstm_tir.recurrence_kernel` (inputs, outputs, gate order, reverse
direction starting at each sample's own last valid step, zeros past the length) and the same summation
order (gates_x first, then k ascending), so it replaces that kernel one for one in a GPU build
(`kokoro_tvm.compiler.passes.gpu_recurrence`).

Each time step is three phases, each a loop over the threads: (1) every thread j computes its four gates
(rows j, H+j, 2H+j, 3H+j: w_hh_t's rows are contiguous over j, so a warp's loads coalesce), its cell state
and its new h into `h_next`; (2) h_next is copied into `h`, which phase 1 of the next step reads; (3) the
output row is written. TVM's ThreadSync pass puts a threadgroup barrier between phases that share memory.

Written with the thread loops as a parameter: `bind_threads=False` gives the same loop nest with serial
loops, which runs on the CPU and is how the tests check this kernel's arithmetic on a machine with no GPU.
Phases separated by barriers are exactly what serial loops over threads compute.
"""

from __future__ import annotations

from tvm.script import tirx as T

KERNEL_ATTR = "kokoro_tvm.kernel"  # marks the recurrence in a module so a GPU build can swap it
RECURRENCE = "masked_lstm_recurrence"


def recurrence_attrs(batch: int, hidden: int, dtype: str) -> dict:
    """The PrimFunc attributes that mark a masked-LSTM recurrence kernel and record its shape."""
    return {KERNEL_ATTR: RECURRENCE, "kokoro_tvm.batch": batch, "kokoro_tvm.hidden": hidden, "kokoro_tvm.dtype": dtype}


def recurrence_shape(func) -> tuple[int, int, str] | None:
    """(batch, hidden, dtype) of a PrimFunc marked by `recurrence_attrs`, None for any other PrimFunc."""
    attrs = func.attrs
    if attrs is None or attrs.get(KERNEL_ATTR) != RECURRENCE:
        return None
    return int(attrs["kokoro_tvm.batch"]), int(attrs["kokoro_tvm.hidden"]), str(attrs["kokoro_tvm.dtype"])


def gpu_recurrence_kernel(batch: int, hidden: int, dtype: str, bind_threads: bool = True):
    """PrimFunc(gates_x [2, B, T, 4H], w_hh_t [2, H, 4H], lengths [B] int64, out [B, T, 2H]) for any T."""
    four_h = 4 * hidden

    def groups(extent):  # one threadgroup per (direction, sample)
        return T.thread_binding(extent, thread="blockIdx.x") if bind_threads else T.serial(extent)

    def threads(extent):  # one thread per hidden unit
        return T.thread_binding(extent, thread="threadIdx.x") if bind_threads else T.serial(extent)

    scope = "shared" if bind_threads else "global"

    attrs = {"tirx.noalias": True, "tirx.is_scheduled": True, **recurrence_attrs(batch, hidden, dtype)}

    @T.prim_func(private=True)
    def lstm_recurrence_gpu(
        gates_x_handle: T.handle,
        w_hh_t: T.Buffer((2, hidden, four_h), dtype),
        lengths: T.Buffer((batch,), "int64"),
        out_handle: T.handle,
    ):
        T.func_attr(attrs)  # marked so a GPU build can find and swap it
        steps = T.int64()
        gates_x = T.match_buffer(gates_x_handle, (2, batch, steps, four_h), dtype)
        out = T.match_buffer(out_handle, (batch, steps, 2 * hidden), dtype)
        for group in groups(2 * batch):
            h = T.alloc_buffer((hidden,), dtype, scope=scope)
            h_next = T.alloc_buffer((hidden,), dtype, scope=scope)
            c = T.alloc_buffer((hidden,), dtype, scope=scope)
            for j in threads(hidden):
                h[j] = T.cast(0, dtype)
                c[j] = T.cast(0, dtype)
                for t_pad in range(steps):
                    out[group % batch, t_pad, group // batch * hidden + j] = T.cast(0, dtype)
            for step in range(steps):
                # the length test sits inside each thread loop: TVM cannot put a barrier under a condition
                for j in threads(hidden):
                    if step < lengths[group % batch]:
                        d = group // batch
                        b = group % batch
                        t = T.if_then_else(d == 0, step, lengths[b] - T.int64(1) - step)
                        gate_i = T.alloc_buffer((1,), dtype, scope="local")
                        gate_f = T.alloc_buffer((1,), dtype, scope="local")
                        gate_g = T.alloc_buffer((1,), dtype, scope="local")
                        gate_o = T.alloc_buffer((1,), dtype, scope="local")
                        gate_i[0] = gates_x[d, b, t, j]
                        gate_f[0] = gates_x[d, b, t, hidden + j]
                        gate_g[0] = gates_x[d, b, t, 2 * hidden + j]
                        gate_o[0] = gates_x[d, b, t, 3 * hidden + j]
                        for k in range(hidden):
                            gate_i[0] = gate_i[0] + w_hh_t[d, k, j] * h[k]
                            gate_f[0] = gate_f[0] + w_hh_t[d, k, hidden + j] * h[k]
                            gate_g[0] = gate_g[0] + w_hh_t[d, k, 2 * hidden + j] * h[k]
                            gate_o[0] = gate_o[0] + w_hh_t[d, k, 3 * hidden + j] * h[k]
                        c[j] = T.sigmoid(gate_f[0]) * c[j] + T.sigmoid(gate_i[0]) * T.tanh(gate_g[0])
                        h_next[j] = T.sigmoid(gate_o[0]) * T.tanh(c[j])
                for j in threads(hidden):
                    if step < lengths[group % batch]:
                        h[j] = h_next[j]
                for j in threads(hidden):
                    if step < lengths[group % batch]:
                        d_w = group // batch
                        b_w = group % batch
                        t_w = T.if_then_else(d_w == 0, step, lengths[b_w] - T.int64(1) - step)
                        out[b_w, t_w, d_w * hidden + j] = h[j]

    return lstm_recurrence_gpu
