"""Builds an LJSpeech-style corpus of real voice acting offline: the spoken dialogue of the game
Fish Fillets NG (Debian's fillets-ng-data-nl: Dutch, fillets-ng-data-cs: Czech), two speakers
(the small fish and the big fish), with each line's text taken from the game's dialogue scripts.

    apt-get install fillets-ng-data-nl fillets-ng-data-cs
    python samples/make_game_voice_corpus.py --out corpora/fillets_nl --language nl --minutes 50
    python samples/make_game_voice_corpus.py --out corpora/fillets_cs --language cs --minutes 50
    python samples/make_game_voice_corpus.py --out corpora/fillets_nl_rest --language nl --skip-minutes 50 --minutes 200

A script line reads `dialogId("let-m-oko", "font_small", "<English>")` followed by
`dialogStr("<translation>")`; the recording of that line is sound/<level>/<language>/<id>.ogg.
The font names the speaker (font_small: the small fish, font_big: the big fish); lines of the
other characters are left out. The recordings are copied as they are (Ogg Vorbis, 22.05 kHz,
takes with their own silences and levels): whatever real speech needs happens in training.
Lines whose recordings are shorter than --min-seconds or longer than --max-seconds are left
out; levels are taken in sorted order until --minutes of speech are written. --skip-minutes M
leaves out the levels (and the texts) of the corpus --minutes M makes: the third command gives
the held-out lines a model trained on fillets_nl is judged on. The corpora are what the
real-speech runs of docs/history.md use (docs/results.md, "Corpora"); they are not committed.
"""

import argparse
import glob
import os
import re
import shutil

import soundfile as sf

GAME = "/usr/share/games/fillets-ng"
SPEAKERS = {"font_small": "small_fish", "font_big": "big_fish"}
_LINE = re.compile(r'dialogId\("([^"]+)",\s*"([^"]+)",\s*"(?:[^"\\]|\\.)*"\)\s*'
                   r'dialogStr\("((?:[^"\\]|\\.)*)"\)')


def script_lines(path: str):
    """(line id, font, translated text) of every dialogue line of one dialogs_<lang>.lua."""
    with open(path, encoding="utf-8") as f:
        for m in _LINE.finditer(f.read()):
            text = m.group(3).replace('\\"', '"').replace("\\n", " ")
            yield m.group(1), m.group(2), " ".join(text.split())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--language", default="nl", help="nl or cs (the installed voice pack)")
    parser.add_argument("--minutes", type=float, default=50.0)
    parser.add_argument("--skip-minutes", type=float, default=0.0,
                        help="leave out the levels that --minutes SKIP takes, and their texts: "
                             "held-out lines for judging a model trained on that corpus")
    parser.add_argument("--min-seconds", type=float, default=0.8)
    parser.add_argument("--max-seconds", type=float, default=8.0)
    parser.add_argument("--game", default=GAME, help="where fillets-ng-data is installed")
    args = parser.parse_args()

    scripts = sorted(glob.glob(os.path.join(args.game, "script", "*", f"dialogs_{args.language}.lua")))
    if not scripts:
        raise SystemExit(f"No dialogs_{args.language}.lua under {args.game}/script: install "
                         f"fillets-ng-data (and fillets-ng-data-{args.language} for the voices).")
    os.makedirs(os.path.join(args.out, "wavs"), exist_ok=True)
    rows, seconds, passed, passed_texts = [], 0.0, 0.0, set()
    skipped = {"other speaker": 0, "no recording": 0, "length": 0, "no text": 0,
               "text of a skipped level": 0}
    for script in scripts:
        level = os.path.basename(os.path.dirname(script))
        level_rows, level_seconds = [], 0.0
        for line_id, font, text in script_lines(script):
            if font not in SPEAKERS:
                skipped["other speaker"] += 1
                continue
            audio = os.path.join(args.game, "sound", level, args.language, f"{line_id}.ogg")
            if not os.path.exists(audio):
                skipped["no recording"] += 1
                continue
            if not re.search(r"\w", text):
                skipped["no text"] += 1
                continue
            duration = sf.info(audio).duration
            if not args.min_seconds <= duration <= args.max_seconds:
                skipped["length"] += 1
                continue
            level_rows.append((f"{level}_{line_id}".replace("-", "_"), audio, text, font,
                               duration))
            level_seconds += duration
        if passed < args.skip_minutes * 60:
            passed += level_seconds
            passed_texts.update(row[2].lower() for row in level_rows)
            continue
        for name, audio, text, font, duration in level_rows:
            if text.lower() in passed_texts:
                skipped["text of a skipped level"] += 1
                continue
            shutil.copyfile(audio, os.path.join(args.out, "wavs", f"{name}.ogg"))
            rows.append(f"{name}|{text}|{text}|{SPEAKERS[font]}|{args.language}")
            seconds += duration
        if seconds >= args.minutes * 60:
            break
    with open(os.path.join(args.out, "metadata.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    print(f"{len(rows)} utterances, {seconds / 60:.1f} min of speech in {args.out} "
          f"(left out: {', '.join(f'{k} {v}' for k, v in skipped.items())})")


if __name__ == "__main__":
    main()
