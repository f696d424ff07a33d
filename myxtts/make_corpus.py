"""Long recordings and their transcripts → a training corpus, on the command line.

    python -m myxtts.make_corpus --recordings audiobook/ --out corpora/audiobook \
        --config configs/quick.yaml --language en
    myxtts-make-corpus --recordings audiobook/ --out corpora/audiobook --speaker narrator

`audiobook/` holds recordings with their transcripts beside them (chapter01.flac +
chapter01.txt). The corpus (wavs/ + metadata.csv) gets pieces of the config's
data.min_audio_seconds..data.max_audio_seconds at its data.sample_rate, cut at pauses where the
transcript's punctuation is heard (docs/data.md, "Long recordings").
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from myxtts.cli import entry_point, flag_hint
from myxtts.config import XTTSConfig
from myxtts.data.long_recordings import CorpusError, aligner_note, build_corpus


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-make-corpus", description=__doc__.split("\n")[0])
    p.add_argument("--recordings", required=True,
                   help="Folder of recordings, each with a .txt transcript of the same name.")
    p.add_argument("--out", required=True, help="New folder for the corpus.")
    p.add_argument("--config", default="configs/quick.yaml",
                   help="The training config the corpus is for (its data.* settings decide the "
                        "sample rate and the piece lengths).")
    p.add_argument("--language", default=None,
                   help="Language code of the recordings (default: the config's "
                        "data.default_language).")
    p.add_argument("--speaker", default=None,
                   help="Speaker name in metadata.csv (default: the recordings folder's name).")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    data = XTTSConfig.from_yaml(args.config).data
    language = args.language or data.default_language
    print(f"Cutting the recordings in {args.recordings} ({aligner_note(language)}).")
    with flag_hint(f"(--recordings {args.recordings}, --out {args.out}, --language {language})",
                   CorpusError):
        results = build_corpus(args.recordings, args.out, data, language, args.speaker)
    for r in results:
        print(f"  {r.name}: {r.seconds:.1f} s → {len(r.pieces)} pieces, {r.kept_seconds:.1f} s "
              f"kept" + (f" (not cut: {r.reason})" if not r.pieces else ""))
    total = sum(r.seconds for r in results)
    kept = sum(r.kept_seconds for r in results)
    print(f"Wrote {sum(len(r.pieces) for r in results)} utterances ({kept / 60:.1f} of "
          f"{total / 60:.1f} min) to {args.out}/metadata.csv.")
    return 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
