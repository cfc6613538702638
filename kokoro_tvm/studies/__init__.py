"""The experiments behind the notebooks: hazard probes, converter cases, export fixes, dynamic shapes, padding,
bucket choice, precision, streaming, the precision floor and the kernel rates. Each uses the library; nothing
but the notebooks and other studies imports one (a test keeps it so). What users run is kokoro_tvm.commands."""
