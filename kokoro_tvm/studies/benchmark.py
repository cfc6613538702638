"""`kokoro-tvm bench`: TVM and the peers a user would pick instead (`studies.peers`: PyTorch eager,
`torch.compile`, ONNX Runtime fp32 on our own export, ONNX Runtime on the embedded int8 export) on the same
utterance, in one process, backends interleaved round by round, the median of `runs` timed rounds after `warmup`
rounds, with the spread (min, max) of the timed rounds.

- peers: `peers=("torch", "ort_int8")` picks some (default: all). `torch_compile` compiles during the first
  warm-up round (its seconds: `peers[...]["setup_s"]`), so `warmup` must be >= 1 with it. `tvm_vs[peer]` is the
  peer's median over TVM's; `torch_s`, `ort_int8_s`, `tvm_vs_torch`, `tvm_vs_ort` stay for those two peers.
- tvm: `TVMKokoro.run_stages` with the shapes `say --backend tvm` uses (default: the symbolic-length builds,
  padding to whole 8-step tiles included in the time), the chosen bucket set (`buckets="bucketed"`) or at exact lengths
  (`buckets="exact"`), host steps included, TVM's pool set to `threads`. Several policies, comma-separated
  (`"dynamic,bucketed,exact"`), are all timed in the same rounds: `tvm_s` is the first, `tvm_policies` has each
  one's median, spread and shapes. `precisions="fp32,bf16,int8"` adds TVM's bf16 build (kokoro_tvm.compiler.bf16)
  and int8 build (compiler.int8) to the same rounds: variant names `tvm[bf16]`, `tvm[bucketed,int8]`; the first
  precision and policy are `tvm`.
- per_component: each compiled component against the same component graph in torch eager (the padding-invariant
  wrappers TVM compiles), on the inputs the TVM run actually fed it.
- gflop_per_audio_s: torch's FlopCounterMode over the stock forward (convolutions and matmuls), per second of
  audio; tvm_gflops = that work over tvm_s.

Builds (and the cache) are outside the timed region. Threads are stated in the record; the same process runs
all backends, so machine noise hits them alike.
"""

from __future__ import annotations

import logging
import os
import statistics
import time
from collections.abc import Callable

import numpy as np

from kokoro_tvm.config import SAMPLE_RATE

log = logging.getLogger(__name__)

# 11-12 s of speech with the default voice: the "10+ s utterance".
DEFAULT_TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening, counting each step aloud, "
    "and when he reached the lamp he wiped the glass until it shone like the morning sea."
)


BENCH_PRECISIONS = ("fp32", "bf16", "int8")  # --precision values bench times (fp64 is for parity, not speed)


def _timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


# Seconds of idle before each backend's call. A thread pool spins for a while after its work (torch's OpenMP
# workers, ONNX Runtime's, TVM's) on the cores the next backend starts on: `--conv-peak` timed our int8 conv,
# which ran straight after PyTorch's, at 502 GOP/s without this pause and at 732 with it (NOTES/performance.md).
SETTLE_SECONDS = 0.05


def interleaved(
    backends: dict[str, Callable[[], object]], runs: int, warmup: int, settle: float = SETTLE_SECONDS
) -> dict[str, list[float]]:
    """Every backend once per round (`warmup` untimed rounds first), `settle` seconds of idle before each
    call: the seconds of each timed round."""
    for _ in range(warmup):
        for fn in backends.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in backends}
    for _ in range(runs):
        for name, fn in backends.items():
            time.sleep(settle)
            samples[name].append(_timed(fn))
    return samples


def _median_interleaved(backends: dict[str, Callable[[], object]], runs: int, warmup: int) -> dict[str, float]:
    return {name: statistics.median(values) for name, values in interleaved(backends, runs, warmup).items()}


def set_threads(threads: int) -> None:
    """torch's intra-op threads, and TVM's pool size through TVM_NUM_THREADS, which TVM reads when its pool
    starts (the first parallel kernel of the process). Not `runtime.config_threadpool`: it pins the calling
    thread to a core, and torch's OpenMP workers, started from that thread later, inherit the pin and end
    up sharing one core."""
    import torch

    torch.set_num_threads(threads)
    os.environ["TVM_NUM_THREADS"] = str(threads)


class _Recorder:
    """Wraps TVMKokoro.run_component so one run leaves each component's (length, inputs) behind."""

    def __init__(self, compiled):
        self.compiled, self.inputs = compiled, {}
        self._run = compiled.run_component

    def __enter__(self):
        def run_component(component, length, *inputs):
            self.inputs[component] = (length, [np.array(x) for x in inputs])
            return self._run(component, length, *inputs)

        self.compiled.run_component = run_component
        return self

    def __exit__(self, *exc):
        del self.compiled.run_component  # the class's method again


def bench(
    text: str = DEFAULT_TEXT,
    voice: str | None = None,
    threads: int = 2,
    runs: int = 5,
    warmup: int = 3,
    weights=None,
    components: bool = True,
    buckets: str = "default",
    peers: tuple[str, ...] | None = None,
    precisions: str = "fp32",
    language: str | None = None,
) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kokoro_tvm.compiled import check_precision, compiled_kokoro, resolve_precision
    from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, TextError, prepare
    from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of, load_voice
    from kokoro_tvm.reference.noise import ZeroNoise
    from kokoro_tvm.runtime.buckets import parse_buckets
    from kokoro_tvm.studies.peers import PEERS, TorchEager, make_peer
    from kokoro_tvm.weights.resolve import load_kmodel

    if runs < 1 or warmup < 0 or threads < 1:
        raise ValueError("runs and threads must be >= 1 and warmup >= 0")
    peers = PEERS if peers is None else tuple(peers)
    if "torch_compile" in peers and warmup < 1:
        raise ValueError("torch_compile compiles on its first call: give it at least one warm-up round")
    policies = [p.strip() for p in buckets.split(",") if p.strip()]
    if not policies or len(set(policies)) != len(policies):
        raise ValueError(f"--buckets takes one or more distinct policies, comma-separated; got {buckets!r}")
    arithmetics = [p.strip() for p in precisions.split(",") if p.strip()]
    if not arithmetics or len(set(arithmetics)) != len(arithmetics) or not set(arithmetics) <= set(BENCH_PRECISIONS):
        raise ValueError(f"--precision takes {', '.join(BENCH_PRECISIONS)}, comma-separated; got {precisions!r}")
    bucket_sets = {p: None if p == "exact" else parse_buckets(p) for p in policies}  # bad specs fail first
    for name in arithmetics:
        check_precision(resolve_precision(name)[1])  # a CPU without bf16: one line, before any work
    variants = [(p, a) for a in arithmetics for p in policies]  # the first is `tvm`
    chunks = prepare(text=text, language=language or language_of(voice or DEFAULT_VOICE) or DEFAULT_LANGUAGE)
    if len(chunks) != 1:
        raise TextError(f"bench takes one utterance (at most 510 phonemes); this text makes {len(chunks)} chunks")
    chunk, pack = chunks[0], load_voice(voice or DEFAULT_VOICE)
    style = pack.style(len(chunk.phonemes))
    set_threads(threads)
    model, info = load_kmodel(weights, dtype=torch.float32)
    eager = TorchEager(model)  # the utterance's length and FLOPs, whichever peers are timed
    audio_s = eager.speak(chunk.padded_ids, style).numel() / SAMPLE_RATE
    with FlopCounterMode(display=False) as counter:
        eager.speak(chunk.padded_ids, style)
    gflop = counter.get_total_flops() / 1e9

    setup = {}
    for name in peers:  # export / session creation outside the timed region; compile happens in the warm-up
        start = time.perf_counter()
        setup[name] = make_peer(name, model, info.fingerprint, threads)
        setup[name].setup_s = time.perf_counter() - start

    compiled = {
        (p, a): compiled_kokoro(
            model, info.fingerprint, "float32", buckets=bucket_sets[p], precision=resolve_precision(a)[1]
        )
        for p, a in variants
    }
    first = {}
    for index, (variant, runtime) in enumerate(compiled.items()):  # builds (or loads) outside the timed region
        if index == 0:
            with _Recorder(runtime) as recorder:
                first[variant] = runtime.run_stages(chunk.padded_ids, style, 1.0, ZeroNoise())
        else:
            first[variant] = runtime.run_stages(chunk.padded_ids, style, 1.0, ZeroNoise())

    def tvm_runner(runtime):
        return lambda: runtime.run_stages(chunk.padded_ids, style, 1.0, ZeroNoise())

    def variant_name(index, policy, arithmetic):
        parts = [part for part, usual in ((policy, policies[0]), (arithmetic, "fp32")) if part != usual]
        return "tvm" if index == 0 else f"tvm[{','.join(parts) or policy}]"

    names = {v: variant_name(i, *v) for i, v in enumerate(variants)}
    samples = interleaved(
        {
            **{name: (lambda p=peer: p.speak(chunk.padded_ids, style, 1.0)) for name, peer in setup.items()},
            **{names[v]: tvm_runner(runtime) for v, runtime in compiled.items()},
        },
        runs,
        warmup,
    )
    totals = {name: statistics.median(values) for name, values in samples.items()}
    lead = first[variants[0]]
    record = {
        "text": text,
        "voice": pack.name,
        "utterance_s": round(audio_s, 3),
        "threads": threads,
        "runs": runs,
        "tvm_s": totals["tvm"],
        "peers": {
            name: {
                "s": totals[name],
                "spread_s": [min(samples[name]), max(samples[name])],
                "setup_s": getattr(peer, "compile_s", None) or peer.setup_s,
            }
            for name, peer in setup.items()
        },
        "tvm_vs": {name: totals[name] / totals["tvm"] for name in setup},
        "rtf": {name: value / audio_s for name, value in totals.items()},
        "spread_s": {name: [min(values), max(values)] for name, values in samples.items()},
        "gflop_per_audio_s": gflop / audio_s,
        "tvm_gflops": gflop / totals["tvm"],
        "weights_fingerprint": info.fingerprint,
        "tvm_buckets": _describe(bucket_sets[policies[0]]),
        "tvm_precision": arithmetics[0],
        "lengths": {"tokens": len(chunk.padded_ids), "frames": lead.n_frames},
        "tvm_shapes": {"tokens": lead.buckets[0], "frames": lead.buckets[1]},
        "tvm_policies": {
            names[v]: {
                "buckets": _describe(bucket_sets[v[0]]),
                "precision": v[1],
                "s": totals[names[v]],
                "spread_s": [min(samples[names[v]]), max(samples[names[v]])],
                "shapes": {"tokens": first[v].buckets[0], "frames": first[v].buckets[1]},
                "padded_frames": first[v].buckets[1] / lead.n_frames - 1,
                "vs_first": totals[names[v]] / totals["tvm"],
            }
            for v in variants
        },
    }
    for name, key, ratio in (("torch", "torch_s", "tvm_vs_torch"), ("ort_int8", "ort_int8_s", "tvm_vs_ort")):
        if name in setup:
            record[key], record[ratio] = totals[name], record["tvm_vs"][name]
    if components:
        record["per_component"] = _per_component(model, compiled[variants[0]], recorder.inputs, runs, warmup)
    return record


def describe_run(record: dict) -> str:
    """One line on what a bench record timed: the text, how long, how many threads and rounds."""
    text = record["text"] if len(record["text"]) <= 90 else record["text"][:87] + "..."
    return (
        f"\"{text}\": {record['utterance_s']:.1f} s of speech ({record['lengths']['tokens']} tokens, "
        f"{record['lengths']['frames']} frames), {record['threads']} threads, median of {record['runs']} "
        "interleaved rounds"
    )


def backend_rows(record: dict) -> list[dict]:
    """One row per timed backend of a bench record: median, spread, RTF, its time over TVM's, one-time setup."""
    rows = []
    for name, rtf in record["rtf"].items():
        peer = record["peers"].get(name)
        median = peer["s"] if peer else record["tvm_policies"][name]["s"]
        rows.append({
            "backend": name,
            "median_s": median,
            "spread_s": record["spread_s"][name],
            "rtf": rtf,
            "vs_tvm": median / record["tvm_s"],
            "setup_s": peer["setup_s"] if peer else None,
        })
    return rows


def _describe(bucket_set) -> str:
    return bucket_set.describe() if bucket_set else "exact"


def _per_component(model, compiled, recorded: dict, runs: int, warmup: int) -> dict:
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from kokoro_tvm.compiler.export import component_module
    from kokoro_tvm.compiler.patches import export_patches

    result = {}
    with export_patches(model), torch.no_grad():
        for component, (length, inputs) in recorded.items():
            module = component_module(model, component)
            torch_inputs = [torch.from_numpy(x) for x in inputs]
            runner = compiled.runner(component, length)
            tiles = [] if runner.artifact.length_tile is None else [runner.shape(length // runner.artifact.length_tile)]
            with FlopCounterMode(display=False) as counter:
                module(*torch_inputs)
            times = _median_interleaved(
                {
                    "torch": lambda m=module, x=torch_inputs: m(*x),
                    "tvm": lambda r=runner, x=inputs + tiles: r(*x),
                },
                runs,
                warmup,
            )
            build = runner.artifact.manifest.get("seconds", {})
            result[component] = {
                "length": length,
                "torch_s": times["torch"],
                "tvm_s": times["tvm"],
                "gflop": counter.get_total_flops() / 1e9,
                "build_s": sum(build.values()) if build else None,
            }
    return result


def _torch_int8_conv(x, w, padding: int, dilation: int):
    """PyTorch's int8 conv1d (FBGEMM: uint8 activations with one scale, int8 weights per output channel, VNNI
    where the CPU has it) on `x`, `w`, as a no-argument callable; None where this torch has no FBGEMM engine.
    The rate an int8 kernel of ours would be held to, the way oneDNN's bf16 rate holds our bf16 kernel."""
    import warnings

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
    from tvm import relax

    from kokoro_tvm.compiled import compile_and_load
    from kokoro_tvm.compiler.bf16 import Bf16Convolutions, host_supports_bf16
    from kokoro_tvm.compiler.int8 import host_supports_int8

    set_threads(threads)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, steps)).astype(np.float32)
    w = (rng.standard_normal((channels, channels, taps)) * 0.05).astype(np.float32)
    padding = dilation * (taps - 1) // 2
    bb = relax.BlockBuilder()
    xv, wv = relax.Var("x", relax.TensorType(x.shape, "float32")), relax.Var("w", relax.TensorType(w.shape, "float32"))
    with bb.function("main", [xv, wv]):
        with bb.dataflow():
            out = bb.emit_output(relax.op.nn.conv1d(xv, wv, padding=padding, dilation=dilation))
        bb.emit_func_output(out)
    bf16 = host_supports_bf16()
    modules = {"tvm": bb.get(), **({"tvm_bf16": Bf16Convolutions()(bb.get())} if bf16 else {})}
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
        tensors = runner.device_inputs(x, w)
        backends[name] = lambda r=runner, t=tensors: r.run_on_device(*t)
    with torch.no_grad():
        times = _median_interleaved(backends, runs, 1)
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
    return record


def kernel_time_split(model, weights_fingerprint: str, component: str, length: int, precisions=("fp32", "bf16"),
                      runs: int = 3, threads: int = 2) -> dict:
    """Where the symbolic build of `component` spends its time at `length` (a multiple of LENGTH_TILE), per
    precision: runtime.profile.kernel_seconds summed by runtime.profile.kernel_split, on the export's example
    inputs. Artifacts come from the build cache (built there if missing)."""
    import torch

    from kokoro_tvm.compiled import resolve_precision
    from kokoro_tvm.compiler.build import BuildSpec, build
    from kokoro_tvm.compiler.export import ComponentShape, example_inputs
    from kokoro_tvm.compiler.symbolic import tile_count
    from kokoro_tvm.runtime.profile import kernel_seconds, kernel_split
    from kokoro_tvm.runtime.vm import ComponentRunner

    set_threads(threads)
    inputs = [x.numpy() for x in example_inputs(ComponentShape(component, length), torch.float32)]
    record = {"component": component, "length": length, "runs": runs, "threads": threads}
    for name in precisions:
        spec = BuildSpec.dynamic(component, "float32", resolve_precision(name)[1])
        runner = ComponentRunner(build(model, weights_fingerprint, spec))
        times = kernel_seconds(runner, runner.device_inputs(*inputs) + [runner.shape(tile_count(length))], runs)
        record[name] = {"total_s": sum(times.values()), **{f"{k}_s": v for k, v in kernel_split(times).items()}}
    return record


def main(argv: list[str] | None = None) -> None:
    """`python -m kokoro_tvm.studies.benchmark --conv-peak [--steps N --channels C --taps K --dilation D]`: one
    JSON line of conv_peak; `--kernel-split COMPONENT:LENGTH [--precision fp32,bf16]`: one JSON line of
    kernel_time_split on the resolved weights (NOTES/performance.md quotes both)."""
    import argparse
    import json

    parser = argparse.ArgumentParser(prog="python -m kokoro_tvm.studies.benchmark")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--conv-peak", action="store_true")
    mode.add_argument("--kernel-split", metavar="COMPONENT:LENGTH")
    parser.add_argument("--precision", default="fp32,bf16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=48_000)
    parser.add_argument("--channels", type=int, default=128)
    parser.add_argument("--taps", type=int, default=7)
    parser.add_argument("--dilation", type=int, default=3)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args(argv)
    if args.kernel_split:
        import torch

        from kokoro_tvm.weights.resolve import load_kmodel

        component, length = args.kernel_split.split(":")
        model, weights = load_kmodel(None, dtype=torch.float32)
        record = kernel_time_split(model, weights.fingerprint, component, int(length), args.precision.split(","),
                                   args.runs, args.threads)
        print(json.dumps(record))
        return
    print(json.dumps(conv_peak(args.threads, args.steps, args.runs, args.channels, args.taps, args.dilation)))


if __name__ == "__main__":
    main()
