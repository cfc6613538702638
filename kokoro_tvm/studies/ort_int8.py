"""ONNX Runtime on the embedded int8 export of Kokoro-82M: the third backend of `bench` and notebook 07."""

from __future__ import annotations

import numpy as np


class OrtInt8:
    """One InferenceSession on the CPU. Idle workers do not spin: interleaved with other backends in one
    process, spinning workers would burn a core during the next backend's run."""

    def __init__(self, threads: int | None = None):
        import onnxruntime

        from kokoro_tvm.weights.resolve import embedded_onnx

        options = onnxruntime.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self.session = onnxruntime.InferenceSession(str(embedded_onnx()), options, providers=["CPUExecutionProvider"])

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """float32 audio for one utterance (token ids with both pads), with the export's own SineGen noise."""
        inputs = {
            "tokens": np.asarray([padded_ids], dtype=np.int64),
            "style": np.asarray(style, dtype=np.float32).reshape(1, -1),
            "speed": np.array([speed], dtype=np.float32),
        }
        (audio,) = self.session.run(None, inputs)
        return np.asarray(audio, dtype=np.float32).reshape(-1)
