"""The one Relax pipeline, CPU and GPU, organised by phase; and the calls that turn a Relax module into a VM
executable. With kokoro_tvm.compiler.build (which adds export, import and the artifact cache) the only place
that calls TVM's build APIs.

Phases, in order (each a list of passes; `phases(target)` returns them by name):

1. rewrite   our Relax rewrites (kokoro_tvm.compiler.passes): polyphase ConvTranspose and aligned conv lengths
             everywhere; on the CPU the vectorizable sine and integer powers, on a GPU the GPU LSTM kernel;
             float32 running sums accumulated in float64 as PyTorch does (on CUDA in a serial kernel of ours);
             Metal (no float64) computes the graph's float64 islands in float32
2. dispatch  the backend's library dispatch (sampling, sort/scan)
3. legalize  Relax ops -> TIR, fused (LegalizeOps, AnnotateTIROpPattern, FoldConstant, FuseOps, FuseTIR); takes
             as TVM's fast take without its per-take warning (kokoro_tvm.compiler.ops.take)
4. schedule  every fused PrimFunc scheduled by dlight: our CPU rules (kokoro_tvm.compiler.schedule.cpu) or
             dlight's GPU rules (kokoro_tvm.compiler.schedule.gpu); TVM 0.27 schedules nothing on the CPU;
             on the CPU each conv / matmul tile's epilogue lines prefetched as the tile starts
             (passes.EpiloguePrefetch, where the Contraction rule marked them); then tile buffers of
             symbolic-length functions compacted to a fixed size
             (passes.CompactSymbolicBuffers); on the CPU, float32 exp / tanh / sigmoid
             written out as vector arithmetic with libm's bits (passes.LibmExactExp), and bf16 and int8
             convolutions get the LLVM IR of their vdpbf16ps / vpdpbusd steps (passes.ImportLLVMKernels)
5. lower     the backend's dataflow lowering
6. finalize  the backend's memory planning and VM lowering; the VM's shape functions marked noalias
             (passes.RestrictShapeFunctions)

`dump_dir` (or the KOKORO_TVM_DUMP_IR variable) writes the module after each phase as TVMScript
(`<NN>_<phase>.py`), for reading a build, never into a notebook.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from kokoro_tvm.compiler.targets import GPU_KINDS, cpu_geometry
from kokoro_tvm.compiler.tuning import record as tuning_record
from kokoro_tvm.components import BF16_CONVOLUTIONS, INT8_CONVOLUTIONS, check_arithmetic

log = logging.getLogger(__name__)

PHASES = ("rewrite", "dispatch", "legalize", "schedule", "lower", "finalize")
DUMP_VARIABLE = "KOKORO_TVM_DUMP_IR"

# The VM function that turns the stored parameters into the ones `main` takes (see lift_weight_transforms).
TRANSFORM_PARAMS = "main_transform_params"

# TVM 0.27's CUDA code generation writes a vectorized boolean (our masks' `where` in conv epilogues, which
# dlight's GPU Matmul rule vectorizes 2-wide) as `float2 v = make_ushort2(...)`, which nvcc rejects: CUDA
# builds lower vectorized loops to scalar ones (NOTES/metal.md). Metal's schedules do not vectorize there.
CODEGEN_CONFIG = {"cuda": {"tirx.disable_vectorize": True}}


def _target(target):
    import tvm

    return target if isinstance(target, tvm.target.Target) else tvm.target.Target(target)


def _when(condition: bool, *passes) -> list:
    return list(passes) if condition else []


def _rewrites(gpu: bool, metal: bool) -> list:
    """The rewrite phase: our Relax rewrites, the CPU / GPU differences inline."""
    from kokoro_tvm.compiler import passes
    from kokoro_tvm.compiler.passes.gpu_recurrence import UseGPURecurrence
    from kokoro_tvm.compiler.passes.gpu_running_sum import UseGPURunningSum

    return [
        passes.PolyphaseConvTranspose(),
        passes.AlignConvLengths(),
        *_when(gpu, UseGPURecurrence),
        # Snake's sines in float32 first, the rest (SineGen's) in float64 (GPUs have a native vector sin)
        *_when(not gpu, passes.SnakeSine(), passes.VectorizableSine(), passes.IntegerPowers()),
        # PyTorch's rounding of running sums; on CUDA in our serial kernel, at any length (TVM's scan: not)
        *_when(gpu and not metal, UseGPURunningSum()),
        *_when(not metal, passes.CumsumInFloat64()),
        *_when(metal, passes.DemoteFloat64()),  # Metal has no float64
    ]


def phases(target, coverage: dict[str, int] | None = None) -> list[tuple[str, list]]:
    """[(phase, passes)] for `target` (a JSON dict or tvm.target.Target): one list, the CPU / GPU differences
    inline. For GPU targets `coverage` receives how many functions each schedule rule took
    (kokoro_tvm.compiler.gpu_sources shows it)."""
    from tvm import relax
    from tvm.s_tir import dlight

    from kokoro_tvm.compiler import bf16, int8, passes
    from kokoro_tvm.compiler.ops import take
    from kokoro_tvm.compiler.passes.compact_symbolic_buffers import (  # (deferred: the package loads TVM)
        CompactSymbolicBuffers,
    )
    from kokoro_tvm.compiler.passes.count_hand_written import CountHandWritten
    from kokoro_tvm.compiler.passes.llvm_kernels import ImportLLVMKernels
    from kokoro_tvm.compiler.passes.restrict_shape_functions import (  # (deferred: the package loads TVM)
        RestrictShapeFunctions,
    )
    from kokoro_tvm.compiler.schedule import cpu as cpu_rules
    from kokoro_tvm.compiler.schedule import gpu as gpu_rules

    target = _target(target)
    gpu, metal = target.kind.name in GPU_KINDS, target.kind.name == "metal"
    backend = (relax.backend.gpu_generic if gpu else relax.backend.cpu_generic).pipeline
    counts = {} if coverage is None else coverage
    if gpu:
        gpu_rules.import_tensor_intrinsics()
    llvm_kernels = {"bf16_conv1d": bf16.LLVM_KERNEL, "int8_conv1d": int8.LLVM_KERNEL}
    return [
        ("rewrite", _rewrites(gpu, metal)),
        ("dispatch", backend.library_dispatch_passes(target)),
        (
            "legalize",
            [
                relax.transform.LegalizeOps(customize_legalize_map=take.LEGALIZE),  # takes without the warning
                relax.transform.AnnotateTIROpPattern(),
                passes.FoldConstantCalls(),
                relax.transform.FoldConstant(),  # the first folds as the second, only faster
                relax.transform.FuseOps(),
                relax.transform.FuseTIR(),
                *_when(gpu, CountHandWritten(counts)),
            ],
        ),
        (
            "schedule",
            [
                dlight.ApplyDefaultSchedule(*(gpu_rules.rules(counts) if gpu else cpu_rules.rules())),
                *_when(not gpu, passes.EpiloguePrefetch()),
                CompactSymbolicBuffers(),
                *_when(not gpu, passes.LibmExactExp(), ImportLLVMKernels(llvm_kernels)),
            ],
        ),
        ("lower", backend.dataflow_lower_passes(target)),
        ("finalize", [*backend.finalize_passes(target), RestrictShapeFunctions()]),
    ]


def schedule_passes(target) -> list:
    """The schedule phase alone (kokoro_tvm.compiler.tuning times one function through it)."""
    return dict(phases(target))["schedule"]


def _dump_dir(dump_dir) -> Path | None:
    chosen = dump_dir or os.environ.get(DUMP_VARIABLE)
    return Path(chosen) if chosen else None


def relax_pipeline(target, coverage: dict[str, int] | None = None, dump_dir: str | Path | None = None):
    """The whole pipeline for `target` as one module pass (what `tvm.compile(relax_pipeline=...)` takes)."""
    import tvm

    target = _target(target)
    chosen = phases(target, coverage)
    folder = _dump_dir(dump_dir)

    @tvm.transform.module_pass(opt_level=0, name="KokoroPipeline")
    def _pipeline(mod, _ctx):
        seconds = {}
        with target:
            for index, (name, passes) in enumerate(chosen, start=1):
                start = time.perf_counter()
                mod = tvm.transform.Sequential(passes, name=name)(mod)
                seconds[name] = time.perf_counter() - start
                if folder is not None:
                    folder.mkdir(parents=True, exist_ok=True)
                    path = folder / f"{index:02d}_{name}.py"
                    path.write_text(mod.script())
                    log.info("IR after %s: %s", name, path)
        log.info("pipeline phases: %s", ", ".join(f"{name} {s:.1f} s" for name, s in seconds.items()))
        return mod

    return _pipeline


def precision_passes(component: str, precision: str) -> list:
    """Rewrites that set a component's arithmetic, run before lifting (kokoro_tvm.compiler.bf16): none for "full";
    for bf16 the registry's BF16_CONVOLUTIONS of `component` (conv-transposes made plain convs first), and the
    Snake activations feeding them with a float32 sine."""
    if check_arithmetic(precision) == "full" or component not in BF16_CONVOLUTIONS:
        return []
    from kokoro_tvm.compiler.bf16 import SNAKE_SINE_TERMS, selected_by_name
    from kokoro_tvm.compiler.passes import PolyphaseConvTranspose, SnakeSine
    from kokoro_tvm.compiler.passes.bf16_convolutions import Bf16Convolutions
    from kokoro_tvm.compiler.passes.int8_convolutions import Int8Convolutions

    prefixes = BF16_CONVOLUTIONS[component]
    # int8 first: what it rewrites is no longer a float32 conv that the bf16 rewrite would take
    int8 = [Int8Convolutions(selected_by_name(INT8_CONVOLUTIONS.get(component, ())))] if precision == "int8" else []
    bf16 = Bf16Convolutions(selected_by_name(prefixes))
    return [PolyphaseConvTranspose(), *int8, bf16, SnakeSine(prefixes, SNAKE_SINE_TERMS)]


def aligned_conv_rows(target) -> int | None:
    """How many output channels a conv's register tile takes on `target` where the channels are padded to it
    (passes.AlignConvRows): 6 on a CPU with 16 vector registers (AVX2), else None (no padding)."""
    from kokoro_tvm.compiler.schedule.cpu.contraction import ALIGNED_SMALL_TILE

    if target is None or _target(target).kind.name != "llvm" or cpu_geometry(_target(target)).vector_registers >= 32:
        return None
    return ALIGNED_SMALL_TILE[0]


def frequency_domain_convs(target, precision: str) -> bool:
    """Whether the long float32 convs may go to the frequency domain (passes.FrequencyDomainConvs; which ones:
    passes.frequency_conv.chosen_tiling): in full-precision builds for a CPU (bf16 / int8 builds pack those convs
    instead) whose tuning record in use measured them faster for some conv shape, or, where no record measured
    them, an x86 CPU with AVX2 or AVX-512, where the heuristic's shapes were measured faster (the Zen 2; the Zen 4's
    tuner took all four); NEON and SSE targets keep the direct kernel (`python -m
    kokoro_tvm.studies.frequency_convs` forces it)."""
    if target is None or _target(target).kind.name != "llvm" or check_arithmetic(precision) != "full":
        return False
    record = tuning_record.active()
    if record is not None and record.frequency:
        return any(record.frequency.values())
    return cpu_geometry(_target(target)).vector_bits >= 256


def matmul_panel_columns(target) -> int | None:
    """How wide the column panels of a weight matrix are on `target` (passes.PackMatmulWeights): two float32
    vectors on a CPU, the register tile's columns for a matmul over tokens (16 on AVX2, 32 on AVX-512); None
    on a GPU or without a target."""
    if target is None or _target(target).kind.name != "llvm":
        return None
    return 2 * cpu_geometry(_target(target)).lanes(32)


def lift_weight_transforms(
    mod,
    component: str | None = None,
    precision: str = "full",
    target=None,
    frequency_convs: bool | None = None,
    frequency_tiling=None,
):
    """Move every computation that depends on weights alone (ALBERT's per-call `permute_dims` of each linear
    weight, 12 times over for its one shared layer; bf16 weight packing) out of `main` into TRANSFORM_PARAMS,
    which the runtime calls once at load. Exact: the lifted ops are the same ops, run earlier. `precision`'s
    rewrites (precision_passes) are applied first, then, for `target`, the long convs put in the frequency
    domain (where frequency_domain_convs says, or as `frequency_convs` forces; `frequency_tiling`: other tiles
    than the pass's own, for studies; equal to float32 rounding, not bit for bit), the convs' channels padded to
    whole register tiles (aligned_conv_rows) and the matmul weights laid out in column panels
    (matmul_panel_columns), all of their weight work lifted too. Equal lifted values are made once (ALBERT's
    one layer: 24 MB of weights, not 12 copies)."""
    import tvm
    from tvm import relax

    from kokoro_tvm.compiler.passes import AlignConvRows, FrequencyDomainConvs, PackMatmulWeights

    if component is not None:
        mod = tvm.transform.Sequential(precision_passes(component, precision))(mod)
    if frequency_domain_convs(target, precision) if frequency_convs is None else frequency_convs:
        mod = FrequencyDomainConvs(frequency_tiling, aligned_conv_rows(target))(mod)
    if rows := aligned_conv_rows(target):
        mod = AlignConvRows(rows)(mod)
    if columns := matmul_panel_columns(target):
        mod = PackMatmulWeights(columns)(mod)
    mod = relax.transform.LiftTransformParams()(mod)
    if TRANSFORM_PARAMS not in {gv.name_hint for gv in mod.functions}:
        return mod
    # only the weight work is merged: `main` keeps one input per lifted output, equal ones the same tensor
    transform = relax.transform.EliminateCommonSubexpr()(tvm.IRModule({TRANSFORM_PARAMS: mod[TRANSFORM_PARAMS]}))
    mod[TRANSFORM_PARAMS] = transform[TRANSFORM_PARAMS]
    return mod


def lower(mod, target, coverage: dict | None = None, dump_dir: str | Path | None = None):
    """The Relax module after our pipeline for `target`: every PrimFunc scheduled, not yet code-generated
    (kokoro_tvm.compiler.gpu_sources inspects it: which kernels exist, their thread bindings)."""
    return relax_pipeline(target, coverage, dump_dir)(mod)


def compile_lowered(lowered, target):
    """A module from `lower` -> VM executable (TVM's TIR pipeline and code generation only)."""
    import tvm

    target = _target(target)
    config = CODEGEN_CONFIG.get(target.kind.name)
    if not config:
        return tvm.compile(lowered, target=target, relax_pipeline=None)
    current = tvm.transform.PassContext.current()
    with tvm.transform.PassContext(opt_level=current.opt_level, config=config):
        return tvm.compile(lowered, target=target, relax_pipeline=None)


def compile_relax(mod, target, dump_dir: str | Path | None = None):
    """The Relax module -> VM executable with our pipeline."""
    return compile_lowered(lower(mod, target, dump_dir=dump_dir), target)


def compile_stock(mod, target=None):
    """The Relax module -> VM executable with TVM's own default pipeline (generic LLVM unless `target`): how
    stock TVM treats a graph, for the hazard probes and the studies that compare against it."""
    import tvm

    return tvm.compile(mod, target=_target(target or {"kind": "llvm"}))
