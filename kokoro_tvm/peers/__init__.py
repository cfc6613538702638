"""What users would run instead of our compiled model, as `bench` times them beside it: PyTorch eager and
`torch.compile`, ONNX Runtime on our fp32 export and on the embedded int8 export, kokoro-onnx on both (catalog),
and OpenVINO f32 / bf16 on our own conversion (openvino).
"""
