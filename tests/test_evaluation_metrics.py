"""The evaluation measures on constructed inputs: alignments, DTW mel-cepstral distortion,
text match and word error rate (pure numpy, no TensorFlow)."""

import unittest

import numpy as np

from myxtts.evaluation import metrics


def smooth_mel(seed, frames=120, n_mels=40):
    """A speech-like log10 mel: slowly varying spectra around -2."""
    rng = np.random.default_rng(seed)
    steps = rng.normal(0.0, 0.15, (frames, n_mels))
    return np.cumsum(steps, axis=0) * 0.3 - 2.0 + np.sin(np.arange(n_mels) * (seed + 1))[None]


def naive_dtw_mean(cost):
    """Textbook O(n*m) dynamic programme that carries the path length along."""
    n, m = cost.shape
    total = np.full((n + 1, m + 1), np.inf)
    total[0, 0] = 0.0
    length = np.zeros((n + 1, m + 1), int)
    for i in range(1, n + 1):
        for j in range(1, m + 1):
            best = min([(i - 1, j - 1), (i - 1, j), (i, j - 1)], key=lambda p: total[p])
            total[i, j] = cost[i - 1, j - 1] + total[best]
            length[i, j] = length[best] + 1
    return total[n, m] / length[n, m]


class AlignmentMeasuresTest(unittest.TestCase):
    def test_diagonal_alignment_is_perfect(self):
        measures = metrics.alignment_measures(np.eye(12))
        self.assertEqual(measures, {"focus": 1.0, "monotonicity": 1.0, "coverage": 1.0})

    def test_uniform_alignment_is_diffuse(self):
        measures = metrics.alignment_measures(np.full((20, 10), 0.1))
        self.assertAlmostEqual(measures["focus"], 0.1)
        self.assertAlmostEqual(measures["coverage"], 0.1)

    def test_backward_jumps_lower_monotonicity(self):
        backwards = np.eye(6)[[0, 1, 2, 5, 1, 2]]  # one jump back by 4 tokens in 5 moves
        self.assertAlmostEqual(metrics.attention_monotonicity(backwards), 0.8)


class MelCepstralDistortionTest(unittest.TestCase):
    def test_cepstra_drop_c0_and_use_an_orthonormal_dct(self):
        flat = np.full((3, 40), -2.0)  # a flat spectrum is all c0
        np.testing.assert_allclose(metrics.mel_cepstra(flat), 0.0, atol=1e-12)
        cepstra = metrics.mel_cepstra(smooth_mel(0), coefficients=39)
        self.assertEqual(cepstra.shape, (120, 39))
        # Orthonormal: c1..c39 hold all the energy of the mean-removed natural-log frame.
        natural = smooth_mel(0) * np.log(10.0)
        centred = natural - natural.mean(axis=1, keepdims=True)
        np.testing.assert_allclose(np.sum(cepstra ** 2, 1), np.sum(centred ** 2, 1), rtol=1e-9)

    def test_dtw_matches_the_textbook_programme(self):
        rng = np.random.default_rng(3)
        for shape in [(1, 1), (1, 6), (6, 1), (7, 9), (25, 18)]:
            cost = rng.random(shape)
            self.assertAlmostEqual(metrics.dtw_mean_cost(cost), naive_dtw_mean(cost), places=9)

    def test_identical_mels_are_zero(self):
        mel = smooth_mel(1)
        self.assertLess(metrics.dtw_mcd(mel, mel), 1e-5)

    def test_a_time_stretched_copy_is_near_and_another_mel_far(self):
        mel = smooth_mel(1)
        stretched = np.repeat(mel, 3, axis=0)[::2]  # 1.5x slower
        near = metrics.dtw_mcd(stretched, mel)
        far = metrics.dtw_mcd(smooth_mel(2), mel)
        self.assertLess(near, 0.1 * far)
        self.assertGreater(far, 5.0)

    def test_the_dtw_is_fast_for_long_utterances(self):
        # 500 x 500 frames (about 8 s at 16 kHz/256 hop); a loop per cell would take seconds.
        a, b = smooth_mel(4, frames=500), smooth_mel(5, frames=500)
        self.assertGreater(metrics.dtw_mcd(a, b), 0.0)


class TextMatchTest(unittest.TestCase):
    def test_own_recording_nearest_is_a_match(self):
        distances = np.array([[1.0, 5.0, 6.0],
                              [4.0, 3.0, 2.0],   # another recording is nearer
                              [7.0, 7.0, 7.0]])  # a tie is not a match
        np.testing.assert_array_equal(metrics.text_match(distances), [True, False, False])

    def test_not_a_square_matrix_is_refused(self):
        with self.assertRaises(ValueError):
            metrics.text_match(np.zeros((2, 3)))

    def test_groups_of_at_least_among_sentences_in_order(self):
        groups = metrics.match_groups(617, 40)
        self.assertEqual(len(groups), 15)
        self.assertEqual({len(g) for g in groups}, {41, 42})
        np.testing.assert_array_equal(np.concatenate(groups), np.arange(617))
        for count, among in ((48, 40), (40, None), (3, 2)):
            groups = metrics.match_groups(count, among)
            self.assertEqual(len(groups), 1)
            np.testing.assert_array_equal(groups[0], np.arange(count))


class WordErrorRateTest(unittest.TestCase):
    def test_case_and_punctuation_do_not_count(self):
        self.assertEqual(metrics.word_error_rate("Hello, World! It's me.", "hello world it's me"),
                         0.0)

    def test_substitution_deletion_insertion(self):
        self.assertEqual(metrics.word_errors("the cat sat on the mat", "the cat sit on mat"),
                         (2, 6))
        self.assertEqual(metrics.word_errors("a b", "x a b y"), (2, 2))
        self.assertEqual(metrics.word_error_rate("one two", ""), 1.0)
        self.assertEqual(metrics.word_error_rate("go", "no no no"), 3.0)

    def test_a_reference_without_words_is_refused(self):
        with self.assertRaises(ValueError):
            metrics.word_error_rate("...", "hello")


if __name__ == "__main__":
    unittest.main()
