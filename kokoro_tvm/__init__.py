"""kokoro-tvm: Kokoro-82M compiled with Apache TVM Relax, verified against PyTorch.

Importing the package changes nothing in torch, kokoro or TVM: every patch is an opt-in context manager.
"""

__version__ = "0.1.0"
