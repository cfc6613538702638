"""TVM lowering of the length-aware bidirectional LSTM: a Relax matmul for the input projection (hoisted out of
the time loop) and one TIR kernel that runs the recurrence with a serial loop over time.

The kernel's IR size does not depend on T (no unrolling). It is dtype-generic (float32 / float64).
"""

from __future__ import annotations

import math

from tvm import relax
from tvm.script import tirx as T

from kokoro_tvm.compiler.ops.lstm_gpu import recurrence_attrs


def recurrence_kernel(batch: int, hidden: int, dtype: str):
    """PrimFunc(gates_x [2, B, T, 4H], w_hh_t [2, H, 4H], lengths [B] int64, out [B, T, 2H]) for any T: the
    time axis is a symbolic int64 bound from the buffers, so one kernel serves static and dynamic builds.

    gates_x holds x @ W_ih^T + b_ih + b_hh per direction; w_hh_t is W_hh transposed, so the per-step
    mat-vec runs over contiguous rows in whole vectors. Direction 1 walks t = length-1 .. 0. PyTorch's gate
    order (i, f, g, o). Outputs at t >= length are 0. The two directions run on two threads; the sum over k
    keeps PyTorch's order (k ascending), so float64 results do not depend on the vector width.
    """
    four_h = 4 * hidden
    lanes = math.gcd(four_h, 16 if dtype == "float32" else 8)  # one 512-bit vector
    chunks = four_h // lanes

    attrs = {"tirx.noalias": True, **recurrence_attrs(batch, hidden, dtype)}

    @T.prim_func(private=True)
    def lstm_recurrence(
        gates_x_handle: T.handle,
        w_hh_t: T.Buffer((2, hidden, four_h), dtype),
        lengths: T.Buffer((batch,), "int64"),
        out_handle: T.handle,
    ):
        T.func_attr(attrs)  # marked so a GPU build can find and swap it
        steps = T.int64()
        gates_x = T.match_buffer(gates_x_handle, (2, batch, steps, four_h), dtype)
        out = T.match_buffer(out_handle, (batch, steps, 2 * hidden), dtype)
        h = T.alloc_buffer((2, batch, hidden), dtype)
        c = T.alloc_buffer((2, batch, hidden), dtype)
        gates = T.alloc_buffer((2, batch, four_h), dtype)
        for d in T.parallel(2):
            for b in range(batch):
                for j in range(hidden):
                    h[d, b, j] = T.cast(0, dtype)
                    c[d, b, j] = T.cast(0, dtype)
                for t_pad, j in T.grid(steps, hidden):
                    out[b, t_pad, d * hidden + j] = T.cast(0, dtype)
                for step in range(steps):
                    if step < lengths[b]:
                        t = T.if_then_else(d == 0, step, lengths[b] - T.int64(1) - step)
                        for g0 in range(chunks):
                            for g1 in T.vectorized(lanes):
                                gates[d, b, g0 * lanes + g1] = gates_x[d, b, t, g0 * lanes + g1]
                        for k in range(hidden):
                            for g0 in range(chunks):
                                for g1 in T.vectorized(lanes):
                                    gates[d, b, g0 * lanes + g1] = (
                                        gates[d, b, g0 * lanes + g1] + w_hh_t[d, k, g0 * lanes + g1] * h[d, b, k]
                                    )
                        for j in range(hidden):
                            c[d, b, j] = T.sigmoid(gates[d, b, hidden + j]) * c[d, b, j] + T.sigmoid(
                                gates[d, b, j]
                            ) * T.tanh(gates[d, b, 2 * hidden + j])
                            h[d, b, j] = T.sigmoid(gates[d, b, 3 * hidden + j]) * T.tanh(c[d, b, j])
                            out[b, t, d * hidden + j] = h[d, b, j]

    return lstm_recurrence


def emit_masked_lstm(block_builder: relax.BlockBuilder, x, lengths, weights) -> relax.Var:
    """Emit the LSTM for relax values x [B, T, I], lengths [B] int64 and the 8 weights (op order)."""
    w_ih, w_hh, b_ih, b_hh, w_ih_r, w_hh_r, b_ih_r, b_hh_r = weights
    batch, steps = int(x.ty.shape[0]), x.ty.shape[1]  # steps: an int or a symbolic length
    four_h, hidden = (int(v) for v in w_hh.ty.shape)
    dtype = x.ty.dtype
    emit = block_builder.emit

    def projection(w, b_i, b_h):  # [B, T, 4H]: the whole sequence in one matmul
        return relax.op.add(relax.op.matmul(x, relax.op.permute_dims(w)), relax.op.add(b_i, b_h))

    gates_x = emit(relax.op.stack([projection(w_ih, b_ih, b_hh), projection(w_ih_r, b_ih_r, b_hh_r)], axis=0))
    w_stack = emit(relax.op.stack([relax.op.permute_dims(w_hh), relax.op.permute_dims(w_hh_r)], axis=0))
    kernel = block_builder.add_func(recurrence_kernel(batch, hidden, dtype), "masked_lstm_recurrence")
    out_ty = relax.TensorType((batch, steps, 2 * hidden), dtype)
    return emit(relax.call_tir(kernel, [gates_x, w_stack, lengths], out_ty))
