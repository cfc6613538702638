"""What users run: one module per `kokoro-tvm` command, each with `run(args)`; kokoro_tvm.cli only parses and
calls it. Nothing here imports a study (the experiments behind the notebooks): a test keeps both so.

- say, compare, bench (with bench_first_audio, its `--first-audio` mode): text in, audio or numbers out;
- compile_builds (`compile`), gpu_build, gpu_check (with gpu_bundle, runtime_kit and bundle_transfer, what a
  device check carries to the machine with the device): artifacts and device checks;
- evaluate, sweep: notebook 07's comparison over a corpus, and papermill grids, on Dask (kokoro_tvm.scale);
- pipeline, lab: the notebooks into outputs/ and the report, and JupyterLab on them;
- voices, weights: the inputs every command reads.
"""
