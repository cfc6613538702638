"""Text and voices: text -> phonemes -> token ids (long text in chunks), and the voice style tables."""
