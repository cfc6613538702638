"""The product commands beside `say` and `compile`: `bench` (TVM against what users would pick instead, in one
process), the peers it times, and `gpu-check` (a CUDA or Metal device check from a self-contained bundle). The
studies and notebooks use them; they use no study."""
