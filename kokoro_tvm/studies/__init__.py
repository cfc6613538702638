"""The experiments behind the notebooks: hazard probes, converter cases, export fixes, dynamic shapes, padding,
bucket choice, the audio comparison and the benchmark. Uses the library; the library never imports it."""
