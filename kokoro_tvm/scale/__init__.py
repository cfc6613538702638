"""Past one machine: the Dask cluster that `evaluate` and `sweep` (kokoro_tvm.commands) run their tasks on, a
local cluster sized to this machine by default or any existing Dask cluster by its scheduler's address.

- `cluster`: the client (LocalCluster or an address), the check that every worker runs the same project, and
  `completed`, which stops a run in one line once the cluster has had no worker for a while.
"""
