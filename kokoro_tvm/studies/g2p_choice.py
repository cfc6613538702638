"""misaki's English G2P (Kokoro's own, what the front-end uses) against espeak-ng's (what it used before):
where their phonemes differ on the corpus, and what Whisper hears from each with the same voice, weights and
noise on PyTorch (NOTES/text_frontend.md).

`python -m kokoro_tvm.studies.g2p_choice [--wer-sentences 20] [--text "held-out sentence" ...] --out FILE.json`
"""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import numpy as np

from kokoro_tvm.frontend.corpus import load_sentences
from kokoro_tvm.frontend.g2p import espeak_g2p
from kokoro_tvm.frontend.text import SYLLABIC_CONSONANT, prepare, text_to_phonemes
from kokoro_tvm.frontend.voices import DEFAULT_VOICE, load_voice
from kokoro_tvm.reference.noise import SeededNoise

log = logging.getLogger(__name__)


def espeak_english(text: str) -> str:
    """The front-end's former English G2P: espeak-ng en-us through misaki's symbol mapping, with espeak's
    syllabic-consonant mark written as Kokoro writes it."""

    phonemes, _ = espeak_g2p("en-us")(text)
    return SYLLABIC_CONSONANT.sub("ᵊ\\1", " ".join(phonemes.split()))


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance in phoneme symbols."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def phoneme_differences(sentences: list[str]) -> list[dict]:
    """Per sentence: both phoneme strings, whether they are equal, and their edit distance."""

    rows = []
    for index, sentence in enumerate(sentences):
        misaki, espeak = text_to_phonemes(sentence), espeak_english(sentence)
        rows.append(
            {
                "sentence": index,
                "text": sentence,
                "misaki": misaki,
                "espeak": espeak,
                "equal": misaki == espeak,
                "edit_distance": edit_distance(misaki, espeak),
            }
        )
    return rows


def wer_by_g2p(sentences: list[str], voice: str, seed: int = 0) -> list[dict]:
    """Per sentence and G2P: Whisper tiny.en's WER on PyTorch's audio (pt.dynamic, seeded noise)."""
    from kokoro_tvm.evaluation.metrics import word_error_rate
    from kokoro_tvm.reference.pt_dynamic import run_stages
    from kokoro_tvm.weights.resolve import load_kmodel

    model, _ = load_kmodel()
    pack = load_voice(voice)
    rows = []
    for index, sentence in enumerate(sentences):
        row = {"sentence": index, "text": sentence}
        for g2p, phonemes in (("misaki", None), ("espeak", espeak_english(sentence))):
            chunks = prepare(text=sentence) if phonemes is None else prepare(phonemes=phonemes)
            audio = np.concatenate(
                [
                    run_stages(model, c.padded_ids, pack.style(len(c.phonemes)), noise=SeededNoise(seed)).audio.reshape(
                        -1
                    )
                    for c in chunks
                ]
            )
            row[f"wer_{g2p}"], row[f"transcript_{g2p}"] = word_error_rate(sentence, audio)
        rows.append(row)
        log.info("sentence %d: WER misaki %.3f, espeak %.3f", index, row["wer_misaki"], row["wer_espeak"])
    return rows


def summary(differences: list[dict], wers: list[dict]) -> dict:
    return {
        "sentences": len(differences),
        "phonemes_differ": sum(not r["equal"] for r in differences),
        "median_edit_distance": float(np.median([r["edit_distance"] for r in differences])),
        "wer_sentences": len(wers),
        "wer_misaki_mean": float(np.mean([r["wer_misaki"] for r in wers])) if wers else None,
        "wer_espeak_mean": float(np.mean([r["wer_espeak"] for r in wers])) if wers else None,
    }


def main(argv: list[str] | None = None) -> None:
    from kokoro_tvm.evaluation.backends import pick_sentences

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wer-sentences", type=int, default=20, help="corpus sentences spoken (notebook 07's pick)")
    parser.add_argument("--text", action="append", default=[], help="a held-out sentence, spoken too (repeatable)")
    parser.add_argument("--voice", default=DEFAULT_VOICE)
    parser.add_argument("--out", required=True, help="JSON file for every row and the summary")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    corpus = load_sentences()
    differences = phoneme_differences(corpus)
    wers = wer_by_g2p(pick_sentences(corpus, args.wer_sentences), args.voice)
    held_out = wer_by_g2p(args.text, args.voice) if args.text else []
    record = {
        "voice": args.voice,
        "summary": summary(differences, wers),
        "held_out": held_out,
        "wer": wers,
        "differences": differences,
    }
    Path(args.out).write_text(json.dumps(record, indent=1, ensure_ascii=False))
    print(
        json.dumps(
            {
                "summary": record["summary"],
                "held_out": [{k: r[k] for k in ("text", "wer_misaki", "wer_espeak")} for r in held_out],
            }
        )
    )


if __name__ == "__main__":
    main()
