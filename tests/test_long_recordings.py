"""From an audiobook chapter and its text to a training corpus (myxtts.make_corpus): a chapter
that flite reads (a voice unlike espeak-ng's, which hears the punctuation) is cut into pieces
whose texts are exactly the sentences spoken in them, and the corpus passes validation.

    python -m pytest tests/test_long_recordings.py -v
"""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import soundfile as sf

from myxtts.data.long_recordings import build_corpus, split_recording
from myxtts.data.transcript_alignment import espeak_voice
from tests.data_samples import REPO, TINY, tiny_config

RATE = 16000
# Genesis 1:1-13 (KJV), one sentence per verse-part; flite reads each, then they are joined.
SENTENCES = (
    "In the beginning God created the heaven and the earth.",
    "And the earth was without form, and void; and darkness was upon the face of the deep.",
    "And the Spirit of God moved upon the face of the waters.",
    "And God said, Let there be light: and there was light.",
    "And God saw the light, that it was good: and God divided the light from the darkness.",
    "And God called the light Day, and the darkness he called Night.",
    "And the evening and the morning were the first day.",
    "And God said, Let there be a firmament in the midst of the waters.",
    "And God made the firmament, and divided the waters which were under the firmament from "
    "the waters which were above the firmament: and it was so.",
    "And God called the firmament Heaven.",
    "And the evening and the morning were the second day.",
    "And God said, Let the waters under the heaven be gathered together unto one place, and let "
    "the dry land appear: and it was so.",
    "And God called the dry land Earth; and the gathering together of the waters called he Seas.",
)


def read_aloud(folder):
    """chapter.wav (flite's slt voice, 0.35-0.65 s between sentences) and chapter.txt in
    `folder`; returns each sentence's [start, end) in seconds."""
    rng = np.random.default_rng(0)
    parts, spans, at = [], [], 0
    for i, sentence in enumerate(SENTENCES):
        path = os.path.join(folder, "sentence.wav")
        subprocess.run(["flite", "-voice", "slt", "-t", sentence, "-o", path], check=True)
        samples, rate = sf.read(path, dtype="float32")
        assert rate == RATE
        nonzero = np.flatnonzero(np.abs(samples) > 1e-3)
        samples = samples[nonzero[0]:nonzero[-1] + 1]
        if i:
            gap = np.zeros(int(rng.uniform(0.35, 0.65) * RATE), np.float32)
            parts.append(gap)
            at += len(gap)
        parts.append(samples)
        spans.append((at / RATE, (at + len(samples)) / RATE))
        at += len(samples)
    os.remove(os.path.join(folder, "sentence.wav"))
    sf.write(os.path.join(folder, "chapter.wav"), np.concatenate(parts), RATE)
    with open(os.path.join(folder, "chapter.txt"), "w", encoding="utf-8") as f:
        # A transcript as people have it: wrapped lines.
        f.write("\n".join(SENTENCES[:4]) + "\n\n" + " ".join(SENTENCES[4:]) + "\n")
    return spans


@unittest.skipUnless(shutil.which("flite") and espeak_voice("en"),
                     "needs flite and espeak-ng (apt-get install flite espeak-ng; .ci/run does)")
class ChapterToCorpusTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.recordings = os.path.join(cls.tmp, "audiobook")
        os.makedirs(cls.recordings)
        cls.spans = read_aloud(cls.recordings)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def expected_text(self, start, end):
        """The sentences spoken in [start, end) seconds, which must be whole."""
        inside = [i for i, (a, b) in enumerate(self.spans) if a < end and b > start]
        for i in inside:
            a, b = self.spans[i]
            self.assertTrue(start <= a and b <= end, f"a cut at {start:.2f}-{end:.2f} s falls "
                                                     f"inside sentence {i + 1} ({a:.2f}-{b:.2f})")
        return " ".join(SENTENCES[i] for i in inside)

    def test_every_piece_holds_exactly_its_sentences(self):
        samples, _ = sf.read(os.path.join(self.recordings, "chapter.wav"), dtype="float32")
        with open(os.path.join(self.recordings, "chapter.txt"), encoding="utf-8") as f:
            text = " ".join(f.read().split())
        pieces, reason = split_recording(samples, text, tiny_config().data, "en")
        self.assertTrue(pieces, reason)
        for piece in pieces:
            self.assertLessEqual(piece.length, 8.0 * RATE)
            self.assertEqual(piece.text, self.expected_text(piece.offset / RATE,
                                                            (piece.offset + piece.length) / RATE))
        kept = sum(p.length for p in pieces) / len(samples)
        self.assertGreater(kept, 0.8)

    def test_the_command_writes_a_corpus_that_trains(self):
        # As a user types it, from a working folder with relative paths.
        done = subprocess.run([sys.executable, "-m", "myxtts.make_corpus", "--recordings",
                               "audiobook", "--out", "corpus", "--config", TINY, "--speaker",
                               "reader"], cwd=self.tmp, capture_output=True, text=True,
                              env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
        self.assertEqual(done.returncode, 0, done.stdout + done.stderr)
        self.assertIn("heard with espeak-ng's 'en-us' voice", done.stdout)
        with open(os.path.join(self.tmp, "corpus", "metadata.csv"), encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("|") for line in f]
        self.assertGreaterEqual(len(rows), 8)
        spoken = " ".join(row[1] for row in rows)
        for row in rows:
            uid, text, normalized, speaker, language = row
            self.assertEqual((text, speaker, language), (normalized, "reader", "en"))
            self.assertTrue(any(text.startswith(s) for s in SENTENCES), text)
            self.assertTrue(any(text.endswith(s) for s in SENTENCES), text)
            info = sf.info(os.path.join(self.tmp, "corpus", "wavs", f"{uid}.wav"))
            self.assertEqual(info.samplerate, RATE)
            self.assertLessEqual(info.duration, 8.0)
        self.assertIn(SENTENCES[0], spoken)
        validated = subprocess.run(
            [sys.executable, os.path.join(REPO, "train_main.py"), "--train-data", "corpus",
             "--config", TINY, "--validate-only"], cwd=self.tmp, capture_output=True, text=True,
            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""), timeout=300)
        self.assertEqual(validated.returncode, 0, validated.stdout + validated.stderr)
        self.assertIn(f"OK: {len(rows) - 1} usable training rows", validated.stdout
                      + validated.stderr)
        again = subprocess.run([sys.executable, "-m", "myxtts.make_corpus", "--recordings",
                                "audiobook", "--out", "corpus", "--config", TINY], cwd=self.tmp,
                               capture_output=True, text=True,
                               env=dict(os.environ, PYTHONPATH=REPO), timeout=300)
        self.assertEqual(again.returncode, 2)
        self.assertIn("already holds a metadata.csv", again.stderr + again.stdout)

    def test_an_unreadable_recording_is_reported_and_the_others_kept(self):
        folder = os.path.join(self.tmp, "mixed")
        shutil.copytree(self.recordings, folder)
        with open(os.path.join(folder, "broken.wav"), "w", encoding="utf-8") as f:
            f.write("not audio")
        with open(os.path.join(folder, "broken.txt"), "w", encoding="utf-8") as f:
            f.write("Some text.")
        results = build_corpus(folder, os.path.join(self.tmp, "mixed_corpus"),
                               tiny_config().data, "en")
        by_name = {r.name: r for r in results}
        self.assertEqual(by_name["broken"].pieces, [])
        self.assertIn("cannot read", by_name["broken"].reason)
        self.assertIn("broken.wav", by_name["broken"].reason)
        self.assertTrue(by_name["chapter"].pieces)
        with open(os.path.join(self.tmp, "mixed_corpus", "metadata.csv"), encoding="utf-8") as f:
            self.assertEqual(len(f.readlines()), len(by_name["chapter"].pieces))


if __name__ == "__main__":
    unittest.main()
