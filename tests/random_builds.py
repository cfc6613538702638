"""Shapes and the fingerprint shared by the unit tests that build components on random weights, so that each
float64 artifact is built once per session (tests/conftest.py `unit_cache`) and reused by every test."""

RANDOM_FINGERPRINT = "random-weights-for-tests"
VALID_TOKENS, VALID_FRAMES = 7, 5  # an utterance's valid lengths
# the bucket each component is built at (valid lengths padded): tests/test_compile.py checks each against
# PyTorch at full length, tests/test_masking.py checks the valid prefix with garbage in the padded tail
BUCKET_TOKENS, BUCKET_F0N_FRAMES, BUCKET_DECODER_FRAMES = 12, 9, 8


def bucket(component: str) -> int:
    from kokoro_tvm.components import FRAMES
    from kokoro_tvm.components import component as spec

    if spec(component).axis != FRAMES:
        return BUCKET_TOKENS
    return BUCKET_DECODER_FRAMES if component == "decoder" else BUCKET_F0N_FRAMES
