"""Which Kokoro-82M weights: resolution, fingerprint, strict loading, and the int8 ONNX recovery."""
