"""Schedules chosen by measurement on the machine that builds (NOTES/performance.md, "Tuning").

- record.py: a tuning record, one small JSON file per CPU (vendor, family, model, kernel flags, L1 and L2 as
  the machine reports them): per contraction class the register tile and loop order that ran fastest, and per
  packed (bf16 / int8) conv class whether the packed kernel beat the float32 one. Records for the CPU families we
  measured are committed in kokoro_tvm/data/tuning/; `kokoro-tvm tune` writes this machine's into the cache.
  While a build runs, the record in use is `active()`: the CPU Contraction rule and the packed-conv rewrite ask it.
- measure.py: the model's contraction functions by class, the candidate schedules, one function timed under
  each;
- tuner.py: the classes of every precision's real fused functions, largest first within a time budget, the
  packed classes on AMX too, the decisions and the record.
"""
