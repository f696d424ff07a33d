r"""Builds LJSpeech-style corpora offline: public-domain text (King James Bible, `bible` from
Debian's bible-kjv) spoken by espeak-ng or flite, 16 kHz mono WAV, silence trimmed.

    apt-get install espeak-ng flite sox bible-kjv
    python samples/make_speech_corpus.py --out corpora/espeak_m --engine espeak --voice en-us \
        --books Gen,Exod,Num,Deut --minutes 45
    python samples/make_speech_corpus.py --out corpora/flite_slt --engine flite --voice slt \
        --books Prov,Ps,Isa,Matt --minutes 45
    python samples/make_speech_corpus.py --many-voices --out corpora/voices25 --minutes 45 \
        --held-out-sets 2 --held-out 6 --held-out-utterances 12

Verses are cut at clause punctuation into pieces of --min-chars..--max-chars characters, so
utterances are about 1.5-7 s long. It stops once --minutes of audio are written. These corpora are
what configs/quick.yaml is trained and judged on (docs/results.md); they are not committed.

--many-voices builds a multi-speaker training corpus and held-out (zero-shot) sets. The voices
are every flite voice and a list of espeak-ng variants (en-gb-scotland+f2, en-us+Jacky, ...; the
variants that sound alike or not like speech are left out), each variant in one accent. The
held-out sets are drawn first, seeded, each one flite voice, 2 high (female or child) and 3 low
espeak-ng voices (the pattern repeats for larger sets). The training voices are the others, plus
sox pitch/tempo-shifted copies of them (flite first) until there are --voices. --minutes of
speech from --books go to the training voices, each utterance to the voice with the least so
far, into --out (rows id|text|text|speaker); --held-out-utterances texts from --held-out-books
per voice go to <out>_unseen1, <out>_unseen2, ... --outside-sets N also writes the first N of
six sets of voices from outside the inventory, each for judging a recipe once the sets
before it have been looked at while choosing it (their texts follow the held-out sets', in this
order): <out>_outside, festival's two English diphone voices (another synthesiser) and four
espeak-ng variants the inventory leaves out; <out>_outside2, six more espeak-ng variants no
other set uses, in other accents; <out>_outside3, six more (espeak-ng's one remaining female
variant unlike any training voice and five male ones); <out>_outside4, festival's Italian,
Finnish and Czech voices, a woman and a man each, reading the English texts by their own
languages' rules: recordings of real people (diphone synthesis) in accents no training voice has;
<out>_outside5, five more of festival's: a Catalan woman and an American one (statistical
parametric voices, another kind of synthesis), a Czech boy and man, a Russian man (festival's
Hindi, Marathi and Telugu voices crash on English text); <out>_outside6, voices reading the
English texts by English rules, for judging zero-shot reading as well as the voice: festival's
three English voices moved by a sox pitch shift no training voice gets (kal up 400 cents, ked and
slt down 400) and the three espeak-ng variants no other set uses that a speaker encoder
(Resemblyzer) hears furthest from every training voice, passing over one nearer a variant picked
before than the training voices' median nearest-neighbour similarity (announcer, m5, pedro).
The festival sets need `apt-get install festival festvox-kallpc16k festvox-kdlpc16k` (outside)
and `festvox-italp16k festvox-itapc16k festvox-suopuhe-lj festvox-suopuhe-mv festvox-czech-dita
festvox-czech-ph` (outside4) and `festvox-ca-ona-hts festvox-us-slt-hts festvox-czech-krb
festvox-czech-machac festvox-ru` (outside5), and outside6 those of outside and slt. Every
folder gets voices.tsv: each speaker, how it was made, its set and what it got. The same command
writes the same texts and speakers; the samples match only with the same espeak-ng and sox builds.
"""

import argparse
import dataclasses
import os
import random
import re
import shutil
import subprocess
import tempfile

import soundfile as sf

FLITE_VOICES = ["awb", "kal16", "rms", "slt"]
# espeak-ng --voices=variant, minus look-alikes (klatt = klatt6 = adam, f2 ~ f5, michel ~ miguel,
# ...) and non-speech (whisper, croak, robosoft*, echo-heavy ones).
HIGH_VARIANTS = ["Alicia", "Andrea", "anika", "aunty", "belinda", "f2", "shelby", "steph2", "zac"]
LOW_VARIANTS = ["Andy", "boris", "david", "ed", "edward", "Gene2", "Henrique", "iven", "Jacky",
                "kaukovalta", "klatt6", "Lee", "marcelo", "Nguyen", "pablo", "quincy", "sandro",
                "travis"]
# espeak-ng --voices=en without the mbrola ones; the variants take them in turn. "en" is en-gb
# (the same voice file): espeak-ng 1.51 ignores a +variant after "en-gb".
ACCENTS = ["en", "en-029", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-gb-x-rp",
           "en-us", "en-us-nyc"]
HELD_OUT_SLOTS = ["flite", "high", "low", "low", "high", "low"]
# --outside-sets: (engine, voice, variant, high[, cents]) of voices no held-out set or training
# voice uses, set by set (module docstring). outside3's `grandma` is the one female variant left
# that is no look-alike of a training voice: f5 ~ f2, steph and steph3 ~ steph2.
OUTSIDE_SETS = [
    [("festival", "kal_diphone", "", False), ("festival", "ked_diphone", "", False),
     ("espeak", "en-gb-x-rp", "linda", True), ("espeak", "en-us", "f4", True),
     ("espeak", "en-029", "norbert", False), ("espeak", "en-gb-scotland", "m3", False)],
    [("espeak", "en-us", "Annie", True), ("espeak", "en-gb-x-gbclan", "f1", True),
     ("espeak", "en-gb-x-gbcwmd", "f3", True), ("espeak", "en-gb-x-rp", "m1", False),
     ("espeak", "en-us-nyc", "john", False), ("espeak", "en-gb-scotland", "caleb", False)],
    [("espeak", "en-029", "grandma", True), ("espeak", "en", "m6", False),
     ("espeak", "en-gb-x-gbcwmd", "Mike", False), ("espeak", "en-us", "gustave", False),
     ("espeak", "en-gb-x-rp", "Storm", False), ("espeak", "en-us-nyc", "Marco", False)],
    [("festival", "lp_diphone", "", True), ("festival", "pc_diphone", "", False),
     ("festival", "suo_fi_lj_diphone", "", True), ("festival", "hy_fi_mv_diphone", "", False),
     ("festival", "czech_dita", "", True), ("festival", "czech_ph", "", False)],
    [("festival", "upc_ca_ona_hts", "", True), ("festival", "cmu_us_slt_arctic_hts", "", True),
     ("festival", "czech_krb", "", True), ("festival", "czech_machac", "", False),
     ("festival", "msu_ru_nsh_clunits", "", False)],
    [("festival", "kal_diphone", "", False, 400), ("festival", "ked_diphone", "", False, -400),
     ("festival", "cmu_us_slt_arctic_hts", "", True, -400), ("espeak", "en-us", "announcer", False),
     ("espeak", "en-gb-x-rp", "m5", False), ("espeak", "en-gb-scotland", "pedro", False)],
]
FESTIVAL_PACKAGES = [["festvox-kallpc16k", "festvox-kdlpc16k"], [], [],
                     ["festvox-italp16k", "festvox-itapc16k", "festvox-suopuhe-lj",
                      "festvox-suopuhe-mv", "festvox-czech-dita", "festvox-czech-ph"],
                     ["festvox-ca-ona-hts", "festvox-us-slt-hts", "festvox-czech-krb",
                      "festvox-czech-machac", "festvox-ru"],
                     ["festvox-kallpc16k", "festvox-kdlpc16k", "festvox-us-slt-hts"]]
SHIFT_CENTS = {True: -500, False: 600}  # high voices go down, low ones up
SHIFT_TEMPI = [0.9, 1.1]


@dataclasses.dataclass(frozen=True, order=True)
class Voice:
    engine: str
    voice: str
    variant: str = ""
    high: bool = False
    cents: int = 0
    tempo: float = 1.0

    @property
    def kind(self) -> str:
        return "flite" if self.engine == "flite" else "high" if self.high else "low"

    @property
    def name(self) -> str:
        shift = f"_p{self.cents:+d}_t{self.tempo:g}" if self.cents else ""
        return "_".join(filter(None, [self.engine, self.voice, self.variant])) + shift

    @property
    def effects(self) -> list:
        return ["pitch", str(self.cents), "tempo", "-s", str(self.tempo)] if self.cents else []


def inventory() -> list:
    """The unshifted voices: the flite voices, then the espeak-ng variants in name order."""
    variants = sorted([(v, True) for v in HIGH_VARIANTS] + [(v, False) for v in LOW_VARIANTS],
                      key=lambda v: v[0].lower())
    return ([Voice("flite", v, high=v == "slt") for v in FLITE_VOICES]
            + [Voice("espeak", ACCENTS[i % len(ACCENTS)], v, high)
               for i, (v, high) in enumerate(variants)])


def split(voices: list, n_train: int, sets: int, per_set: int, seed: int):
    """(held-out sets, training voices); see the module docstring."""
    rng = random.Random(seed)
    pools = {kind: [v for v in voices if v.kind == kind] for kind in ("flite", "high", "low")}
    for pool in pools.values():
        rng.shuffle(pool)
    try:
        held = [[pools[HELD_OUT_SLOTS[slot % len(HELD_OUT_SLOTS)]].pop()
                 for slot in range(per_set)] for _ in range(sets)]
    except IndexError:
        raise ValueError(f"too few voices for {sets} held-out sets of {per_set}") from None
    others = pools["high"] + pools["low"]
    rng.shuffle(others)
    rest = pools["flite"] + others
    if n_train > 2 * len(rest):
        raise ValueError(f"at most {2 * len(rest)} training voices (--voices)")
    shifted = [dataclasses.replace(v, cents=SHIFT_CENTS[v.high],
                                   tempo=SHIFT_TEMPI[i % len(SHIFT_TEMPI)])
               for i, v in enumerate(rest[:max(0, n_train - len(rest))])]
    return held, sorted(rest[:n_train] + shifted)


def verses(book: str):
    """Every verse of `book` in order, as plain text (wrapped lines joined)."""
    for chapter in range(1, 151):
        out = subprocess.run(["bible", "-f", f"{book} {chapter}:1-200"], capture_output=True,
                             text=True, check=True).stdout
        text = re.sub(r"\s*\n\s*(?![1-3]?[A-Z][a-z]*\d+:\d+ )", " ", out)
        found = False
        for line in text.splitlines():
            m = re.match(r"^[1-3]?[A-Za-z]+?(\d+):\d+ (.*)$", line.strip())
            if m and int(m.group(1)) == chapter:
                found = True
                yield m.group(2).strip()
        if not found:
            return


def pieces(verse: str, min_chars: int, max_chars: int):
    """Splits a verse at clause punctuation and joins neighbours up to max_chars."""
    clauses = [c.strip() for c in re.split(r"(?<=[;:,.?!])\s+", verse) if c.strip()]
    current = ""
    for clause in clauses:
        joined = f"{current} {clause}".strip()
        if len(joined) <= max_chars:
            current = joined
            continue
        if min_chars <= len(current) <= max_chars:
            yield current
        current = clause
    if min_chars <= len(current) <= max_chars:
        yield current


def texts(books: str, min_chars: int, max_chars: int):
    for book in books.split(","):
        for verse in verses(book):
            yield from pieces(verse, min_chars, max_chars)


def speak(engine: str, voice: str, text: str, path: str, tmp: str, effects=()) -> None:
    raw = os.path.join(tmp, "raw.wav")
    if engine == "espeak":
        subprocess.run(["espeak-ng", "-v", voice, "-s", "160", "-w", raw, text], check=True)
    elif engine == "festival":
        subprocess.run(["text2wave", "-eval", f"(voice_{voice})", "-o", raw], input=text,
                       text=True, check=True)
    else:
        subprocess.run(["flite", "-voice", voice, "-t", text, "-o", raw], check=True)
    # 16 kHz mono 16-bit, leading/trailing silence trimmed, peak-normalised to -3 dBFS; -R seeds
    # sox's dither, so the same text gives the same file.
    subprocess.run(["sox", "-R", raw, "-r", "16000", "-c", "1", "-b", "16", path, *effects,
                    "silence", "1", "0.03", "0.1%", "reverse", "silence", "1", "0.03", "0.1%",
                    "reverse", "gain", "-n", "-3"], check=True)


def write_corpus(out: str, voices: list, lines, prefix: str, tmp: str, minutes=None,
                 per_voice=None, speaker_column=True) -> dict:
    """Speaks `lines` into `out`: each to the voice with the least audio so far until --minutes,
    or in turn until each voice has `per_voice`. Returns {voice: [utterances, seconds]}."""
    os.makedirs(os.path.join(out, "wavs"), exist_ok=True)
    got = {v: [0, 0.0] for v in voices}
    rows = []
    for text in lines:
        voice = min(voices, key=lambda v: got[v][1] if minutes else got[v][0])
        uid = f"{prefix}{len(rows) + 1:05d}"
        path = os.path.join(out, "wavs", f"{uid}.wav")
        name = f"{voice.voice}+{voice.variant}" if voice.variant else voice.voice
        speak(voice.engine, name, text, path, tmp, voice.effects)
        got[voice][0] += 1
        got[voice][1] += sf.info(path).duration
        rows.append(f"{uid}|{text}|{text}" + (f"|{voice.name}" if speaker_column else ""))
        if (sum(g[1] for g in got.values()) >= minutes * 60 if minutes
                else min(g[0] for g in got.values()) >= per_voice):
            break
    with open(os.path.join(out, "metadata.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(rows) + "\n")
    seconds = sum(g[1] for g in got.values())
    print(f"wrote {len(rows)} utterances, {seconds / 60:.1f} min, to {out}")
    return got


def missing_festival_voices(voices: list) -> list:
    """The festival voices of `voices` that festival does not know."""
    known = subprocess.run(["festival", "--batch", "(print (voice.list))"], capture_output=True,
                           text=True, check=True).stdout
    return [v for v in voices if v not in re.findall(r"[\w-]+", known)]


def many_voices(args, tmp: str) -> None:
    held, train = split(inventory(), args.voices, args.held_out_sets, args.held_out, args.seed)
    held_lines = texts(args.held_out_books, args.min_chars, args.max_chars)
    sets = [(args.out, "train", train, texts(args.books, args.min_chars, args.max_chars),
             dict(minutes=args.minutes))]
    sets += [(f"{args.out}_unseen{k}", f"unseen{k}", voices, held_lines,
              dict(per_voice=args.held_out_utterances)) for k, voices in enumerate(held, 1)]
    for k, voices in enumerate(OUTSIDE_SETS[:args.outside_sets], 1):
        label = "outside" + (str(k) if k > 1 else "")
        sets.append((f"{args.out}_{label}", label, [Voice(*spec) for spec in voices], held_lines,
                     dict(per_voice=args.held_out_utterances)))
    table = []
    for out, label, voices, lines, budget in sets:
        got = write_corpus(out, voices, lines, args.prefix, tmp, **budget)
        print(f"  {label}: " + ", ".join(v.name for v in voices))
        table += [f"{v.name}\t{label}\t{v.engine}\t{v.voice}\t{v.variant or '-'}\t"
                  f"{' '.join(v.effects) or '-'}\t{n}\t{s / 60:.2f}" for v, (n, s) in got.items()]
    for out, *_ in sets:
        with open(os.path.join(out, "voices.tsv"), "w", encoding="utf-8") as f:
            f.write("speaker\tset\tengine\tvoice\tvariant\tsox_effects\tutterances\tminutes\n")
            f.write("\n".join(table) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("--out", required=True)
    parser.add_argument("--engine", choices=["espeak", "flite"], default="espeak")
    parser.add_argument("--voice", default="en-us")
    parser.add_argument("--books", default="Gen,Exod")
    parser.add_argument("--minutes", type=float, default=45.0)
    parser.add_argument("--min-chars", type=int, default=25)
    parser.add_argument("--max-chars", type=int, default=90)
    parser.add_argument("--prefix", default="U")
    many = parser.add_argument_group("many-voice mode (--engine and --voice are not used)")
    many.add_argument("--many-voices", action="store_true",
                      help="training corpus and held-out sets of many voices (below)")
    many.add_argument("--voices", type=int, default=25, help="training voices")
    many.add_argument("--held-out-sets", type=int, default=2)
    many.add_argument("--held-out", type=int, default=6, help="voices per held-out set")
    many.add_argument("--held-out-utterances", type=int, default=12, help="per held-out voice")
    many.add_argument("--held-out-books", default="Esth,Dan",
                      help="the held-out sets' texts; none of --books")
    many.add_argument("--seed", type=int, default=0, help="seeds which voices are held out or shifted")
    many.add_argument("--outside-sets", type=int, default=0, choices=range(len(OUTSIDE_SETS) + 1),
                      help="also the first N sets of voices from outside the inventory (above)")
    args = parser.parse_args()
    if args.outside_sets and not args.many_voices:
        parser.error("--outside-sets writes sets of the many-voice mode: add --many-voices (and "
                     "--out for the training corpus they go beside).")
    if args.many_voices and set(args.books.split(",")) & set(args.held_out_books.split(",")):
        parser.error("--held-out-books must not share a book with --books")
    engines = ["espeak-ng", "flite"] if args.many_voices else [
        "espeak-ng" if args.engine == "espeak" else "flite"]
    missing = [tool for tool in ["bible", *engines, "sox"] if shutil.which(tool) is None]
    if missing:
        parser.error(f"{', '.join(missing)} not found on PATH: this script reads its texts with "
                     f"`bible` and speaks them with espeak-ng or flite, then sox; install them "
                     f"with `apt-get install bible-kjv espeak-ng flite sox` and run it again.")
    festival = [voice for voices in OUTSIDE_SETS[:args.outside_sets]
                for engine, voice, *_ in voices if engine == "festival"]
    packages = sorted({p for ps in FESTIVAL_PACKAGES[:args.outside_sets] for p in ps})
    missing = festival if shutil.which("text2wave") is None else missing_festival_voices(festival)
    if missing:
        parser.error(f"--outside-sets {args.outside_sets} speaks with festival's voices, and "
                     f"{', '.join(missing)} "
                     f"{'(and festival itself) ' if missing is festival else ''}"
                     f"are not installed: `apt-get install festival {' '.join(packages)}`, then "
                     f"run it again.")
    with tempfile.TemporaryDirectory() as tmp:
        if args.many_voices:
            try:
                many_voices(args, tmp)
            except ValueError as e:
                parser.error(str(e))
        else:
            write_corpus(args.out, [Voice(args.engine, args.voice)], texts(
                args.books, args.min_chars, args.max_chars), args.prefix, tmp,
                minutes=args.minutes, speaker_column=False)


if __name__ == "__main__":
    main()
