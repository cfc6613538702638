"""runtime.profile (unit tier, no TVM call): kernels matched across a static and a symbolic build."""

import pytest

from kokoro_tvm.runtime.profile import compare, kernel_family, kernel_split

STATIC = {
    "fused_conv1d24_add64_expand_dims1_less7_where14": 0.30,
    "fused_conv1d26_add64": 0.10,
    "layer_norm3": 0.02,
}
SYMBOLIC = {  # the same kernels; the first fuses an arange the static build had as a constant
    "fused_conv1d24_add64_arange10_expand_dims24_expand_dims1_less7_where14": 0.33,
    "fused_conv1d26_add64": 0.10,
    "shape_func": 0.001,
}


def test_index_ops_do_not_split_a_kernel():
    assert kernel_family("fused_conv1d24_add64_arange10_expand_dims24_expand_dims1_less7_where14") == (
        "fused_conv1d24_add64_less7_where14"
    )
    assert kernel_family("fused_conv1d26_add64") == "fused_conv1d26_add64"


def test_compare_pairs_kernels_and_keeps_the_unmatched():
    rows = {r["function"]: r for r in compare(STATIC, SYMBOLIC)}
    conv = rows["fused_conv1d24_add64_less7_where14"]
    assert conv["baseline_s"] == 0.30 and conv["other_s"] == 0.33 and conv["ratio"] == pytest.approx(1.1)
    assert rows["fused_conv1d26_add64"]["ratio"] == 1.0
    assert rows["layer_norm3"]["other_s"] == 0.0 and rows["shape_func"]["ratio"] == float("inf")
    assert list(rows)[0] == "fused_conv1d24_add64_less7_where14"  # largest first
    assert len(compare(STATIC, SYMBOLIC, top=2)) == 2


def test_kernel_split_groups_fused_names_by_what_they_do():
    times = {
        "fused_bf16_conv1d21_add76": 0.25,
        "fused_conv1d24_add64_where14_pad": 0.5,  # an fp32 conv with the elementwise work before it fused in
        "fused_expand_dims26_split5_tir_rsqrt6_multiply76_bf16_pack_x19": 0.125,
        "bf16_pack_w": 0.0625,
        "fused_int8_conv1d9_int8_dequantize6_add76": 0.5,  # the int8 conv, its dequantization in the epilogue
        "int8_pack_x6": 0.25,
        "int8_range3": 0.125,
        "frames": 0.125,  # a conv in the frequency domain: its frames, DFTs and product (passes.frequency_conv)
        "forward_dft3": 0.25,
        "spectral_product1": 0.5,
        "inverse_dft": 0.125,
        "fused_lstm_step": 2.0,
        "vm.builtin.alloc_storage": 1.0,
    }
    split = kernel_split(times)
    assert split == {
        "convolution": 1.25,
        "frequency-domain convolution": 1.0,
        "bf16 packing": 0.1875,
        "int8 packing": 0.25,
        "int8 ranges": 0.125,
        "other": 3.0,
    }
    assert sum(split.values()) == sum(times.values())
