"""Past one machine: corpus evaluations (`evaluate`) and papermill sweeps (`sweep`) as Dask tasks, on a local
cluster sized to this machine by default or on any existing Dask cluster by its scheduler's address.

- `cluster`: the client (LocalCluster or an address) and the check that every worker runs the same project.
- `evaluate`: notebook 07's comparison, one task per sentence and voice, into a results table
  (kokoro_tvm.evaluation.results_table: Parquet part files, one per finished task; a rerun skips what is there).
- `sweep`: one papermill run per grid point, each into its own folder.
"""
