"""Reading by durations (model.text_alignment: durations): the monotonic alignment search, the
duration arithmetic, a tiny model whose decoder may only read its aligned tokens, teacher
forced and decoding, and one whose decoder steps read the aligned text instead of the frames
before them (model.decoder_input: aligned_text).

    python -m pytest tests/test_durations.py -v
"""

import itertools
import unittest

import numpy as np
import tensorflow as tf

from myxtts.models.durations import (READ_CONTEXT, frame_positions, monotonic_alignment,
                                     predicted_token_ends, step_reading_mask, token_durations,
                                     tokens_at)
from tests.model_helpers import decode_both_ways, random_batch, tiny_config, tiny_model


def _paths(frames: int, tokens: int):
    """Every monotonic path: frame 0 on token 0, steps of 0 or 1 token, the last frame on the
    last token."""
    for moves in itertools.product((0, 1), repeat=frames - 1):
        if sum(moves) == tokens - 1:
            yield np.concatenate([[0], np.cumsum(moves)])


class AlignmentSearchTest(unittest.TestCase):
    def test_finds_the_most_likely_monotonic_path(self):
        rng = np.random.default_rng(0)
        for _ in range(5):
            log_probs = rng.normal(0.0, 2.0, (1, 8, 4)).astype(np.float32)
            got = monotonic_alignment(tf.constant(log_probs), [4], [8]).numpy()[0]
            score = log_probs[0, np.arange(8), got].sum()
            best = max(log_probs[0, np.arange(8), p].sum() for p in _paths(8, 4))
            self.assertIn(list(got), [list(p) for p in _paths(8, 4)])
            self.assertAlmostEqual(float(score), float(best), places=4)

    def test_items_of_a_batch_keep_their_own_lengths(self):
        # Item 0: a clear path over 5 tokens and 10 frames; item 1: 3 tokens, 6 frames; the
        # padding (tokens past the length, frames past the end) is likelier than any valid cell.
        log_probs = np.full((2, 12, 6), -5.0, np.float32)
        log_probs[:, :, 5] = 0.0
        log_probs[:, 10:, :] = 0.0
        for t, n in enumerate([0, 0, 1, 1, 1, 2, 3, 3, 4, 4]):
            log_probs[0, t, n] = -0.1
        for t, n in enumerate([0, 1, 1, 1, 2, 2]):
            log_probs[1, t, n] = -0.1
        path = monotonic_alignment(tf.constant(log_probs), [5, 3], [10, 6])
        np.testing.assert_array_equal(path.numpy()[0], [0, 0, 1, 1, 1, 2, 3, 3, 4, 4, 4, 4])
        np.testing.assert_array_equal(path.numpy()[1, :6], [0, 1, 1, 1, 2, 2])
        durations = token_durations(path, 6, tf.constant([10, 6])).numpy()
        np.testing.assert_array_equal(durations, [[2, 3, 1, 2, 2, 0], [1, 3, 2, 0, 0, 0]])


class DurationArithmeticTest(unittest.TestCase):
    def test_predicted_ends_and_the_tokens_of_frames(self):
        frames = np.array([[2.0, 3.0, 0.0, 1.0, 9.0]], np.float32)  # the last token is padding
        ends = predicted_token_ends(tf.math.log1p(frames), [4]).numpy()
        np.testing.assert_array_equal(ends, [[2, 5, 5, 6, 6]])
        on = tokens_at(tf.constant(ends), tf.constant([[0, 1, 2, 4, 5, 6, 9]]), [4]).numpy()
        np.testing.assert_array_equal(on, [[0, 0, 1, 1, 3, 3, 3]])  # token 2 has no frame

    def test_the_place_of_frames_in_their_tokens(self):
        ends = tf.constant([[2, 5, 5, 6]])  # token 2 has no frame
        tokens, places = frame_positions(ends, tf.constant([[0, 1, 2, 4, 5, 6, 9]]), [4])
        np.testing.assert_array_equal(tokens.numpy(), [[0, 0, 1, 1, 3, 3, 3]])
        np.testing.assert_allclose(places.numpy()[0, :, 0],
                                   [0.25, 0.75, 1 / 6, 5 / 6, 0.5, 1.5, 2.0])  # past the end: > 1
        np.testing.assert_allclose(places.numpy()[0, :, 1],
                                   np.log1p([2, 2, 3, 3, 1, 1, 1]), rtol=1e-6)

    def test_a_step_reads_its_tokens_and_one_on_each_side(self):
        mask = step_reading_mask(tf.constant([[0, 2]]), tf.constant([[1, 4]]), [5], 7).numpy()
        self.assertEqual(mask.shape, (1, 1, 2, 7))
        self.assertEqual(READ_CONTEXT, 1)
        np.testing.assert_array_equal(mask[0, 0].astype(int), [[1, 1, 1, 0, 0, 0, 0],
                                                               [0, 1, 1, 1, 1, 0, 0]])


class DurationsModelTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tf.random.set_seed(0)
        cls.config = tiny_config(text_alignment="durations")
        cls.r = cls.config.model.reduction_factor
        cls.model = tiny_model(cls.config)
        cls.batch = random_batch(cls.config)

    def test_teacher_forced_reading_stays_on_the_aligned_tokens(self):
        b = self.batch
        out = self.model(b, training=False)
        path = monotonic_alignment(out["aligner_log_probs"], b["token_lengths"],
                                   b["mel_lengths"]).numpy()
        np.testing.assert_array_equal(out["durations"].numpy().sum(axis=1), b["mel_lengths"])
        attention = out["text_attention"].numpy()  # [B, blocks * heads, S, T]
        for i, (tokens, frames) in enumerate(zip(b["token_lengths"].numpy(),
                                                 b["mel_lengths"].numpy())):
            for s in range(-(-frames // self.r)):
                first, last = path[i, s * self.r], path[i, s * self.r + self.r - 1]
                outside = np.ones(attention.shape[-1], bool)
                outside[max(first - 1, 0): min(last + 2, tokens)] = False
                self.assertEqual(float(np.abs(attention[i, :, s, outside]).max(initial=0.0)), 0.0)
                self.assertAlmostEqual(float(attention[i, :, s].sum(-1).min()), 1.0, places=5)

    def test_decoding_reads_the_tokens_the_predicted_durations_place(self):
        b = self.batch
        args, _ = decode_both_ways(self, self.model, b)
        # The window and the alignments from one decode: the predicted ends are rounded, and an
        # eager and a graph computation of them may round a sum near x.5 differently.
        state = self.model.decode_steps(self.model.start_decode(*args, 8), 8, 1 - 1e-6)
        ends = state.token_ends.numpy()
        alignments = self.model.decoded(state)["alignments"].numpy()
        for i, tokens in enumerate(b["token_lengths"].numpy()):
            for s in range(8):
                on = tokens_at(ends[i:i + 1], tf.constant([[s * self.r, (s + 1) * self.r - 1]]),
                               [tokens]).numpy()[0]
                outside = np.ones(alignments.shape[-1], bool)
                outside[max(on[0] - 1, 0): min(on[1] + 2, tokens)] = False
                # a window over every token leaves nothing outside it: initial=0
                self.assertEqual(float(np.abs(alignments[i, s, outside]).max(initial=0.0)), 0.0)

    def test_attention_models_carry_no_durations(self):
        model = tiny_model(tiny_config())
        out = model(self.batch, training=False)
        self.assertNotIn("durations", out)
        b = self.batch
        state = model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"],
                                   model.speaker_latents(b["ref_mel"], b["ref_lengths"]), 4)
        self.assertEqual(int(tf.reduce_max(tf.abs(state.token_ends))), 0)


class AlignedTextModelTest(unittest.TestCase):
    """model.decoder_input aligned_text: no frame depends on decoded frames, so decoding with
    the durations of the recording gives exactly the teacher-forced frames."""

    @classmethod
    def setUpClass(cls):
        tf.random.set_seed(0)
        cls.config = tiny_config(text_alignment="durations", decoder_input="aligned_text")
        cls.r = cls.config.model.reduction_factor
        cls.model = tiny_model(cls.config)
        cls.batch = random_batch(cls.config)

    def test_decoding_with_the_recordings_durations_gives_the_teacher_forced_frames(self):
        b, r = self.batch, self.r
        out = self.model(b, training=False)
        steps = b["mel"].shape[1] // r
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        state = self.model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"],
                                        latents, steps)
        ends = tf.cast(tf.cumsum(out["durations"], axis=1), tf.int32)
        state = self.model.decode_steps(state._replace(token_ends=ends), steps, 1 - 1e-6)
        frames = tf.reshape(tf.transpose(state.frames, [1, 0, 2]), out["mel_before"].shape)
        for i, length in enumerate(b["mel_lengths"].numpy()):
            np.testing.assert_allclose(frames[i, :length], out["mel_before"][i, :length],
                                       atol=1e-4)

    def test_the_cached_decode_equals_full_recompute(self):
        decode_both_ways(self, self.model, self.batch)
        self.assertIsNone(self.model.decoder.prenet)

    def test_builds_with_the_voice_on_the_text(self):
        # speaker_text_conditioning: the decoder's condition_text runs before its first call
        model = tiny_model(tiny_config(text_alignment="durations", decoder_input="aligned_text",
                                       speaker_text_conditioning=True))
        out = model(self.batch, training=False)
        self.assertEqual(out["mel_before"].shape, self.batch["mel"].shape)


if __name__ == "__main__":
    unittest.main()
