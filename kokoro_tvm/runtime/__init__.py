"""Load artifacts and run them with the Relax VM: the compiled model, buckets, devices, WAV files.

Never imports torch or kokoro_tvm.compiler (a test checks)."""
