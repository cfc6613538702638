"""`kokoro-tvm bench` on our kernels (NOTES/performance.md, notebook 08): the conv kernels alone against the
libraries' (`--conv-peak`, `conv_peak`: our fp32, bf16 and int8 convs against PyTorch's oneDNN and FBGEMM), where
a component's time goes by kernel group (`--kernel-split`, `kernel_time_split`), and how close its packed convs run
to the rate this CPU issues their instruction at (`--conv-rates`, `conv_rates`, `instruction_peak`)."""

from __future__ import annotations

import argparse
import warnings

import numpy as np

from kokoro_tvm.compiled import check_precision, compile_and_load
from kokoro_tvm.compiler.pipeline import aligned_conv_rows
from kokoro_tvm.compiler.symbolic import tile_count
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.components import NAMES, get_precision
from kokoro_tvm.errors import InputError
from kokoro_tvm.machine import amx_tiles
from kokoro_tvm.runtime.profile import kernel_seconds, kernel_split
from kokoro_tvm.runtime.vm import ComponentRunner
from kokoro_tvm.timing import interleaved, median_interleaved, set_threads


def _torch_int8_conv(x, w, padding: int, dilation: int):
    """PyTorch's int8 conv1d (FBGEMM: uint8 activations with one scale, int8 weights per output channel, VNNI
    where the CPU has it) on `x`, `w`, as a no-argument callable; None where this torch has no FBGEMM engine.
    The rate an int8 kernel of ours would be held to, the way oneDNN's bf16 rate holds our bf16 kernel."""

    import torch

    if "fbgemm" not in torch.backends.quantized.supported_engines:
        return None
    torch.backends.quantized.engine = "fbgemm"
    import torch.ao.nn.quantized.functional as quantized

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torch 2.13 marks quantized tensors deprecated
        qx = torch.quantize_per_tensor(x, float(x.abs().max()) / 127, 128, torch.quint8)
        scales = w.abs().amax(dim=(1, 2)) / 127
        qw = torch.quantize_per_channel(w, scales, torch.zeros(len(scales), dtype=torch.long), 0, torch.qint8)
    return lambda: quantized.conv1d(qx, qw, None, padding=padding, dilation=dilation, scale=1.0, zero_point=128)


def _int8_conv_module(channels: int, taps: int, dilation: int, steps: int):
    """A Relax module of our int8 conv kernel alone (kokoro_tvm.compiler.int8) on packed operands: uint8
    activations [1, C/4, steps + padding, 4] and int8 weights [C, C/4, taps, 4]; int32 out [1, C, steps]."""
    from tvm import relax

    from kokoro_tvm.compiler import int8

    bb = relax.BlockBuilder()
    x = relax.Var("x", relax.TensorType((1, channels // 4, steps + dilation * (taps - 1), 4), "uint8"))
    w = relax.Var("w", relax.TensorType((channels, channels // 4, taps, 4), "int8"))
    with bb.function("main", [x, w]):
        with bb.dataflow():
            out = bb.emit_output(bb.emit_te(int8.conv, x, w, dilation, primfunc_name_hint="int8_conv1d"))
        bb.emit_func_output(out)
    return bb.get()


def _fp32_conv_module(x_shape, w_shape, padding: int, dilation: int, rows: int | None = None):
    """A Relax module of one float32 conv1d; with `rows` fewer than the weight's, its first `rows` channels (a
    weight padded to whole row tiles, as passes.AlignConvRows leaves the model's convs on AVX2)."""
    from tvm import relax

    bb = relax.BlockBuilder()
    xv, wv = relax.Var("x", relax.TensorType(x_shape, "float32")), relax.Var("w", relax.TensorType(w_shape, "float32"))
    with bb.function("main", [xv, wv]):
        with bb.dataflow():
            out = bb.emit(relax.op.nn.conv1d(xv, wv, padding=padding, dilation=dilation))
            if rows is not None and rows < w_shape[0]:
                out = bb.emit(relax.op.strided_slice(out, axes=[1], begin=[0], end=[rows], assume_inbound=True))
            out = bb.emit_output(out)
        bb.emit_func_output(out)
    return bb.get()


def conv_peak(
    threads: int = 2, steps: int = 48_000, runs: int = 5, channels: int = 128, taps: int = 7, dilation: int = 3
) -> dict:
    """GFLOP/s of one conv1d shape (default: the generator's dominant layer, 128 -> 128 channels, kernel 7,
    dilation 3, `steps` samples) in torch (oneDNN) and in our TVM build, in float32 and, on a CPU with
    AVX512_BF16, in bf16 (torch on bf16 tensors; ours: kokoro_tvm.compiler.bf16), and in int8 (GOP/s: PyTorch's
    FBGEMM conv; on a CPU with AVX512_VNNI our kernel alone, kokoro_tvm.compiler.int8, on random packed
    operands): the practical compute limit for the decoder, `tvm_bf16_vs_torch_bf16` and
    `tvm_int8_vs_torch_int8`, our kernels' shares of the library rates."""
    import torch

    from kokoro_tvm.compiler.bf16 import host_supports_bf16
    from kokoro_tvm.compiler.int8 import host_supports_int8
    from kokoro_tvm.compiler.passes.align_conv_rows import padded_rows
    from kokoro_tvm.compiler.passes.bf16_convolutions import Bf16Convolutions

    set_threads(threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, steps)).astype(np.float32)
    w = (rng.standard_normal((channels, channels, taps)) * 0.05).astype(np.float32)
    padding = dilation * (taps - 1) // 2
    rows = padded_rows(channels, aligned_conv_rows(host_target()) or 1)  # zero rows, as the model's builds have
    w_ours = np.pad(w, ((0, rows - channels), (0, 0), (0, 0)))
    conv, bf16 = _fp32_conv_module(x.shape, w_ours.shape, padding, dilation, channels), host_supports_bf16()
    modules = {"tvm": conv, **({"tvm_bf16": Bf16Convolutions()(conv)} if bf16 else {})}
    px, pw = torch.from_numpy(x), torch.from_numpy(w)
    backends = {"torch": lambda: torch.nn.functional.conv1d(px, pw, padding=padding, dilation=dilation)}
    if bf16:
        bx, bw = px.bfloat16(), pw.bfloat16()
        backends["torch_bf16"] = lambda: torch.nn.functional.conv1d(bx, bw, padding=padding, dilation=dilation)
    int8 = _torch_int8_conv(px, pw, padding, dilation)
    if int8 is not None:
        backends["torch_int8"] = int8
    if host_supports_int8():
        runner = compile_and_load(_int8_conv_module(channels, taps, dilation, steps))
        quads = (1, channels // 4, steps + 2 * padding, 4)
        tensors = runner.device_inputs(
            rng.integers(0, 256, quads, dtype=np.uint8),
            rng.integers(-127, 128, (channels, channels // 4, taps, 4), dtype=np.int8),
        )
        backends["tvm_int8"] = lambda r=runner, t=tensors: r.run_on_device(*t)
    for name, mod in modules.items():
        runner = compile_and_load(mod)
        tensors = runner.device_inputs(x, w_ours)
        backends[name] = lambda r=runner, t=tensors: r.run_on_device(*t)
    with torch.no_grad():
        times = median_interleaved(backends, runs, 1)
    gflop = 2 * channels * channels * taps * steps / 1e9
    record = {
        "shape": f"conv1d {channels}->{channels}, k{taps}, d{dilation}, {steps} steps",
        "gflop": gflop,
        "threads": threads,
    } | {f"{name}_gflops": gflop / t for name, t in times.items()}
    if bf16:
        record["tvm_bf16_vs_torch_bf16"] = times["torch_bf16"] / times["tvm_bf16"]
    if "tvm_int8" in times and "torch_int8" in times:
        record["tvm_int8_vs_torch_int8"] = times["torch_int8"] / times["tvm_int8"]
    return record | amx_rates(threads, steps, runs, channels, taps, dilation)


def amx_rates(threads: int, steps: int, runs: int, channels: int, taps: int, dilation: int) -> dict:
    """Where this process may use AMX (kokoro_tvm.machine.amx_tiles): our tile conv (kokoro_tvm.compiler.amx)
    on the conv_peak shape in bf16 and int8 (GOP/s), the tile engine's peak from a tight loop of its multiply
    (`amx.peak_function`) and the conv's share of it; nothing elsewhere."""
    import tvm

    from kokoro_tvm.compiler import amx

    if not amx_tiles():
        return {}
    rng, record = np.random.default_rng(0), {}
    operations = 2 * channels * channels * taps * steps
    for name, kind in amx.KINDS.items():
        library = amx.rate_library(kind, channels, taps, dilation, threads, host_target())
        padded = steps + dilation * (taps - 1)
        x = rng.integers(0, 127, (1, channels // kind.group, padded, kind.group)).astype(kind.activation)
        w = rng.integers(0, 127, (taps, channels // kind.block_channels, channels, kind.block_channels))
        args = [tvm.runtime.tensor(x), tvm.runtime.tensor(w.astype(kind.weight))]
        args.append(tvm.runtime.tensor(np.zeros((1, channels, steps), kind.accumulator)))
        calls = 20_000
        tiles = [tvm.runtime.tensor(np.zeros((threads, 256), kind.accumulator))]
        tiles += [tvm.runtime.tensor(np.ones(1024, "uint8")) for _ in range(2)]
        conv_fn, peak_fn = library["amx_conv1d"], library["amx_peak"]
        peak_fn(*tiles, 100)  # threads up
        kernels = {
            "conv": lambda f=conv_fn, a=args: f(*a),
            "peak": lambda f=peak_fn, t=tiles, n=calls: f(*t, n),
        }
        times = median_interleaved(kernels, runs, 1)
        peak_ops = 2 * threads * calls * amx.PEAK_STEPS * amx.tile_multiply_adds(kind) / times["peak"]
        record[f"tvm_amx_{name}_gops"] = operations / times["conv"] / 1e9
        record[f"amx_{name}_peak_gops"] = peak_ops / 1e9
        record[f"tvm_amx_{name}_share_of_peak"] = operations / times["conv"] / peak_ops
    return record


def kernel_time_split(
    model,
    weights_fingerprint: str,
    component: str,
    length: int,
    precisions=("fp32", "bf16"),
    runs: int = 3,
    threads: int = 2,
) -> dict:
    """Where the symbolic build of `component` spends its time at `length` (a multiple of LENGTH_TILE), per
    precision: runtime.profile.kernel_seconds summed by runtime.profile.kernel_split, on the export's example
    inputs. Artifacts come from the build cache (built there if missing)."""
    import torch

    from kokoro_tvm.compiler.build import BuildSpec, build
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs

    set_threads(threads)
    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length), torch.float32)]
    record = {"component": component, "length": length, "runs": runs, "threads": threads}
    for name in precisions:
        spec = BuildSpec.dynamic(component, "float32", get_precision(name).arithmetic)
        runner = ComponentRunner(build(model, weights_fingerprint, spec))
        times = kernel_seconds(runner, runner.device_inputs(*inputs) + [runner.shape(tile_count(length))], runs)
        record[name] = {"total_s": sum(times.values()), **{f"{k}_s": v for k, v in kernel_split(times).items()}}
    return record


def instruction_peak(kind: str, threads: int = 2, steps: int = 4_000_000, runs: int = 5) -> float:
    """Operations per second of `kind`'s packed step alone (kokoro_tvm.compiler.peak.peak_loop), the best of
    `runs` calls of `steps` steps per thread: the rate no conv of ours can pass on this CPU; `conv_rates` reports
    our convs against it."""
    import tvm

    from kokoro_tvm.compiler.peak import LANES, PACKED_STEPS, PEAK_CHAINS, peak_loop

    function = peak_loop(kind, threads)[PACKED_STEPS[kind].mark]
    out = tvm.runtime.tensor(np.zeros((threads, PEAK_CHAINS * LANES), PACKED_STEPS[kind].accumulator))
    function(out, 1000)  # threads up
    best = min(interleaved({kind: lambda: function(out, steps)}, runs, warmup=0)[kind])
    return threads * steps * PEAK_CHAINS * PACKED_STEPS[kind].operations / best


def _packed_operands(args, kind: str):
    """(out channels, in channels, taps, output steps) of a packed conv call from its arguments: the weights are
    the 4-d packed tensor whose first axis is not the batch (int8: [o, c/4, k, 4] int8; bf16: [o, c/2, k, 2]
    uint16, beside the [1, c/2, t, 2] activations), the output the last argument."""
    dtype = "int8" if kind == "int8" else "uint16"
    packed = [a for a in args if hasattr(a, "shape") and len(a.shape) == 4 and str(a.dtype) == dtype]
    weights = packed[0] if kind == "int8" else packed[-1]
    o, groups, taps, width = (int(d) for d in weights.shape)
    return o, groups * width, taps, int(args[-1].shape[-1])


def _rates(calls: dict[str, list], seconds: dict[str, float], peaks: dict[str, float]) -> tuple[dict, list]:
    """Per packed kind, its convs' operations, seconds and rate against the kind's peak; and every conv function."""
    record, functions = {}, []
    for kind in peaks:
        mine = {name: sum(ops) for name, (k, ops) in calls.items() if k == kind}
        if not mine:
            continue
        total_ops, total_s = sum(mine.values()), sum(seconds[name] for name in mine)
        peak = peaks[kind]
        record[kind] = {
            "calls": sum(len(calls[n][1]) for n in mine),
            "gop": total_ops / 1e9,
            "seconds": total_s,
            "gops": total_ops / total_s / 1e9,
            "peak_gops": peak / 1e9,
            "share_of_peak": total_ops / total_s / peak,
        }
        functions += [
            {
                "function": name,
                "kind": kind,
                "calls": len(calls[name][1]),
                "seconds": seconds[name],
                "gops": ops / seconds[name] / 1e9,
            }
            for name, ops in mine.items()
        ]
    return record, functions


def conv_rates(
    model,
    weights_fingerprint: str,
    component: str,
    length: int,
    precision: str = "int8",
    runs: int = 5,
    threads: int = 2,
) -> dict:
    """The packed convs of `component`'s symbolic `precision` build at `length`, each timed inside the model
    (runtime.profile.kernel_seconds) with its multiply-adds from its arguments' shapes: per kind (int8, bf16)
    the operations, the seconds and their rate, against `instruction_peak` of that kind; and every conv
    function by its share of the time."""
    import torch
    import tvm

    from kokoro_tvm.compiler.build import BuildSpec, build
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs
    from kokoro_tvm.compiler.peak import PACKED_STEPS

    set_threads(threads)
    peaks = {kind: instruction_peak(kind, threads) for kind in PACKED_STEPS}  # before torch's threads wake
    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length), torch.float32)]
    spec = BuildSpec.dynamic(component, "float32", get_precision(precision).arithmetic)
    runner = ComponentRunner(build(model, weights_fingerprint, spec))
    tensors = runner.device_inputs(*inputs) + [runner.shape(tile_count(length))]
    calls: dict[str, list] = {}  # per packed conv function: its kind and each call's operation count

    def instrument(func, name, before, ret, *args):
        kind = next((k for k, step in PACKED_STEPS.items() if step.mark in name), None)
        if before and kind:
            o, c, k, t = _packed_operands(args, kind)
            calls.setdefault(name, [kind, []])[1].append(2 * o * c * k * t)
        return int(tvm.relax.VMInstrumentReturnKind.NO_OP)

    runner.set_instrument(instrument)
    runner.run_on_device(*tensors)
    runner.set_instrument(lambda *args: int(tvm.relax.VMInstrumentReturnKind.NO_OP))
    seconds = kernel_seconds(runner, tensors, runs)
    record = {"component": component, "length": length, "precision": precision, "threads": threads, "runs": runs}
    rates, functions = _rates(calls, seconds, peaks)
    record.update(rates, functions=sorted(functions, key=lambda f: -f["seconds"]))
    return record


def _loaded_model():
    import torch

    from kokoro_tvm.weights.resolve import load_kmodel

    return load_kmodel(None, dtype=torch.float32)


def run(args: argparse.Namespace) -> dict:
    """`kokoro-tvm bench --conv-peak [--steps N --channels C --taps K --dilation D]`: conv_peak;
    `--kernel-split COMPONENT:LENGTH [--precision fp32,bf16]`: kernel_time_split on the resolved weights;
    `--conv-rates COMPONENT:LENGTH [--precision int8]` (one precision, int8 unless given): conv_rates. Each a record
    (NOTES/performance.md quotes all three). A precision this CPU cannot run is one line, before any build."""

    default = "int8" if args.conv_rates else "fp32,bf16"
    precisions = (args.precision or default).split(",")
    if args.conv_rates and (len(precisions) > 1 or get_precision(precisions[0]).arithmetic == "full"):
        raise InputError(
            "--conv-rates times one build's packed bf16 or int8 convolutions (--precision bf16 or int8); "
            "an fp32 build's time by kernel group is --kernel-split COMPONENT:LENGTH --precision fp32"
        )
    if not args.conv_rates and not args.kernel_split:
        return conv_peak(args.threads, args.steps, args.runs, args.channels, args.taps, args.dilation)
    for name in precisions:  # a name that does not exist, or bf16/int8 on a CPU without AVX512_BF16/VNNI
        check_precision(name)
    component, length = _component_length(args.conv_rates or args.kernel_split)
    model, weights = _loaded_model()
    if args.conv_rates:
        return conv_rates(model, weights.fingerprint, component, length, precisions[0], args.runs, args.threads)
    return kernel_time_split(model, weights.fingerprint, component, length, precisions, args.runs, args.threads)


def _component_length(spec: str) -> tuple[str, int]:
    component, _, length = spec.partition(":")
    if component not in NAMES or not length.isdigit():
        raise InputError(f"expected COMPONENT:LENGTH with a component of {', '.join(NAMES)}, got {spec!r}")
    return component, int(length)
