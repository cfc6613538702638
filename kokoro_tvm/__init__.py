"""kokoro-tvm: Kokoro-82M compiled with Apache TVM Relax, verified against PyTorch.

Subpackages by stage, imports pointing down this list only (NOTES/architecture.md; a test checks it):
components (the registry), timing and the other base modules; frontend, weights, reference; compiler (torch ->
Relax -> library); runtime (Relax VM, no torch); compiled (the two joined); peers (what bench times beside us);
evaluation; synthesis; studies (the notebooks' experiments, imported by nothing else); report; scale (Dask);
commands (what users run, one module per command); cli (parses, then calls the command).
Importing the package changes nothing in torch, kokoro or TVM: every patch is an opt-in context manager.
"""

__version__ = "0.1.0"
