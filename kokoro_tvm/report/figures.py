"""The notebooks' figures: one call per figure, from the rows a notebook already computed.

Each function draws one figure, saves it at `path` (PNG) and returns it; a notebook calls it as the cell's
statement (the inline backend shows it) and keeps its cells about the finding, not the plotting.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

from kokoro_tvm.config import SAMPLE_RATE

FLOOR = 1e-17  # an exact zero on a log axis: drawn at this floor


def _save(fig, path: str | Path, dpi: int = 120):
    fig.tight_layout()
    fig.savefig(path, dpi=dpi)
    return fig


def build_times(rows: list[dict], path):
    """Notebook 02: each component's first build, stacked export / import / compile seconds."""
    stages = ["export_s", "import_s", "compile_s"]
    fig, ax = plt.subplots(figsize=(7, 3))
    for i, stage in enumerate(stages):
        left = [sum(r[s] for s in stages[:i]) for r in rows]
        ax.barh([r["component"] for r in rows], [r[stage] for r in rows], left=left, label=stage)
    ax.set_xlabel("seconds (first build; a cached build is reused)")
    ax.legend()
    return _save(fig, path)


def lstm_padding(sweep: list[dict], path):
    """Notebook 03: relative L2 error of a plain and the masked LSTM against the padding fraction."""
    fig, ax = plt.subplots(figsize=(6, 3))
    x = [r["pad_fraction"] for r in sweep]
    ax.plot(x, [r["reverse_rel_err"] for r in sweep], "o-", label="plain LSTM, reverse direction")
    ax.plot(x, [max(r["forward_rel_err"], FLOOR) for r in sweep], "s-", label="plain LSTM, forward direction")
    ax.plot(x, [max(r["masked_rel_err"], FLOOR) for r in sweep], "^-", label="masked LSTM (both)")
    ax.set_yscale("log")
    ax.set(xlabel="padding fraction", ylabel="relative L2 error")
    ax.legend(fontsize=8)
    return _save(fig, path)


def instance_norm_drift(drift: list[dict], path):
    """Notebook 04: InstanceNorm over a padded bucket, plain and masked, against the padding fraction."""
    fig, ax = plt.subplots(figsize=(6, 3))
    x = [r["pad_fraction"] for r in drift]
    ax.plot(x, [r["plain_rel_err"] for r in drift], "o-", label="InstanceNorm on the bucket")
    ax.plot(x, [r["masked_rel_err"] for r in drift], "^-", label="masked InstanceNorm")
    ax.set_yscale("log")
    ax.set(xlabel="padding fraction", ylabel="relative L2 on valid frames")
    ax.legend(fontsize=8)
    return _save(fig, path)


def decoder_padding(sweep: list[dict], path, snr_scale: float = 300.0):
    """Notebook 04: kokoro's decoder (correlation) and ours (SNR / `snr_scale` dB) against the bucket size."""
    fig, ax = plt.subplots(figsize=(6, 3))
    buckets = [r["bucket"] for r in sweep]
    ax.semilogx(buckets, [r["stock_corr"] for r in sweep], "o-", label="kokoro decoder: correlation")
    ax.semilogx(
        buckets,
        [min(r["masked_snr_db"], snr_scale) / snr_scale for r in sweep],
        "^-",
        label=f"ours: SNR / {snr_scale:.0f} dB",
    )
    ax.set_xlabel("bucket (frames)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def length_histograms(tokens, frames, path):
    """Notebook 05: the corpus's tokens and aligned frames per utterance."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    axes[0].hist(tokens, bins=30)
    axes[0].set_xlabel("tokens per utterance")
    axes[1].hist(frames, bins=30, color="C1")
    axes[1].set_xlabel("aligned frames per utterance")
    return _save(fig, path)


def cost_per_bucket(built: list[dict], components, path):
    """Notebook 05: build seconds, run seconds and library bytes of each component's build per bucket length."""
    keys = {"build_seconds": "build seconds", "run_s": "run seconds", "library_bytes": "library bytes"}
    fig, axes = plt.subplots(1, 3, figsize=(12, 3))
    for component in components:
        rows = [r for r in built if r["component"] == component]
        for ax, key in zip(axes, keys, strict=True):
            ax.plot([r["length"] for r in rows], [r[key] for r in rows], "o-", label=component)
    for ax, label in zip(axes, keys.values(), strict=True):
        ax.set(xlabel="bucket length (tokens or frames)", ylabel=label)
    axes[0].legend(fontsize=7)
    return _save(fig, path)


def overhead_vs_build(candidates: list[dict], path, bar_percent: float = 25):
    """Notebook 05: each candidate bucket set's estimated build minutes against its mean padded compute."""
    fig, ax = plt.subplots(figsize=(5, 3))
    for row in candidates:
        point = (row["estimated_build_seconds"] / 60, row["mean_overhead"] * 100)
        ax.scatter(*point)
        ax.annotate(row["name"], point, fontsize=8)
    ax.axhline(bar_percent, color="k", ls="--", lw=1)
    ax.set(xlabel="estimated build minutes (whole set)", ylabel="mean padded compute (%)")
    return _save(fig, path)


def dynamic_vs_bucketed(rows: list[dict], path):
    """Notebook 05: per sentence, the symbolic builds' time over the bucket set's against its frame padding."""
    fig, ax = plt.subplots(figsize=(5, 3))
    padding = [100 * (r["bucketed_shapes"][1] / r["frames"] - 1) for r in rows]
    ax.scatter(padding, [r["dynamic_s"] / r["bucketed_s"] for r in rows])
    ax.axhline(1, color="k", lw=0.5)
    ax.set(xlabel="bucket set's frame padding (%)", ylabel="dynamic / bucketed time")
    return _save(fig, path)


def gpu_inventory(inventory: list[dict], title: str, path):
    """Notebook 06: kernels and source size of each component's GPU build."""
    fig, axes = plt.subplots(1, 2, figsize=(9, 3))
    names = [row["component"] for row in inventory]
    axes[0].bar(names, [row["kernel_count"] for row in inventory])
    axes[0].set_ylabel("Metal kernels")
    axes[1].bar(names, [row["source_bytes"] / 1e3 for row in inventory])
    axes[1].set_ylabel("source (kB)")
    for ax in axes:
        ax.tick_params(axis="x", rotation=30)
    fig.suptitle(title)
    return _save(fig, path)


def per_sentence_distributions(rows: list[dict], path, metrics=("pesq_wb", "mcd_db", "wer")):
    """Notebook 07: per backend, the distribution over sentences of each metric."""
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 3))
    for ax, metric in zip(axes, metrics, strict=True):
        values = [
            [r[metric] for r in rows if r["backend"] == b and r.get(metric) is not None] or [np.nan] for b in backends
        ]
        ax.boxplot(values)
        ax.set_xticks(range(1, len(backends) + 1), backends)
        ax.set_title(metric, fontsize=9)
        ax.tick_params(axis="x", rotation=30, labelsize=7)
    fig.suptitle("per sentence (PESQ-WB and MCD against pt.dynamic; WER: Whisper tiny.en against the text)", fontsize=9)
    return _save(fig, path)


def sentence_waves(audio: dict[str, np.ndarray], title: str, log_mel, path):
    """Notebook 07: one sentence's reference and TVM waves, their differences, and both log-mel spectrograms."""
    ref, tvm, stock = (audio[b] for b in ("pt_dynamic", "tvm_dynamic", "torch_stock"))
    t = np.arange(len(ref)) / SAMPLE_RATE
    fig, axes = plt.subplots(2, 2, figsize=(12, 5))
    axes[0, 0].plot(t, ref, lw=0.5, label="pt_dynamic")
    axes[0, 0].plot(t, tvm, lw=0.5, alpha=0.7, label="tvm_dynamic")
    axes[0, 1].plot(t, tvm - ref, lw=0.5, label="tvm_dynamic - ref")
    if len(stock) == len(ref):
        axes[0, 1].plot(t, stock - ref, lw=0.5, alpha=0.6, label="torch_stock - ref")
    for ax, wave, name in ((axes[1, 0], ref, "pt_dynamic"), (axes[1, 1], tvm, "tvm_dynamic")):
        ax.imshow(log_mel(wave).T, origin="lower", aspect="auto")
        ax.set_title(f"log-mel: {name}", fontsize=9)
    axes[0, 0].legend(fontsize=7)
    axes[0, 1].legend(fontsize=7)
    fig.suptitle(title[:90], fontsize=9)
    return _save(fig, path, dpi=110)


def gflops(components: list[dict], peak: dict, path):
    """Notebook 08: each component's GFLOP/s in torch and TVM, against the conv peaks of `peak`."""
    names = [c["component"] for c in components]
    fig, ax = plt.subplots(figsize=(7, 3))
    for offset, backend in ((-0.2, "torch"), (0.2, "tvm")):
        ax.bar(
            [i + offset for i in range(len(names))],
            [c["gflop"] / c[f"{backend}_s"] for c in components],
            0.4,
            label=backend,
        )
    lines = (
        ("torch_gflops", "k", "--", "torch conv peak"),
        ("tvm_gflops", "C1", ":", "our conv peak"),
        ("tvm_bf16_gflops", "C2", ":", "our bf16 conv peak"),
        ("tvm_int8_gflops", "C3", ":", "our int8 conv peak (GOP/s)"),
    )
    for key, colour, style, label in lines:
        if key in peak:
            ax.axhline(peak[key], color=colour, ls=style, lw=1, label=label)
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("GFLOP/s")
    ax.legend(fontsize=8)
    return _save(fig, path)


def rtf_vs_length(records: list[dict], path):
    """Notebook 08: RTF of every backend timed at each length against the utterance's seconds."""
    fig, ax = plt.subplots(figsize=(6, 3))
    for backend in [b for b in records[0]["rtf"] if all(b in r["rtf"] for r in records)]:
        ax.plot([r["utterance_s"] for r in records], [r["rtf"][backend] for r in records], "o-", label=backend)
    ax.set(xlabel="utterance (s)", ylabel="RTF (lower is faster)")
    ax.legend(fontsize=8)
    return _save(fig, path)


def precision_frontier(rows: list[dict], rtf: dict[str, float], path):
    """Notebook 08: each TVM precision's RTF against its median PESQ-WB, beside PyTorch eager's RTF."""
    fig, ax = plt.subplots(figsize=(5, 3))
    for name, key in (("fp32", "tvm"), ("bf16", "tvm[bf16]"), ("int8", "tvm[int8]")):
        scores = [r["pesq_wb"] for r in rows if r["precision"] == name and r["pesq_wb"] is not None]
        if key in rtf and scores:
            ax.plot(rtf[key], np.median(scores), "o")
            ax.annotate(f"TVM {name}", (rtf[key], np.median(scores)))
    if "torch" in rtf:
        ax.axvline(rtf["torch"], color="k", ls="--", lw=1, label="PyTorch eager RTF")
        ax.legend(fontsize=8)
    ax.set(xlabel="RTF, section 1's text (lower is faster)", ylabel="PESQ-WB vs pt.dynamic fp32")
    return _save(fig, path)
