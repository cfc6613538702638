"""`kokoro-tvm bench`: TVM and the peers a user would pick instead (kokoro_tvm.peers: PyTorch eager,
`torch.compile`, ONNX Runtime fp32 on our own export, ONNX Runtime on the embedded int8 export, kokoro-onnx on both,
OpenVINO f32 and bf16 on our own conversion) on the same utterance, in one process, backends interleaved round by
round (kokoro_tvm.timing), the median of `runs` timed rounds after `warmup` rounds, with the spread (min, max) of
the timed rounds, and beside each speed what its audio buys (`quality`: durations, log-mel L1 and PESQ-WB against
PyTorch fp32, evaluation.quality). TVM, the reference and the peers that take SineGen's noise as inputs all get
the noise `compare` and `say` draw by default (seed 0, `record["noise"]`), in the timed calls too; the other peers
draw their own, as stock Kokoro does. `bench --first-audio` is kokoro_tvm.commands.bench_first_audio.

- peers: `peers=("torch", "ort_int8")` picks some (default: all). `torch_compile` and the OpenVINO peers compile
  on their first call, before the rounds (its seconds: `peers[...]["setup_s"]`); `warmup` must be >= 1 with them.
  `tvm_vs[peer]` is the peer's median over TVM's; `torch_s`, `ort_int8_s`, `tvm_vs_torch`, `tvm_vs_ort` stay for
  those two peers.
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

import argparse
import json
import logging
import statistics
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from kokoro_tvm.commands import bench_kernels
from kokoro_tvm.commands.bench_first_audio import first_audio_record
from kokoro_tvm.compiled import check_precision, compiled_kokoro
from kokoro_tvm.components import TIMED_PRECISIONS, precision_list
from kokoro_tvm.config import SAMPLE_RATE
from kokoro_tvm.errors import InputError
from kokoro_tvm.evaluation.quality import backend_quality, torch_seeded_quality
from kokoro_tvm.frontend.text import DEFAULT_LANGUAGE, one_chunk
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, language_of, load_voice
from kokoro_tvm.machine import machine
from kokoro_tvm.reference.noise import SeededNoise
from kokoro_tvm.report import cpu_rows
from kokoro_tvm.runtime.buckets import parse_buckets
from kokoro_tvm.timing import interleaved, median_interleaved, set_threads

log = logging.getLogger(__name__)

# SineGen's noise in every run that can take it: the seed `compare` and `say` use by default, so bench's quality
# column is the measure notebook 07's bars are set in. Zero noise scored PyTorch fp32 itself at PESQ-WB 4.42
# against PyTorch float64 on a 13.6 s paragraph (TVM fp32: 4.61); seeded, both 4.63 (NOTES/performance.md).
QUALITY_SEED = 0

# 11-12 s of speech with the default voice: an utterance of 10+ s, where per-call costs do not decide the ratios.
DEFAULT_TEXT = (
    "The old lighthouse keeper climbed the spiral stairs every evening, counting each step aloud, "
    "and when he reached the lamp he wiped the glass until it shone like the morning sea."
)


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


@dataclass(frozen=True)
class _Plan:
    """What one bench run times, checked before any work: peers, TVM variants ((policy, precision); the first
    is `tvm`, the others `tvm[...]` by how they differ from it) and each policy's bucket set."""

    peers: tuple[str, ...]
    variants: tuple[tuple[str, str], ...]
    bucket_sets: dict

    @classmethod
    def check(cls, peers, buckets: str, precisions: str, runs: int, warmup: int, threads: int) -> _Plan:
        from kokoro_tvm.peers.catalog import COMPILING_PEERS, runnable_peers

        if runs < 1 or warmup < 0 or threads < 1:
            raise InputError("runs and threads must be >= 1 and warmup >= 0")
        peers = runnable_peers() if peers is None else tuple(peers)
        compiling = [p for p in peers if p in COMPILING_PEERS]
        if compiling and warmup < 1:
            raise InputError(f"{', '.join(compiling)} compile on the first call: give at least one warm-up round")
        policies = [p.strip() for p in buckets.split(",") if p.strip()]
        if not policies or len(set(policies)) != len(policies):
            raise InputError(f"--buckets takes one or more distinct policies, comma-separated; got {buckets!r}")
        chosen = [p.name for p in precision_list(precisions, TIMED_PRECISIONS)]
        bucket_sets = {p: None if p == "exact" else parse_buckets(p) for p in policies}  # bad specs fail first
        for name in chosen:
            check_precision(name)  # a CPU without bf16: one line, before any work
        return cls(peers, tuple((p, a) for a in chosen for p in policies), bucket_sets)

    def name(self, variant: tuple[str, str]) -> str:
        if variant == self.variants[0]:
            return "tvm"
        parts = [part for part, usual in zip(variant, self.variants[0], strict=True) if part != usual]
        return f"tvm[{','.join(parts)}]"


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
    """TVM's variants and the peers on one utterance, in one process, interleaved round by round (module
    docstring); one record with medians, spreads, RTFs, setup costs and, with `components`, per component."""
    import torch

    from kokoro_tvm.peers.catalog import make_peer
    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.weights.resolve import load_kmodel

    plan = _Plan.check(peers, buckets, precisions, runs, warmup, threads)
    chunk = one_chunk(text, language or language_of(voice or DEFAULT_VOICE) or DEFAULT_LANGUAGE, "bench")
    pack = load_voice(voice or DEFAULT_VOICE)
    style = pack.style(len(chunk.phonemes))
    set_threads(threads)
    model, info = load_kmodel(weights, dtype=torch.float32)
    noise = SeededNoise(QUALITY_SEED)
    setup = {}
    for name in plan.peers:  # export / session creation outside the timed region; compile happens in the warm-up
        start = time.perf_counter()
        setup[name] = make_peer(name, model, info.fingerprint, threads, pack, noise)
        setup[name].setup_s = time.perf_counter() - start
    compiled = {
        v: compiled_kokoro(model, info.fingerprint, v[1], buckets=plan.bucket_sets[v[0]]) for v in plan.variants
    }
    first = {}
    with _Recorder(compiled[plan.variants[0]]) as recorder:  # builds (or loads) outside the timed region
        for variant, runtime in compiled.items():
            first[variant] = runtime.run_stages(chunk.padded_ids, style, 1.0, noise)
    speakers = {name: (lambda p=peer: p.speak(chunk.padded_ids, style, 1.0)) for name, peer in setup.items()}
    peer_audio = {name: _seeded(speak, torch) for name, speak in speakers.items()}  # compiling peers compile here
    reference = run_stages(model, chunk.padded_ids, style, 1.0, noise)
    for variant, runtime in compiled.items():
        speakers[plan.name(variant)] = lambda r=runtime: r.run_stages(chunk.padded_ids, style, 1.0, noise)
    samples = interleaved(speakers, runs, warmup)
    record = {"text": text, "voice": pack.name, "threads": threads, "runs": runs, "machine": machine().as_dict()}
    record.update(noise=noise.description, weights_fingerprint=info.fingerprint)
    size = _utterance_size(model, chunk, style, reference)
    record.update(_timings(plan, samples, setup, first, size, len(chunk.padded_ids)))
    durations = {name: peer.durations for name, peer in setup.items() if getattr(peer, "durations", None) is not None}
    record["quality"] = backend_quality(
        reference, peer_audio, durations, {plan.name(v): stages for v, stages in first.items()}
    )
    record["quality"].update(torch_seeded_quality(model, chunk.padded_ids, style, peer_audio, QUALITY_SEED))
    if components:
        record["per_component"] = _per_component(model, compiled[plan.variants[0]], recorder.inputs, runs, warmup)
    return record


def _seeded(speak, torch):  # a peer's untimed first call, torch's generator seeded: evaluation.quality's judge
    torch.manual_seed(QUALITY_SEED)
    return np.asarray(speak())


def _utterance_size(model, chunk, style, reference) -> tuple[float, float]:
    """The utterance's seconds of audio (the reference run's: PyTorch's durations) and GFLOPs, from PyTorch eager."""
    from torch.utils.flop_counter import FlopCounterMode

    from kokoro_tvm.peers.catalog import TorchEager

    with FlopCounterMode(display=False) as counter:
        TorchEager(model).speak(chunk.padded_ids, style)
    return reference.audio.size / SAMPLE_RATE, counter.get_total_flops() / 1e9


def _timings(plan: _Plan, samples: dict, setup: dict, first: dict, size: tuple[float, float], tokens: int) -> dict:
    """The record's timing fields: medians, spreads, RTFs and ratios of every peer and TVM variant."""
    (audio_s, gflop), lead = size, first[plan.variants[0]]
    totals = {name: statistics.median(values) for name, values in samples.items()}
    spread = {name: [min(values), max(values)] for name, values in samples.items()}
    peers = {
        name: {"s": totals[name], "spread_s": spread[name], "setup_s": getattr(peer, "compile_s", None) or peer.setup_s}
        for name, peer in setup.items()
    }
    policies = {
        plan.name(v): {
            "buckets": _describe(plan.bucket_sets[v[0]]),
            "precision": v[1],
            "s": totals[plan.name(v)],
            "spread_s": spread[plan.name(v)],
            "shapes": {"tokens": first[v].buckets[0], "frames": first[v].buckets[1]},
            "padded_frames": first[v].buckets[1] / lead.n_frames - 1,
            "vs_first": totals[plan.name(v)] / totals["tvm"],
        }
        for v in plan.variants
    }
    record = {
        "utterance_s": round(audio_s, 3),
        "tvm_s": totals["tvm"],
        "peers": peers,
        "tvm_vs": {name: totals[name] / totals["tvm"] for name in setup},
        "rtf": {name: value / audio_s for name, value in totals.items()},
        "spread_s": spread,
        "gflop_per_audio_s": gflop / audio_s,
        "tvm_gflops": gflop / totals["tvm"],
        "tvm_buckets": _describe(plan.bucket_sets[plan.variants[0][0]]),
        "tvm_precision": plan.variants[0][1],
        "lengths": {"tokens": tokens, "frames": lead.n_frames},
        "tvm_shapes": {"tokens": lead.buckets[0], "frames": lead.buckets[1]},
        "tvm_policies": policies,
    }
    for name, key, ratio in (("torch", "torch_s", "tvm_vs_torch"), ("ort_int8", "ort_int8_s", "tvm_vs_ort")):
        if name in setup:
            record[key], record[ratio] = totals[name], record["tvm_vs"][name]
    return record


def describe_run(record: dict) -> str:
    """One line on what a bench record timed: the text, how long, how many threads and rounds."""
    text = record["text"] if len(record["text"]) <= 90 else record["text"][:87] + "..."
    return (
        f'"{text}": {record["utterance_s"]:.1f} s of speech ({record["lengths"]["tokens"]} tokens, '
        f"{record['lengths']['frames']} frames), {record['threads']} threads, median of {record['runs']} "
        "interleaved rounds"
    )


def backend_rows(record: dict) -> list[dict]:
    """One row per timed backend of a bench record: median, spread, RTF, its time over TVM's, one-time setup, and
    what its audio buys against PyTorch fp32 (evaluation.quality)."""
    rows = []
    for name, rtf in record["rtf"].items():
        peer = record["peers"].get(name)
        median = peer["s"] if peer else record["tvm_policies"][name]["s"]
        quality = record.get("quality", {}).get(name, {})
        rows.append(
            {
                "backend": name,
                "median_s": median,
                "spread_s": record["spread_s"][name],
                "rtf": rtf,
                "vs_tvm": median / record["tvm_s"],
                "setup_s": peer["setup_s"] if peer else None,
                **{key: quality.get(key) for key in ("same_noise", "durations_equal", "log_mel_l1", "pesq_wb")},
            }
        )
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
            times = median_interleaved(
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


def print_record(record: dict, one_line: bool) -> int:
    print(json.dumps(record) if one_line else json.dumps(record, indent=1))
    return 0


def run(args: argparse.Namespace) -> int:
    """Every `bench` mode prints one record, each with the machine it ran on (kokoro_tvm.machine); with
    `--cpu-row FOLDER` an end-to-end record's row for the per-CPU table is also written there."""
    record = _record(args)
    record.setdefault("machine", machine().as_dict())
    if getattr(args, "cpu_row", None) and "rtf" in record:
        path = cpu_rows.save(cpu_rows.row(record, backend_rows(record)), Path(args.cpu_row))
        log.info("wrote this CPU's row of the per-CPU table: %s", path)
    return print_record(record, args.json)


def _record(args: argparse.Namespace) -> dict:
    from kokoro_tvm.peers.catalog import parse_peers  # (deferred: torch, which the other commands may not need)

    if args.conv_peak or args.kernel_split or args.conv_rates:
        return bench_kernels.run(args)
    args.precision = args.precision or "fp32"
    if args.first_audio:
        return first_audio_record(args)
    return bench(
        DEFAULT_TEXT if args.text is None else args.text,
        voice=args.voice,
        threads=args.threads,
        runs=args.runs,
        warmup=args.warmup,
        weights=args.weights,
        components=not args.no_components,
        buckets=args.buckets,
        peers=parse_peers(args.peers),
        precisions=args.precision,
        language=args.lang,
    )
