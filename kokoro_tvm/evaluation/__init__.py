"""Judging outputs: tensor and audio metrics, ASR transcripts, and TVM-vs-PyTorch parity on one utterance."""
