"""Every IR pass of the compiler (a test keeps it so), one pass per file. Each computes
the same values as the graph it replaces (in exact arithmetic: only the order of additions can change, or, for
the bf16 / int8 convolutions, the precision the build names), and kokoro_tvm.compiler.pipeline runs each in its
phase: the Relax rewrites in the rewrite phase unless said otherwise.

- polyphase_conv_transpose.py: `PolyphaseConvTranspose` (conv-transpose without the zero multiply-adds);
  align_conv_lengths.py: `AlignConvLengths` (conv outputs in whole column tiles); align_conv_rows.py:
  `AlignConvRows` (in whole row tiles; run by the pipeline's `lift_weight_transforms`, before lifting, on CPUs
  with 16 vector registers);
- frequency_conv.py: `FrequencyDomainConvs` (long float32 convs as overlap-save DFT products; run by
  `lift_weight_transforms` in x86 full-precision builds, shapes as the tuning record measured; float32 rounding
  differs, not bit for bit);
- matmul_layout.py: `PackMatmulWeights` (a matmul's weight matrix in column panels as wide as the CPU tile; run
  by `lift_weight_transforms` with AlignConvRows);
- vectorizable_sine.py: `VectorizableSine` (sin as a range-reduced polynomial that vectorizes, in float64);
  snake_sine.py: `SnakeSine` (Snake's sine in float32 arithmetic, within 2 ulp, through the same rewriter);
- powers.py: `IntegerPowers` (x^2, x^3 as products);
- cumsum.py: `CumsumInFloat64` (a float32 running sum accumulated in float64, as PyTorch's CPU cumsum);
- float64.py: `DemoteFloat64` (for Metal, which has no float64: float64 islands of a float32 graph in float32);
- constants.py: `FoldConstantCalls` (Relax's FoldConstant, faster: it runs in the legalize phase, before it);
- libm_exp.py and prefetch.py, the TIR passes here (they run after scheduling, in the schedule phase):
  `LibmExactExp` (float32 exp / tanh / sigmoid as vector arithmetic that gives glibc's expf bit for bit) and
  `EpiloguePrefetch` (a conv or matmul tile's epilogue lines prefetched as the tile starts);
- packed_convolutions.py: `PackedConvolutions` (the rewrite the packed kernels share), with
  bf16_convolutions.py `Bf16Convolutions` and int8_convolutions.py `Int8Convolutions` (the kernels themselves:
  kokoro_tvm.compiler.bf16 / int8); llvm_kernels.py: `ImportLLVMKernels` (their LLVM IR steps, after scheduling);
- compact_symbolic_buffers.py and restrict_shape_functions.py: `CompactSymbolicBuffers` (schedule phase) and
  `RestrictShapeFunctions` (finalize phase), what symbolic-length builds need (kokoro_tvm.compiler.symbolic);
- gpu_recurrence.py, gpu_running_sum.py, count_hand_written.py: `UseGPURecurrence`, `UseGPURunningSum` and
  `CountHandWritten`, the GPU build's hand-written kernels put in place and counted;
- base.py: what they share.

Those below `base.py` in this list are imported by their module path (they import the kernels they emit, which
import base.py: re-exported here they would make a cycle).
"""

from kokoro_tvm.compiler.passes.align_conv_lengths import AlignConvLengths
from kokoro_tvm.compiler.passes.align_conv_rows import AlignConvRows
from kokoro_tvm.compiler.passes.constants import FoldConstantCalls
from kokoro_tvm.compiler.passes.cumsum import CumsumInFloat64
from kokoro_tvm.compiler.passes.float64 import DemoteFloat64
from kokoro_tvm.compiler.passes.frequency_conv import FrequencyDomainConvs
from kokoro_tvm.compiler.passes.libm_exp import LibmExactExp
from kokoro_tvm.compiler.passes.matmul_layout import PackMatmulWeights
from kokoro_tvm.compiler.passes.polyphase_conv_transpose import PolyphaseConvTranspose
from kokoro_tvm.compiler.passes.powers import IntegerPowers
from kokoro_tvm.compiler.passes.prefetch import EpiloguePrefetch
from kokoro_tvm.compiler.passes.snake_sine import SnakeSine
from kokoro_tvm.compiler.passes.vectorizable_sine import VectorizableSine

__all__ = [
    "AlignConvLengths",
    "AlignConvRows",
    "CumsumInFloat64",
    "DemoteFloat64",
    "FoldConstantCalls",
    "FrequencyDomainConvs",
    "EpiloguePrefetch",
    "IntegerPowers",
    "LibmExactExp",
    "PackMatmulWeights",
    "PolyphaseConvTranspose",
    "SnakeSine",
    "VectorizableSine",
]
