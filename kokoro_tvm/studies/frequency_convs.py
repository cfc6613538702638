"""The frequency-domain conv against the direct kernel, one conv at a time (kokoro_tvm.compiler.passes.
FrequencyDomainConvs; NOTES/performance.md): the generator's resblock convs (128 channels over 11520 steps and
256 over 1920, a 96-frame piece) at each taps x dilation, each built both ways through the CPU pipeline with its
weight work lifted, timed interleaved on the same input, and checked against a float64 PyTorch conv.
`python -m kokoro_tvm.studies.frequency_convs [--runs R] [--threads T] [--all]` prints one JSON line; `--all`
also times the convs the pass leaves direct (forced through it)."""

from __future__ import annotations

import argparse
import json

import numpy as np

from kokoro_tvm.compiled import compile_and_load
from kokoro_tvm.compiler.passes import frequency_conv
from kokoro_tvm.compiler.pipeline import TRANSFORM_PARAMS, lift_weight_transforms
from kokoro_tvm.compiler.targets import host_target
from kokoro_tvm.compiler.tuning.frequency import conv_module
from kokoro_tvm.timing import interleaved, set_threads

# (channels, steps): the generator's two resblock stages at 96 frames
STAGES = ((128, 11520), (256, 1920))
KERNELS = ((11, 1), (7, 1), (3, 1), (11, 3), (7, 3), (11, 5), (7, 5))  # (taps, dilation)


def compare(channels: int, steps: int, taps: int, dilation: int, runs: int, forced: bool = False) -> dict:
    """One conv built direct and in the frequency domain: median seconds of each (interleaved) and each one's
    relative L2 error against PyTorch's conv in float64."""
    import torch

    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, channels, steps)).astype("float32")
    w = (rng.standard_normal((channels, channels, taps)) / np.sqrt(channels * taps)).astype("float32")
    padding = dilation * (taps - 1) // 2
    want = torch.nn.functional.conv1d(
        torch.tensor(x, dtype=torch.float64), torch.tensor(w, dtype=torch.float64), padding=padding, dilation=dilation
    ).numpy()
    # --all: the tile the tuner times for each dilation (span <= N - m + 1), whatever the taps
    tiling = (lambda _taps, d, _channels, _length=None: frequency_conv.MEASURED_TILINGS.get(d)) if forced else None
    runners, record = {}, {"channels": channels, "steps": steps, "taps": taps, "dilation": dilation}
    for name, on in (("direct", False), ("frequency", True)):
        lifted = lift_weight_transforms(
            conv_module(channels, steps, taps, dilation),
            target=host_target(),
            frequency_convs=on,
            frequency_tiling=tiling,
        )
        runner = compile_and_load(lifted, params=[w], transform_params=TRANSFORM_PARAMS)
        got = np.asarray(runner(x)[0], dtype=np.float64)
        record[f"{name}_rel_l2"] = float(np.linalg.norm(got - want) / np.linalg.norm(want))
        tensors = runner.device_inputs(x)
        runners[name] = lambda r=runner, t=tensors: r.run_on_device(*t)
    for name, seconds in interleaved(runners, runs, warmup=1).items():
        record[f"{name}_ms"] = float(np.median(seconds)) * 1e3
        record[f"{name}_spread_ms"] = [min(seconds) * 1e3, max(seconds) * 1e3]
    record["speedup"] = record["direct_ms"] / record["frequency_ms"]
    record["taken"] = frequency_conv.tiling(taps, dilation, channels) is not None
    return record


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m kokoro_tvm.studies.frequency_convs")
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--all", action="store_true", help="also the convs the pass keeps direct, forced through it")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    cases = [(c, s, k, d) for c, s in STAGES for k, d in KERNELS if args.all or frequency_conv.tiling(k, d, c)]
    records = [compare(*case, runs=args.runs, forced=args.all) for case in cases]
    print(json.dumps({"threads": args.threads, "runs": args.runs, "convs": records}))


if __name__ == "__main__":
    main()
