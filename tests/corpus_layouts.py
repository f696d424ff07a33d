"""Small corpora in the layouts people download (LibriTTS, VCTK, Common Voice), written from the
bundled sample's real speech (two speakers, anna and ben), with the faults those corpora have:
an audio file without a transcript, a transcript without audio, a bad TSV row, down-votes."""

import os

import soundfile as sf

from tests.data_samples import sample_rows

LIBRITTS_SPEAKERS = {"anna": "19", "ben": "26"}
VCTK_SPEAKERS = {"anna": "p225", "ben": "p226"}
CV_CLIENTS = {"anna": "4f1e" * 16, "ben": "9b2c" * 16}
CV_HEADER = ["client_id", "path", "sentence_id", "sentence", "sentence_domain", "up_votes",
             "down_votes", "age", "gender", "accents", "variant", "locale", "segment"]


def _by_speaker(per_speaker):
    rows = {}
    for uid, text, speaker, _, path in sample_rows():
        if len(rows.setdefault(speaker, [])) < per_speaker:
            rows[speaker].append((uid, text, path))
    return rows


def _write(path, source, fmt=None):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    audio, rate = sf.read(source)
    sf.write(path, audio, rate, format=fmt)


def write_libritts(root, per_speaker=8):
    """root = one subset (train-clean-100 shaped): SPEAKER/CHAPTER/ with a trans.tsv; the
    second chapter of each speaker has .normalized.txt files instead. Faults: one audio file
    without a transcript, one transcript line without audio. Returns the usable rows' count."""
    for speaker, rows in _by_speaker(per_speaker).items():
        sid = LIBRITTS_SPEAKERS[speaker]
        half = len(rows) // 2
        for chapter, part in (("100", rows[:half]), ("200", rows[half:])):
            folder = os.path.join(root, sid, chapter)
            lines = []
            for i, (_, text, path) in enumerate(part):
                uid = f"{sid}_{chapter}_000001_{i:06d}"
                _write(os.path.join(folder, uid + ".wav"), path)
                if chapter == "100":
                    lines.append(f"{uid}\tOriginal: {text}\t{text}")
                else:
                    with open(os.path.join(folder, uid + ".normalized.txt"), "w") as f:
                        f.write(text)
            if lines:
                lines.append(f"{sid}_{chapter}_000009_000000\tNo audio.\tNo audio.")
                with open(os.path.join(folder, f"{sid}_{chapter}.trans.tsv"), "w") as f:
                    f.write("\n".join(lines) + "\n")
        _write(os.path.join(root, sid, "200", f"{sid}_200_000009_000001.wav"), rows[0][2])
    return 2 * per_speaker


def write_vctk(root, per_speaker=8):
    """VCTK 0.92: txt/pNNN/pNNN_001.txt and wav48_silence_trimmed/pNNN/pNNN_001_mic{1,2}.flac
    (mic2 is another utterance's speech, to tell which was read). Faults: one take without a
    transcript, one transcript without audio."""
    for speaker, rows in _by_speaker(per_speaker).items():
        sid = VCTK_SPEAKERS[speaker]
        for i, (_, text, path) in enumerate(rows, start=1):
            uid = f"{sid}_{i:03d}"
            with open(os.path.join(_mkdir(root, "txt", sid), uid + ".txt"), "w") as f:
                f.write(text + "\n")
            audio = os.path.join(root, "wav48_silence_trimmed", sid)
            _write(os.path.join(audio, uid + "_mic1.flac"), path)
            _write(os.path.join(audio, uid + "_mic2.flac"), rows[i % len(rows)][2])
        with open(os.path.join(root, "txt", sid, f"{sid}_900.txt"), "w") as f:
            f.write("A transcript whose recording is missing.\n")
        _write(os.path.join(root, "wav48_silence_trimmed", sid, f"{sid}_901_mic1.flac"),
               rows[0][2])
    return 2 * per_speaker


def write_commonvoice(root, per_speaker=8):
    """A Common Voice release: clips/*.mp3, validated.tsv (every row) and train.tsv/dev.tsv.
    Faults in validated.tsv: one row with a down-vote, one row with a missing column."""
    lines = {"validated": [], "train": [], "dev": []}
    number = 0
    for speaker, rows in _by_speaker(per_speaker).items():
        for i, (_, text, path) in enumerate(rows):
            number += 1
            clip = f"common_voice_en_{1000 + number}.mp3"
            _write(os.path.join(root, "clips", clip), path, fmt="MP3")
            down = "1" if (speaker, i) == ("ben", 0) else "0"
            line = "\t".join([CV_CLIENTS[speaker], clip, f"s{number}", text, "", "2", down, "",
                              "", "", "", "en", ""])
            lines["validated"].append(line)
            lines["dev" if i == len(rows) - 1 else "train"].append(line)
    lines["validated"].append("\t".join([CV_CLIENTS["anna"], "common_voice_en_1.mp3", "x"]))
    for name, body in lines.items():
        with open(os.path.join(root, name + ".tsv"), "w") as f:
            f.write("\n".join(["\t".join(CV_HEADER)] + body) + "\n")
    return 2 * per_speaker - 1


def _mkdir(*parts):
    path = os.path.join(*parts)
    os.makedirs(path, exist_ok=True)
    return path
