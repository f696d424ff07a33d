"""The voice-cloning measures of myxtts-evaluate: the numpy measures on constructed embeddings
(exact values), the speaker judge on real voices (two flite voices it must tell apart, as the
ceiling does) and the judge's absence (a reason, never a failure)."""

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import librosa
import numpy as np
import soundfile as sf

from myxtts.data.validation import Item
from myxtts.evaluation.speaker_judge import (HeardRecordings, SpeakerJudgeUnavailableError,
                                             load_speaker_judge)
from myxtts.evaluation.speaker_measures import (ClonePair, centroid_match, cloning_measures,
                                                cosine_matrix, reference_decides,
                                                reference_secs, same_and_different_secs)

JUDGE_INSTALLED = bool(importlib.util.find_spec("resemblyzer")
                       and importlib.util.find_spec("torch"))


def assert_close(test, actual, expected, path="summary"):
    """Nested dicts/lists compared with 1e-9 tolerance on floats."""
    if isinstance(expected, dict):
        test.assertEqual(set(actual), set(expected), path)
        for key in expected:
            assert_close(test, actual[key], expected[key], f"{path}[{key!r}]")
    elif isinstance(expected, float):
        test.assertAlmostEqual(actual, expected, places=9, msg=path)
    else:
        test.assertEqual(actual, expected, path)


class MeasuresTest(unittest.TestCase):
    def test_cosine_matrix_ignores_lengths_and_refuses_zero_rows(self):
        np.testing.assert_allclose(cosine_matrix([[1, 0], [0, 2]], [[3, 4]]), [[0.6], [0.8]])
        with self.assertRaisesRegex(ValueError, "non-zero"):
            cosine_matrix([[0, 0]], [[1, 0]])

    def test_centroid_match_leaves_the_own_recording_out(self):
        # A's second recording sounds like B: left out, neither of A's finds A's centroid.
        recordings = [[1, 0], [0, 1], [0.2, 1], [0.3, 1]]
        speakers = ["A", "A", "B", "B"]
        np.testing.assert_array_equal(
            centroid_match(recordings, speakers, range(4), recordings, speakers),
            [False, False, True, True])
        # Kept in, A's centroid is [0.5, 0.5]: the first recording of A is nearest to it.
        self.assertTrue(centroid_match([[1, 0]], ["A"], [None], recordings, speakers)[0])
        with self.assertRaisesRegex(ValueError, "speaker 'C' has no recording"):
            centroid_match([[1, 0]], ["C"], [None], recordings, speakers)

    def test_a_tie_is_not_a_match(self):
        self.assertFalse(centroid_match([[1, 1]], ["A"], [None], [[1, 0], [0, 1]],
                                        ["A", "B"])[0])

    def test_same_and_different_speaker_secs(self):
        recordings = [[1, 0], [0.6, 0.8], [0, 1]]
        speakers = ["A", "A", "B"]
        same, different = same_and_different_secs(recordings, speakers)
        self.assertAlmostEqual(same, 0.6)
        self.assertAlmostEqual(different, 0.4)  # (0 + 0.8) / 2
        same, different = same_and_different_secs(recordings, speakers, of="B")
        self.assertIsNone(same)
        self.assertAlmostEqual(different, 0.4)

    def test_reference_secs_own_and_other_speakers(self):
        own, others = reference_secs([[1, 0], [0, 1]], [0, 1], ["A", "B"],
                                     [[1, 0], [0, 1], [0.6, 0.8]], ["A", "B", "B"])
        np.testing.assert_allclose(own, [1.0, 1.0])
        np.testing.assert_allclose(others, [0.3, 0.0])  # A's output: mean(0, 0.6)

    def test_reference_decides_needs_both_outputs_nearer_their_own_reference(self):
        own_references, cross_references = [[1, 0]] * 2, [[0, 1]] * 2
        decided = reference_decides([[1, 0.2], [1, 0.2]], [[0.2, 1], [1, 0.1]],
                                    own_references, cross_references)
        np.testing.assert_array_equal(decided, [True, False])

    def test_cloning_measures_per_sentence_overall_and_per_speaker(self):
        # Recordings: 0 and 1 are A's (0 is sentence 1, 1 its reference), 2 and 3 B's.
        recordings = [[1, 0], [1, 0], [0, 1], [0, 1]]
        speakers = ["A", "A", "B", "B"]
        pairs = [
            # Sentence of A: with A's reference it sounds like A, with B's like B.
            ClonePair(recording=0, own_reference=1, cross_reference=3,
                      own_output=np.array([1.0, 0.0]), cross_output=np.array([0.0, 1.0])),
            # Sentence of B: like B with B's reference, but still like B with A's.
            ClonePair(recording=2, own_reference=3, cross_reference=1,
                      own_output=np.array([0.6, 0.8]), cross_output=np.array([0.6, 0.8])),
        ]
        fields, summary = cloning_measures(pairs, recordings, speakers)
        assert_close(self, fields, [
            {"secs_own": 1.0, "secs_others": 0.0, "speaker_match": True,
             "cross_secs_own": 1.0, "cross_secs_others": 0.0, "cross_speaker_match": True,
             "reference_decides": True},
            {"secs_own": 0.8, "secs_others": 0.6, "speaker_match": True,
             "cross_secs_own": 0.6, "cross_secs_others": 0.8, "cross_speaker_match": False,
             "reference_decides": False}], "fields")
        real = {"recordings": 4, "leave_one_out_match": 1.0, "secs_same_speaker": 1.0,
                "secs_different_speaker": 0.0, "secs_gap": 1.0}
        assert_close(self, summary, {
            "speakers": ["A", "B"], "chance": 0.5, "outputs": 4,
            "secs_own": 0.85, "secs_others": 0.35, "secs_gap": 0.5, "speaker_match": 0.75,
            "real": real, "gap_ratio": 0.5, "reference_decides": 0.5,
            "per_speaker": {
                # A's voice: sentence 1 with A's reference, sentence 2 with A's reference.
                "A": {"outputs": 2, "secs_own": 0.8, "secs_others": 0.4, "secs_gap": 0.4,
                      "speaker_match": 0.5, "real": {**real, "recordings": 2},
                      "gap_ratio": 0.4},
                "B": {"outputs": 2, "secs_own": 0.9, "secs_others": 0.3, "secs_gap": 0.6,
                      "speaker_match": 1.0, "real": {**real, "recordings": 2},
                      "gap_ratio": 0.6}}})

    def test_cloning_measures_need_two_speakers(self):
        pair = ClonePair(0, 1, 1, np.array([1.0, 0.0]), np.array([1.0, 0.0]))
        with self.assertRaisesRegex(ValueError, "two speakers"):
            cloning_measures([pair], [[1, 0], [1, 0]], ["A", "A"])


class JudgeAbsentTest(unittest.TestCase):
    def test_without_resemblyzer_the_reason_says_how_to_install_it(self):
        with mock.patch.dict(sys.modules, {"resemblyzer": None}):  # as if not installed
            judge, why = load_speaker_judge("auto")
            self.assertIsNone(judge)
            self.assertIn("resemblyzer is not installed", why)
            self.assertIn("pip install --no-deps resemblyzer", why)
            with self.assertRaisesRegex(SpeakerJudgeUnavailableError, "not installed"):
                load_speaker_judge("resemblyzer")
        self.assertEqual(load_speaker_judge("none"), (None, "not asked for"))


FLITE_TEXTS = ("The quick brown fox jumps over the lazy dog.",
               "She sells sea shells by the sea shore.",
               "A journey of a thousand miles begins with a single step.")


@unittest.skipUnless(JUDGE_INSTALLED, "the speaker judge (resemblyzer, torch) is not installed")
@unittest.skipUnless(shutil.which("flite"), "flite is not installed (apt-get install flite)")
class RealVoicesTest(unittest.TestCase):
    def test_the_speaker_measures_separate_two_real_voices(self):
        judge, why = load_speaker_judge("resemblyzer")
        self.assertIsNotNone(judge, why)
        heard = HeardRecordings(judge, 22050)
        with tempfile.TemporaryDirectory() as tmp:
            for voice in ("slt", "rms"):  # a female and a male US-English flite voice
                for number, text in enumerate(FLITE_TEXTS):
                    path = os.path.join(tmp, f"{voice}{number}.wav")
                    subprocess.run(["flite", "-voice", voice, "-t", text, "-o", path],
                                   check=True)
                    samples, rate = sf.read(path, dtype="float32")
                    # At the data's rate, as evaluate hands it over; the judge resamples.
                    samples = librosa.resample(samples, orig_sr=rate, target_sr=22050)
                    item = Item(f"{voice}{number}", path, text, (), voice, 0, len(samples),
                                rate)
                    index = heard.index(item, samples)
                    self.assertEqual(heard.index(item, samples), index)  # heard once
        self.assertEqual(heard.speakers, ["slt"] * 3 + ["rms"] * 3)
        embeddings = np.stack(heard.embeddings)
        self.assertEqual(embeddings.shape, (6, 256))
        np.testing.assert_allclose(np.linalg.norm(embeddings, axis=1), 1.0, rtol=1e-5)
        loo = centroid_match(embeddings, heard.speakers, range(6), embeddings, heard.speakers)
        self.assertTrue(np.all(loo), loo)
        same, different = same_and_different_secs(embeddings, heard.speakers)
        self.assertGreater(same - different, 0.2, (same, different))
        # The level is not the voice: a recording 20 dB quieter or 6 dB louder (clipped to
        # nothing: it peaks well below 1) embeds as itself.
        for gain in (0.1, 2.0):
            again = judge.embed(samples * gain, 22050)
            self.assertGreater(float(again @ embeddings[-1]), 0.999)


if __name__ == "__main__":
    unittest.main()
