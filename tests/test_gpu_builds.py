"""GPU builds (unit tier, no GPU needed): the GPU LSTM kernel's arithmetic, Metal and CUDA code generation of
small components with every kernel bound and the source complete, the checks themselves, and clear errors
where no device exists."""

import re
import shutil
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import torch
import tvm
from tvm.script import tirx as T

from kokoro_tvm.compiler.build import BuildSpec
from kokoro_tvm.compiler.gpu_launches import Launch, launches_of, primfunc_launches, unbound_functions
from kokoro_tvm.compiler.gpu_sources import build_sources, gpu_lstm_check, nvcc_check, source_problems
from kokoro_tvm.compiler.targets import check_dtype
from kokoro_tvm.weights.resolve import kmodel_skeleton


@pytest.fixture(scope="module")
def random_model():
    torch.manual_seed(0)
    return kmodel_skeleton().eval()


def test_gpu_lstm_kernel_computes_what_the_cpu_kernel_does():
    check = gpu_lstm_check(batch=3, hidden=8, steps=7, seed=1)
    assert check["lengths"] == [7, 4, 1]
    # same operations in the same order (gates_x first, then k ascending) on the same float64 inputs: equal
    assert check["gpu_twin_vs_cpu_kernel"] == 0.0
    # against torch's packed LSTM only the summation order differs: float64 rounding, a few ulps of O(1) values
    assert check["gpu_twin_vs_torch"] < 1e-12
    assert check["tail_is_zero"]


@pytest.fixture(scope="module")
def metal_text_encoder(random_model):
    return build_sources(random_model, BuildSpec("text_encoder", 8), "metal")


def test_metal_text_encoder_is_fully_bound_and_complete(metal_text_encoder):
    build = metal_text_encoder
    assert build.problems() == [] and build.unbound == []
    assert build.kernel_count == sum(len(ls) for ls in build.launches.values()) > 5
    assert all(0 < launch.threads_per_group <= 1024 for ls in build.launches.values() for launch in ls)
    lstm = [name for name in build.kernels if name.startswith("masked_lstm_recurrence")]
    assert len(lstm) == 1  # our GPU kernel replaced the CPU loop kernel
    text = build.kernels[lstm[0]]
    assert "threadgroup float h[256]" in text and text.count("threadgroup_barrier") >= 2
    assert build.launches["masked_lstm_recurrence"] == [Launch(grid=[2, 1, 1], threadgroup=[256, 1, 1])]
    # coverage: every function scheduled by exactly one dlight rule, or the hand-written LSTM kernel
    assert sum(build.coverage.values()) == len(build.launches)
    assert build.coverage["masked LSTM (hand-written)"] == 1 and build.coverage.get("Matmul", 0) >= 1


def test_metal_refuses_float64():
    with pytest.raises(ValueError, match="Metal has no float64"):
        check_dtype("float64", "metal")


def test_metal_computes_the_float64_islands_of_a_float32_graph_in_float32():
    """The export rounds SineGen's phase mix as PyTorch does through float64 (compiler.export.mix_neighbours);
    Metal has none, so its pipeline drops those casts (and the CPU / CUDA one keeps them)."""
    from tvm import relax

    from kokoro_tvm.compiler.pipeline import phases
    from kokoro_tvm.compiler.targets import METAL_TARGET

    bb = relax.BlockBuilder()
    x, w = (relax.Var(name, relax.TensorType((4, 8), "float32")) for name in ("x", "w"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            wide = relax.op.add(
                relax.op.multiply(relax.op.astype(x, "float64"), relax.op.astype(w, "float64")),
                relax.op.astype(relax.op.multiply(x, w), "float64"),
            )
            out = bb.emit_output(relax.op.astype(wide, "float32"))
        bb.emit_func_output(out)
    rewrite = dict(phases(METAL_TARGET))["rewrite"]
    demoted = tvm.transform.Sequential(rewrite)(bb.get())
    assert "float64" not in demoted.script() and "float64" in bb.get().script()
    cpu_rewrites = {getattr(p, "info", None) and p.info.name for p in dict(phases({"kind": "llvm"}))["rewrite"]}
    assert "DemoteFloat64" not in cpu_rewrites and "CumsumInFloat64" in cpu_rewrites


def test_metal_duration_component_builds(random_model):
    build = build_sources(random_model, BuildSpec("duration", 8), "metal")
    assert build.problems() == [] and build.kernel_count >= len(build.launches)
    assert "kernel void" in build.source and build.target["thread_warp_size"] == 32


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: CUDA sources not compiled")
@pytest.mark.parametrize("component", ["text_encoder", "f0n"])  # f0n: masks in conv epilogues (CODEGEN_CONFIG)
def test_cuda_sources_compile_with_nvcc(random_model, component):
    build = build_sources(random_model, BuildSpec(component, 8), "cuda")
    assert build.problems() == []
    verdict = nvcc_check(build.source)
    assert verdict["status"] == "compiled", verdict
    assert verdict["ptx_entries"] == build.kernel_count


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: CUDA sources not compiled")
def test_symbolic_cuda_build_is_inventoried_and_compiles_with_nvcc(random_model, tmp_path):
    """`gpu-build --symbolic`: the build the runtime uses for every length, every kernel bound (its host-side
    shape function is not a kernel) and assembled by nvcc."""
    from kokoro_tvm.compiler.gpu_sources import build_components

    (entry,) = build_components(random_model, "cuda", {"text_encoder": 8}, tmp_path, symbolic=True)["components"]
    assert entry["symbolic"] and entry["length"] == 512 and entry["problems"] == [] and entry["unbound"] == []
    assert entry["nvcc"]["status"] == "compiled" and entry["nvcc"]["ptx_entries"] == entry["kernel_count"]


def test_checks_find_unbound_functions_missing_kernels_and_cut_sources(metal_text_encoder):
    @T.prim_func(private=True)
    def serial(a: T.Buffer((4,), "float32"), b: T.Buffer((4,), "float32")):
        for i in range(4):
            b[i] = a[i] + T.float32(1)

    assert launches_of(serial) == []
    assert unbound_functions({"serial": [], "bound": [Launch([1, 1, 1], [4, 1, 1])]}) == ["serial"]
    build = metal_text_encoder
    name = sorted(build.kernels)[0]
    missing = replace(build, kernels={k: v for k, v in build.kernels.items() if k != name})
    assert any("launches but 0 kernels" in p for p in source_problems(missing))
    cut = replace(build, kernels=dict(build.kernels, **{name: build.kernels[name].rsplit("}", 1)[0]}))
    assert any(p.startswith(f"kernel {name}: incomplete body") for p in source_problems(cut))
    stray = replace(build, kernels=dict(build.kernels, not_from_this_module_kernel="kernel void x() {}"))
    assert any("belongs to no PrimFunc" in p for p in source_problems(stray))


@pytest.mark.skipif(tvm.device("metal", 0).exist, reason="this machine has a Metal device")
def test_say_on_a_missing_device_is_one_clear_error():
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "kokoro_tvm.cli",
            "say",
            "Hello.",
            "-o",
            "/dev/null",
            "--backend",
            "tvm",
            "--device",
            "metal",
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    errors = [line for line in done.stderr.splitlines() if "error" in line.lower()]  # INFO logs may come first
    assert len(errors) == 1 and errors[0].startswith("kokoro-tvm: error: no metal device on this machine")
    assert "Traceback" not in done.stderr


def test_launches_of_the_gpu_lstm_kernel():
    from kokoro_tvm.compiler.ops.lstm_gpu import gpu_recurrence_kernel

    # one threadgroup per (direction, sample), one thread per hidden unit; the time axis is symbolic
    assert launches_of(gpu_recurrence_kernel(3, 8, "float32")) == [Launch(grid=[6, 1, 1], threadgroup=[8, 1, 1])]


@pytest.mark.parametrize(
    "args, message",
    [
        (["gpu-build", "--components", "albert,vocoder"], "unknown component(s) ['vocoder']"),
        (["compare", "--text", "Hi.", "--device", "metal", "--precision", "fp64"], "Metal has no float64"),
        (
            ["say", "Hi.", "-o", "/dev/null", "--backend", "torch", "--device", "cuda"],
            "--device cuda applies to the tvm backend only",
        ),
        (["gpu-check", "--target", "cuda", "--bundle-only", "--batches", "8,x"], "must be a positive integer"),
    ],
)
def test_gpu_cli_errors_are_one_line(args, message):
    done = subprocess.run([sys.executable, "-m", "kokoro_tvm.cli", *args], capture_output=True, text=True)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def _row_mean(frames, channels=512):
    """y[c] = sum_t x[c, t] * w[t]: the masked AdaIN's mean over time, which dlight's GEMV rule schedules
    (int64 sizes, as Relax's legalized functions have them)."""
    from tvm import te, tirx

    one, channels, frames = (
        size if not isinstance(size, int) else tirx.IntImm("int64", size) for size in (1, channels, frames)
    )
    x, w = te.placeholder((one, channels, frames), name="x"), te.placeholder((frames,), name="w")
    t = te.reduce_axis((0, frames), name="t")
    y = te.compute((one, channels), lambda b, c: te.sum(x[b, c, t] * w[t], axis=t), name="y")
    return te.create_prim_func([x, w, y]).with_attr("global_symbol", "main")


def test_gpu_rules_stay_within_a_blocks_shared_memory():
    """dlight's GEMV rule caches whole rows in shared memory: over 7712 decoder frames that is 482 KiB, which
    ptxas refuses (48 KiB per block). Guarded, the GEMV schedule is refused there and the next rule
    (Reduction) takes the function; a short row keeps GEMV's schedule."""
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.schedule.gpu import DEFAULT_SHARED_BYTES, WithinSharedMemory, shared_bytes

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    with target:
        long_gemv = dlight.gpu.GEMV().apply(_row_mean(7712), target, False)
        assert shared_bytes(long_gemv.mod) == 16 * 7712 * 4 > DEFAULT_SHARED_BYTES  # 16 rows a block
        assert WithinSharedMemory(dlight.gpu.GEMV()).apply(_row_mean(7712), target, False) is None
        reduction = WithinSharedMemory(dlight.gpu.Reduction()).apply(_row_mean(7712), target, False)
        assert reduction is not None and shared_bytes(reduction.mod) == 0
        short = WithinSharedMemory(dlight.gpu.GEMV()).apply(_row_mean(100), target, False)
        assert short is not None and 0 < shared_bytes(short.mod) <= DEFAULT_SHARED_BYTES


def test_few_long_rows_take_a_block_each_not_a_warp():
    """dlight's GEMV rule gives each row one warp, 16 rows a block: the masked AdaIN's sums over the audio-rate
    rows (128 channels of 960 s + 32 samples) ran on 8 blocks of an H100's 132 multiprocessors. Rows longer
    than there are rows go to the Reduction rule, a block of 1024 threads per row; more rows than samples (512
    channels of 100 frames) keep GEMV."""
    from tvm import tirx
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.gpu_launches import launches_of
    from kokoro_tvm.compiler.schedule.gpu import rules

    tiles = tirx.Var("s", "int64")
    symbolic = _row_mean(tiles * 960 + 32, channels=128)
    symbolic = tirx.PrimFunc([*symbolic.params, tiles], symbolic.body, attrs=symbolic.attrs)  # s: a parameter
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    for func, rule, blocks, threads in [
        (symbolic, "Reduction", 128, 1024),
        (_row_mean(7712, channels=128), "Reduction", 128, 1024),
        (_row_mean(100), "GEMV", 32, 512),
    ]:
        counts: dict[str, int] = {}
        with target:
            scheduled = dlight.ApplyDefaultSchedule(*rules(counts))(tvm.IRModule({"main": func}))
        (launch,) = launches_of(scheduled["main"])
        assert counts == {rule: 1} and launch.grid[0] == blocks and launch.threads_per_group == threads, launch
        with target:
            unguarded = dlight.ApplyDefaultSchedule(dlight.gpu.GEMV())(tvm.IRModule({"main": func}))
        assert launches_of(unguarded["main"])[0].threads_per_group == 512  # what GEMV alone gives every row


@T.prim_func(private=True, s_tir=True)
def _f0_conv(
    x_handle: T.handle, w: T.Buffer((T.int64(1), T.int64(1), T.int64(3)), "float32"), y_handle: T.handle, s: T.int64
):
    """The decoder's F0 conv (one channel, kernel 3, stride 2, padded) for a symbolic length of 16 s frames."""
    T.func_attr({"tirx.noalias": True})
    x = T.match_buffer(x_handle, (T.int64(1), T.int64(1), s * T.int64(16)))
    y = T.match_buffer(y_handle, (T.int64(1), T.int64(1), s * T.int64(8)))
    pad = T.sblock_alloc_buffer((T.int64(1), T.int64(1), s * T.int64(16) + T.int64(2)))
    for i0, i1, i2 in T.grid(T.int64(1), T.int64(1), s * T.int64(16) + T.int64(2)):
        with T.sblock("pad"):
            v0, v1, v2 = T.axis.remap("SSS", [i0, i1, i2])
            pad[v0, v1, v2] = T.if_then_else(
                T.int64(1) <= v2 and v2 <= s * T.int64(16), x[v0, v1, v2 - T.int64(1)], T.float32(0.0)
            )
    for n, f, t, c, k in T.grid(T.int64(1), T.int64(1), s * T.int64(8), T.int64(1), T.int64(3)):
        with T.sblock("conv"):
            vn, vf, vt, vc, vk = T.axis.remap("SSSRR", [n, f, t, c, k])
            with T.init():
                y[vn, vf, vt] = T.float32(0.0)
            y[vn, vf, vt] = y[vn, vf, vt] + pad[vn, vc, vt * T.int64(2) + vk] * w[vf, vc, vk]


def test_gpu_rules_refuse_shared_buffers_of_symbolic_size():
    """dlight's GEMV rule caches the F0 conv's whole input row in shared memory; for a symbolic length that row
    has no bound, TVM's byte count calls it 0, and CUDA code generation refuses it. Counted at its largest it
    is over the limit, so the next rule takes the conv, with no shared memory, and the module compiles."""
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.schedule.gpu import DEFAULT_SHARED_BYTES, WithinSharedMemory, rules, shared_bytes

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    func = _f0_conv.with_attr("global_symbol", "main")
    with target:
        gemv = dlight.gpu.GEMV().apply(func, target, False)
        assert shared_bytes(gemv.mod) > DEFAULT_SHARED_BYTES
        with pytest.raises(tvm.error.InternalError, match="constant size stack allocation"):
            tvm.compile(gemv.mod, target=target)
        assert WithinSharedMemory(dlight.gpu.GEMV()).apply(func, target, False) is None
        scheduled = dlight.ApplyDefaultSchedule(*rules())(tvm.IRModule({"main": func}))
        assert shared_bytes(scheduled) == 0
        tvm.compile(scheduled, target=target)


def _interleave(batch: int):
    """The x300 upsampling's polyphase interleave for `batch` utterances of a symbolic length (16 s frames):
    y[b, 0, i] = x[b, i % 5, i // 5], as in the decoder's harmonic-source path."""

    @T.prim_func(private=True, s_tir=True)
    def interleave(x_handle: T.handle, y_handle: T.handle, s: T.int64):
        T.func_attr({"tirx.noalias": True})
        x = T.match_buffer(x_handle, (T.int64(batch), T.int64(5), s * T.int64(960) + T.int64(35)))
        y = T.match_buffer(y_handle, (T.int64(batch), T.int64(1), s * T.int64(4800) + T.int64(175)))
        for i0, i1, i2 in T.grid(T.int64(batch), T.int64(1), s * T.int64(4800) + T.int64(175)):
            with T.sblock("interleave"):
                v0, v1, v2 = T.axis.remap("SSS", [i0, i1, i2])
                y[v0, v1, v2] = x[v0, v2 % T.int64(5), v2 // T.int64(5)]

    return interleave.with_attr("global_symbol", "main")


def test_batched_element_wise_work_keeps_the_batch_off_the_length_index():
    """dlight's Fallback fuses the batch with the symbolic length; for the polyphase interleave at batch 4 TVM
    then cannot lower the index (the batch-4 decoder's CUDA build stopped there). Its schedule is refused and
    BatchRowsOnGridY puts the batch on the grid's y axis, which compiles; at batch 1 Fallback keeps it."""
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.schedule.gpu import rules

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    with target:
        fallback = dlight.gpu.Fallback().apply(_interleave(4), target, False)
        with pytest.raises(tvm.error.InternalError, match="padding factor"):
            tvm.compile(fallback.mod, target=target)
        for batch, rule in ((1, "Fallback"), (4, "BatchRowsOnGridY")):
            counts: dict[str, int] = {}
            scheduled = dlight.ApplyDefaultSchedule(*rules(counts))(tvm.IRModule({"main": _interleave(batch)}))
            (launch,) = launches_of(scheduled["main"])
            assert counts == {rule: 1} and launch.grid[1] == batch and launch.threads_per_group == 1024, launch
            tvm.compile(scheduled, target=target)


def test_a_rule_whose_primitive_refuses_declines_and_the_next_rule_schedules():
    """dlight's Matmul accepted the batch-4 decoder's strided conv and then its `pad_einsum` (and, elsewhere, its
    own assert) refused it, which stopped the whole build; guarded, such a rule declines and the next one tries.
    Other errors still stop the build."""
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.schedule.gpu import DeclinesWhereItCannotApply

    class Refuses:
        def __init__(self, error):
            self.error = error

        def apply(self, func, target, tunable):
            raise self.error

    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    with target:
        scheduled = dlight.ApplyDefaultSchedule(
            DeclinesWhereItCannotApply(Refuses(AssertionError("consumers not inlined"))), dlight.gpu.Fallback()
        )(tvm.IRModule({"main": _interleave(1)}))
        assert launches_of(scheduled["main"])  # Fallback bound it
        with pytest.raises(ValueError):
            guarded = DeclinesWhereItCannotApply(Refuses(ValueError("a bug")))
            dlight.ApplyDefaultSchedule(guarded)(tvm.IRModule({"main": _interleave(1)}))


@pytest.mark.parametrize("outer, inner, steps", [(2, 9, 20000), (1, 300, 40)])  # 300 columns: 3 blocks of 128
def test_gpu_running_sum_kernel_sums_as_pytorchs_cpu_cumsum(outer, inner, steps):
    """The serial GPU running sum, its thread loops serial so that it runs here, with a float64 accumulator: bit
    for bit PyTorch's CPU cumsum of float32 (which keeps a double). With a float32 accumulator it is not: at
    20,000 steps of increments up to 0.1 the float32 sum drifts by about 5e-3."""
    from kokoro_tvm.compiler.ops.running_sum_gpu import gpu_running_sum_kernel

    x = (np.random.default_rng(0).random((outer, steps, inner)) * 0.1).astype(np.float32)
    expected = torch.cumsum(torch.from_numpy(x), dim=1).numpy()

    def run(accumulator):
        kernel = gpu_running_sum_kernel(outer, inner, "float32", accumulator, bind_threads=False)
        library = tvm.compile(tvm.IRModule({"main": kernel.with_attr("global_symbol", "main")}), target="llvm")
        out = tvm.runtime.tensor(np.zeros_like(x))
        library["main"](tvm.runtime.tensor(x), out)
        return out.numpy()

    assert np.array_equal(run("float64"), expected)
    if steps >= 20000:
        assert not np.array_equal(run("float32"), expected)


def test_cuda_running_sum_of_a_symbolic_length_compiles():
    """TVM's GPU scan divides by the length in its log2(N) passes, so a cumsum of symbolic length stops the
    build ("Find divide by zero"); our pipeline puts the serial kernel in its place and the module compiles.
    Its launch inventory leaves out the host-side shape function a symbolic length brings."""
    from tvm import relax, tirx

    from kokoro_tvm.compiler.gpu_sources import device_source
    from kokoro_tvm.compiler.pipeline import compile_lowered, lower, phases
    from kokoro_tvm.compiler.targets import gpu_target

    frames = tirx.Var("frames", "int64")
    builder = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, frames, 9), "float32"))  # SineGen's nine harmonics
    with builder.function("main", [x]):
        with builder.dataflow():
            out = builder.emit_output(relax.op.cumsum(x, axis=1))
        builder.emit_func_output(out)
    target = tvm.target.Target(gpu_target("cuda"))
    lowered = lower(builder.get(), target)
    # the VM's shape function runs on the host: not a kernel left unbound
    assert "shape_func" in [gv.name_hint for gv in lowered.functions]
    assert unbound_functions(primfunc_launches(lowered)) == []
    source = device_source(compile_lowered(lowered, target), "cuda")
    assert "running_sum_gpu_kernel" in source and "double" in source
    named = phases(target)
    without = [p for p in named[0][1] if getattr(p, "info", None) is None or p.info.name != "UseGPURunningSum"]
    assert len(without) == len(named[0][1]) - 1
    stock = tvm.transform.Sequential(without + [p for _, passes in named[1:] for p in passes])
    with target, pytest.raises(tvm.error.InternalError, match="divide by zero"):
        compile_lowered(stock(builder.get()), target)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not installed: CUDA sources not compiled")
def test_the_nvcc_check_assembles_so_resource_limits_fail_it():
    """PTX alone accepted the decoder whose kernel needed 482 KiB of shared memory; ptxas refuses it."""
    source = """extern "C" __global__ void too_much(float* out) {
      __shared__ float rows[20000];  // 80 000 bytes, over the 48 KiB a block may have
      rows[threadIdx.x] = threadIdx.x;
      __syncthreads();
      out[threadIdx.x] = rows[19999 - threadIdx.x];
    }"""
    verdict = nvcc_check(source, "sm_90")
    assert verdict["status"] == "failed" and "too much shared data" in " ".join(verdict["errors"])
    assert nvcc_check(source.replace("20000", "2000").replace("19999", "1999"), "sm_90")["status"] == "compiled"


def test_symbolic_gpu_reductions_across_threads_are_combined_not_raced():
    """A LayerNorm mean over 512 channels for a symbolic number of rows, scheduled by dlight with the threads of
    a block splitting each row. CompactSymbolicBuffers lowers blocks early (for the CPU's register tiles); it
    must first lower the cross-thread reduction, as TVM's own lowering does, or every thread adds into one
    shared float at once (a race: on an H200 the symbolic duration and text encoder were wrong by 4-100%)."""
    from tvm import te, tirx
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler.passes.compact_symbolic_buffers import CompactSymbolicBuffers
    from kokoro_tvm.compiler.schedule.gpu import rules

    tiles = tirx.Var("tiles", "int64")
    x = te.placeholder((1, tiles * 8, 512), name="x")
    c = te.reduce_axis((0, 512), name="c")
    total = te.compute((1, tiles * 8), lambda b, t: te.sum(x[b, t, c], axis=c), name="total")
    y = te.compute((1, tiles * 8, 512), lambda b, t, k: x[b, t, k] - total[b, t] / 512.0, name="y")
    func = te.create_prim_func([x, y])
    func = tirx.PrimFunc([*func.params, tiles], func.body, attrs=func.attrs)  # the size as a scalar parameter
    target = tvm.target.Target({"kind": "cuda", "arch": "sm_80", "host": {"kind": "llvm"}})
    with target:
        mod = dlight.ApplyDefaultSchedule(*rules())(tvm.IRModule({"main": func.with_attr("global_symbol", "main")}))
        mod = CompactSymbolicBuffers()(mod)
        module = tvm.compile(mod, target=target).mod
    source = (module.imports if hasattr(module, "imports") else module.imported_modules)[0].inspect_source()
    assert "__shfl_down_sync" in source  # the threads' partial sums combined by a warp reduction


def _running_sums(exclusive: bool):
    """[4, n] summed along n and [n, 3] along n (and, if `exclusive`, [n, 3] exclusively) for a symbolic n."""
    from tvm import relax, tirx

    n = tirx.Var("n", "int64")
    rows = relax.Var("rows", relax.TensorType((4, n), "float32"))
    columns = relax.Var("columns", relax.TensorType((n, 3), "float32"))
    builder = relax.BlockBuilder()
    with builder.function("main", [rows, columns]):
        with builder.dataflow():
            sums = [relax.op.cumsum(rows, axis=1), relax.op.cumsum(columns, axis=0)]
            sums += [relax.op.cumsum(columns, axis=0, exclusive=True)] if exclusive else []
            out = builder.emit_output(relax.Tuple(sums))
        builder.emit_func_output(out)
    return builder.get()


def test_running_sums_of_other_ranks_and_axes_take_the_serial_kernel_and_exclusive_ones_do_not():
    """Sums along other axes go through the kernel's [outer, N, inner] view (a reshape each way) and compile for
    CUDA with a symbolic length; an exclusive running sum is left to TVM (the kernel sums inclusively)."""
    from kokoro_tvm.compiler.gpu_sources import device_source
    from kokoro_tvm.compiler.pipeline import compile_lowered, lower, phases
    from kokoro_tvm.compiler.targets import gpu_target

    target = tvm.target.Target(gpu_target("cuda"))
    with target:
        rewritten = tvm.transform.Sequential(dict(phases(target))["rewrite"])(_running_sums(exclusive=True))
    kernels = [gv for gv in rewritten.functions if gv.name_hint.startswith("running_sum_gpu")]
    assert len(kernels) == 2 and rewritten.script().count("R.cumsum(") == 1  # the exclusive one stays
    source = device_source(compile_lowered(lower(_running_sums(exclusive=False), target), target), "cuda")
    kernels = set(re.findall(r"void __launch_bounds__\(\d+\) (\w+)\(", source))
    assert {"running_sum_gpu_kernel", "running_sum_gpu1_kernel"} <= kernels
