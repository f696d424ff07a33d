"""Regenerates samples/ljspeech_sample/ offline with espeak-ng and sox (Debian packages).

    apt-get install espeak-ng sox libsox-fmt-all bible-kjv
    python samples/make_sample_dataset.py

English text: short verses of the King James Bible (public domain) from the `bible` program of
the bible-kjv package. German and Spanish text: sentences written for this sample (CC0).
Two speakers are two espeak-ng voice variants; audio is 16 kHz mono (configs/tiny.yaml),
stored as WAV, FLAC and OGG/Vorbis to exercise every decoder.
"""

import os
import re
import shutil
import subprocess
import tempfile

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ljspeech_sample")
CHAPTERS = ["Gen 1:1-31", "Ps 23:1-6", "Ps 121:1-8", "Eccl 3:1-22", "Matt 5:1-48"]
ENGLISH_ROWS = 48
SPEAKERS = {"anna": "+f2", "ben": "+m3"}
ESPEAK_LANG = {"en": "en-us", "de": "de", "es": "es"}
OTHER = [
    ("de", "anna", "Über den Bergen scheint heute die Sonne."),
    ("de", "ben", "Der Bäcker öffnet seinen Laden früh am Morgen."),
    ("de", "anna", "Im Garten wachsen Äpfel, Birnen und Pflaumen."),
    ("de", "ben", "Die Kinder spielen fröhlich auf der großen Wiese."),
    ("de", "anna", "Wir fahren morgen mit dem Zug nach München."),
    ("es", "ben", "El niño pequeño come una manzana en el jardín."),
    ("es", "anna", "Mañana viajaremos juntos a la montaña."),
    ("es", "ben", "La canción de la mañana es muy alegre."),
    ("es", "anna", "Mi abuela prepara una paella deliciosa."),
    ("es", "ben", "El sol brilla sobre el mar azul del norte."),
]


def verses():
    for chapter in CHAPTERS:
        out = subprocess.run(["bible", "-f", chapter], capture_output=True, text=True,
                             check=True).stdout
        text = re.sub(r"\s*\n\s*(?![A-Z][a-z]*\d+:\d+ )", " ", out)
        for line in text.splitlines():
            m = re.match(r"^\S+?\d+:\d+ (.*)$", line.strip())
            if m and 25 <= len(m.group(1)) <= 95:
                yield m.group(1).strip()


def synthesize(text, language, speaker, path, tmp):
    raw = os.path.join(tmp, "raw.wav")
    voice = ESPEAK_LANG[language] + SPEAKERS[speaker]
    subprocess.run(["espeak-ng", "-v", voice, "-s", "165", "-w", raw, text], check=True)
    # 16 kHz mono, 30 ms of silence trimmed at both ends, peak-normalised to -3 dBFS.
    encoding = ["-C", "3"] if path.endswith(".ogg") else ["-b", "16"]
    subprocess.run(["sox", raw, "-r", "16000", "-c", "1", *encoding, path,
                    "silence", "1", "0.03", "0.1%", "reverse", "silence", "1", "0.03", "0.1%",
                    "reverse", "gain", "-n", "-3"], check=True)


def main():
    if os.path.isdir(OUT):
        shutil.rmtree(os.path.join(OUT, "wavs"), ignore_errors=True)
    os.makedirs(os.path.join(OUT, "wavs"), exist_ok=True)
    rows = [("en", "anna" if i % 2 == 0 else "ben", t)
            for i, t in enumerate(list(verses())[:ENGLISH_ROWS])]
    rows += OTHER
    lines = []
    with tempfile.TemporaryDirectory() as tmp:
        for i, (language, speaker, text) in enumerate(rows, start=1):
            uid = f"S{i:03d}"
            ext = "wav" if i % 5 == 0 else "flac" if i % 3 == 0 else "ogg"
            synthesize(text, language, speaker, os.path.join(OUT, "wavs", f"{uid}.{ext}"), tmp)
            lines.append(f"{uid}|{text}|{text}|{speaker}|{language}")
    with open(os.path.join(OUT, "metadata.csv"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {len(lines)} rows to {OUT}")


if __name__ == "__main__":
    main()
