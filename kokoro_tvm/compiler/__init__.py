"""torch -> Relax -> library: the only stage that calls TVM's build APIs (needs torch and TVM).

export (wrappers of the registry's components) and patches -> converters (one table) and ops/ (custom ops) ->
passes and schedule/ (CPU, GPU) inside pipeline (one Relax pipeline by phase) for targets -> build (the artifact
cache); gpu_sources inventories and checks GPU builds. Never imports the runtime, the studies or the report."""
