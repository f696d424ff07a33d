"""Long recordings (data.split_long_utterances): real speech from the bundled sample joined into
recordings longer than data.max_audio_seconds. Cuts fall in the pauses between the sentences and
each piece gets exactly its sentences' text; recordings without matching pauses and punctuation
are skipped as too_long with the reason; pieces load as their own samples and serve as each
other's speaker reference.

    python -m pytest tests/test_data_splitting.py -v
"""

import os
import shutil
import tempfile
import unittest

import numpy as np
import soundfile as sf

from myxtts.data.cache import load_samples
from myxtts.data.prepare import prepare_dataset
from myxtts.data.splitting import split_utterance, voiced_intervals
from tests.data_samples import sample_rows, speech, tiny_config, write_metadata

RATE = 16000
# Sentences of speaker anna spoken without an inner pause, 2.6-3.5 s each.
SENTENCES = ("S001", "S005", "S007", "S013")
TEXTS = {uid: text for uid, text, *_ in sample_rows()}


def joined(ids=SENTENCES, gap_seconds=0.5):
    """(audio, [(start, end) of each inserted pause in samples])."""
    gap = np.zeros(int(gap_seconds * RATE), np.float32)
    parts, pauses, at = [], [], 0
    for i, uid in enumerate(ids):
        if i:
            parts.append(gap)
            pauses.append((at, at + len(gap)))
            at += len(gap)
        parts.append(speech(uid))
        at += len(parts[-1])
    return np.concatenate(parts), pauses


def split(audio, text, max_seconds=8.0):
    return split_utterance(text.lower(), voiced_intervals(audio, RATE, 40.0), len(audio), RATE,
                           0.3, max_seconds)


class SplitUtteranceTest(unittest.TestCase):
    def test_cuts_fall_in_the_pauses_between_sentences_with_their_text(self):
        audio, pauses = joined()
        text = " ".join(TEXTS[uid] for uid in SENTENCES)
        for max_seconds in (8.0, 4.0):  # one cut; then every pause
            pieces, reason = split(audio, text, max_seconds)
            self.assertTrue(pieces, reason)
            self.assertEqual(" ".join(p.text for p in pieces), text.lower())
            sentences = [TEXTS[uid].lower() for uid in SENTENCES]
            for piece in pieces:
                self.assertLessEqual(piece.length, max_seconds * RATE)
                # Each piece is whole sentences: its text starts one and ends one.
                self.assertTrue(any(piece.text.startswith(s) for s in sentences), piece.text)
                self.assertTrue(any(piece.text.endswith(s) for s in sentences), piece.text)
            for piece in pieces[1:]:
                self.assertTrue(any(a <= piece.offset < b for a, b in pauses), piece.offset)
            self.assertEqual(pieces[-1].offset + pieces[-1].length, len(audio))
        self.assertEqual(len(split(audio, text, 4.0)[0]), len(SENTENCES))

    def test_no_cut_without_matching_punctuation_and_pauses(self):
        audio, _ = joined()
        text = " ".join(TEXTS[uid] for uid in SENTENCES)
        bare = "".join(c for c in text if c.isalnum() or c == " ")
        self.assertEqual(split(audio, bare), ([], "its transcript has no punctuation to cut at"))
        # Punctuation only where the speaker did not pause (after the first word).
        words = bare.split(" ")
        early = " ".join([words[0] + ","] + words[1:])
        self.assertEqual(split(audio, early)[1],
                         "no pause falls where the transcript's punctuation predicts one")
        tone = np.sin(np.arange(12 * RATE) * 2 * np.pi * 200 / RATE).astype(np.float32) * 0.3
        self.assertEqual(split(tone, text)[1], "no pause inside the speech")


class SplitDatasetTest(unittest.TestCase):
    """One speaker whose only recordings are two long ones: with splitting on, the pieces are
    training items (and each other's references); with it off, both are skipped."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.data = os.path.join(cls.tmp, "data")
        os.makedirs(cls.data)  # audio beside metadata.csv, no wavs/ folder
        lines = []
        for uid, ids in (("long1", SENTENCES), ("long2", SENTENCES[::-1])):
            audio, _ = joined(ids)
            sf.write(os.path.join(cls.data, f"{uid}.flac"), audio, RATE)
            text = " ".join(TEXTS[i] for i in ids)
            lines.append(f"{uid}|{text}|{text}|carl|en")
        write_metadata(cls.data, lines)
        cls.config = tiny_config(val_fraction=0.0, split_long_utterances=True,
                                 max_audio_seconds=7.0)
        cls.prepared = prepare_dataset(cls.config, cls.data, work_dir=os.path.join(cls.tmp, "r"))

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_pieces_are_items_counted_as_split(self):
        items = self.prepared.items["train"]
        report = self.prepared.report
        self.assertEqual(report.count("split_long"), 2, report.table())
        self.assertIn("split_long", report.table())
        self.assertEqual(report.count("no_reference"), 0, report.table())
        self.assertEqual({it.id.split("#")[0] for it in items}, {"long1", "long2"})
        self.assertGreaterEqual(len(items), 4)
        for item in items:
            self.assertLessEqual(item.num_samples, 7.0 * RATE)
            samples = load_samples(item, self.config.data)
            self.assertEqual(len(samples), item.num_samples)
            whole = sf.read(item.audio_path, dtype="float32")[0]
            np.testing.assert_allclose(samples, whole[item.offset:item.offset + item.num_samples],
                                       atol=1e-4)

    def test_without_splitting_long_recordings_are_skipped(self):
        config = tiny_config(val_fraction=0.0, max_audio_seconds=7.0, min_train_items=0)
        prepared = prepare_dataset(config, self.data)
        self.assertEqual(prepared.report.count("too_long"), 2)
        self.assertEqual(prepared.items["train"], [])


if __name__ == "__main__":
    unittest.main()
