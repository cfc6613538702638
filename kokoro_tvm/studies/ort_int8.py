"""ONNX Runtime on the embedded int8 export of Kokoro-82M: a peer in `bench` and a backend of notebook 07."""

from __future__ import annotations

import numpy as np

from kokoro_tvm.studies.peers import ort_inputs, ort_session


class OrtInt8:
    """One CPU InferenceSession on the embedded export (non-spinning workers: see `peers.ort_session`)."""

    def __init__(self, threads: int | None = None):
        from kokoro_tvm.weights.resolve import embedded_onnx

        self.session = ort_session(embedded_onnx(), threads)

    def speak(self, padded_ids, style: np.ndarray, speed: float = 1.0) -> np.ndarray:
        """float32 audio for one utterance (token ids with both pads), with the export's own SineGen noise."""
        (audio,) = self.session.run(None, ort_inputs(padded_ids, style, speed))
        return np.asarray(audio, dtype=np.float32).reshape(-1)
