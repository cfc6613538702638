"""Schedules chosen by measurement on the machine that builds (NOTES/performance.md, "Tuning").

- record.py: a tuning record, one small JSON file per CPU (vendor, family, model, kernel flags, L1 and L2 as
  the machine reports them): per contraction class the register tile and loop order that ran fastest, and per
  packed (bf16 / int8) conv class whether the packed kernel beat the float32 one. Records for the CPU families we
  measured are committed in kokoro_tvm/data/tuning/; `kokoro-tvm tune` writes this machine's into the cache.
  While a build runs, the record in use is `active()`: the CPU Contraction rule and the packed-conv rewrite ask it.
- tuner.py: finds the model's contraction classes in its real fused functions (every precision), times a
  bounded set of candidates for each on this machine within a time budget, and writes the record.
"""
