"""Schedules for the fused PrimFuncs: cpu (our dlight rules, tiled for the target's vectors and caches), gpu
(dlight's GPU rules and the GPU LSTM kernel)."""
