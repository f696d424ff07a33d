"""myxtts.training.losses: masked by true lengths, float32 scalars under any input dtype."""

import unittest

import numpy as np
import tensorflow as tf

from myxtts.config import TrainingConfig
from myxtts.training.losses import (compute_losses, guided_attention_loss,
                                    guided_attention_weight)

R = 2


def _batch_and_outputs(dtype=tf.float32):
    rng = np.random.default_rng(0)
    mel = rng.normal(size=(2, 6, 3)).astype(np.float32)
    before = mel + 0.5                       # |error| = 0.5 at valid frames
    after = mel - 0.25                       # |error| = 0.25
    before[1, 4:] = after[1, 4:] = 99.0      # item 1 has 4 valid frames: padding is garbage
    stop = np.full((2, 6), -3.0, np.float32)
    stop[1, 4:] = 50.0
    align = np.zeros((2, 3, 4), np.float32)
    align[:, :, 0] = 1.0
    batch = {"mel": tf.constant(mel), "mel_lengths": tf.constant([6, 4]),
             "token_lengths": tf.constant([4, 2])}
    outputs = {"mel_before": tf.constant(before, dtype), "mel_after": tf.constant(after, dtype),
               "stop_logits": tf.constant(stop, dtype), "alignments": tf.constant(align, dtype),
               "text_attention": tf.constant(align[:, None], dtype)}
    return outputs, batch


class LossTest(unittest.TestCase):
    def test_mel_losses_ignore_padding(self):
        outputs, batch = _batch_and_outputs()
        for kind, mel, post in (("l1", 0.5, 0.25), ("l2", 0.25, 0.0625),
                                ("l1+l2", 0.75, 0.3125)):
            losses = compute_losses(outputs, batch, TrainingConfig(mel_loss=kind), 0, R)
            self.assertAlmostEqual(float(losses["mel"]), mel, places=5, msg=kind)
            self.assertAlmostEqual(float(losses["postnet"]), post, places=5, msg=kind)

    def test_stop_targets_are_the_last_valid_frame_and_the_padding_after_it(self):
        outputs, batch = _batch_and_outputs()
        losses = {w: float(compute_losses(outputs, batch, TrainingConfig(stop_pos_weight=w),
                                          0, R)["stop"]) for w in (1.0, 5.0)}
        softplus = lambda x: float(np.log1p(np.exp(x)))
        # 12 frames: each item's last valid frame is a positive with logit -3; item 1's two
        # padding frames are positives with logit 50 (nearly free); 8 negatives at -3.
        expected = lambda w: (8 * softplus(-3.0) + 2 * w * softplus(3.0)
                              + 2 * w * softplus(-50.0)) / 12
        self.assertAlmostEqual(losses[1.0], expected(1.0), places=5)
        self.assertAlmostEqual(losses[5.0], expected(5.0), places=5)

    def test_guided_attention_prefers_the_diagonal_and_ignores_padding(self):
        steps, text = 8, 8
        diagonal = np.eye(steps, text, dtype=np.float32)[None]
        anti = diagonal[:, ::-1].copy()
        lengths = (tf.constant([8]), tf.constant([8 * R]))
        loss = lambda a: float(guided_attention_loss(tf.constant(a), *lengths, R, 0.2))
        # Per decoder step, the share of attention weight off the diagonal (0..1).
        self.assertLess(loss(diagonal), 1e-6)
        self.assertGreater(loss(anti), 0.5)
        heads = np.concatenate([diagonal[:, None], anti[:, None]], axis=1)  # [1, 2, S, T]
        self.assertAlmostEqual(loss(heads), (loss(diagonal) + loss(anti)) / 2, places=5)
        # Item with 4 tokens and 4 steps: garbage in padded steps/tokens changes nothing.
        short = np.zeros((1, steps, text), np.float32)
        short[0, :4, :4] = np.eye(4)
        garbage = short.copy()
        garbage[0, 4:, :] = 1.0
        garbage[0, :, 4:] = 1.0
        args = (tf.constant([4]), tf.constant([4 * R]), R, 0.2)
        self.assertAlmostEqual(float(guided_attention_loss(tf.constant(short), *args)),
                               float(guided_attention_loss(tf.constant(garbage), *args)), 6)

    def test_guided_attention_weight_decays_linearly(self):
        config = TrainingConfig(guided_attention_weight=2.0, guided_attention_decay_steps=100)
        values = [float(guided_attention_weight(config, s)) for s in (0, 50, 100, 500)]
        np.testing.assert_allclose(values, [2.0, 1.0, 0.0, 0.0], atol=1e-6)
        constant = TrainingConfig(guided_attention_weight=2.0, guided_attention_decay_steps=0)
        self.assertEqual(float(guided_attention_weight(constant, 10 ** 6)), 2.0)

    def test_total_is_the_weighted_sum_and_everything_is_float32(self):
        outputs, batch = _batch_and_outputs(dtype=tf.float16)
        config = TrainingConfig(mel_loss_weight=2.0, postnet_loss_weight=3.0,
                                stop_loss_weight=0.5, guided_attention_decay_steps=10)
        losses = compute_losses(outputs, batch, config, tf.constant(5, tf.int64), R)
        for key, value in losses.items():
            self.assertEqual(value.dtype, tf.float32, key)
            self.assertEqual(value.shape, (), key)
        objective = 2.0 * losses["mel"] + 3.0 * losses["postnet"] + 0.5 * losses["stop"]
        self.assertAlmostEqual(float(losses["objective"]), float(objective), places=5)
        expected = objective + 0.5 * losses["guided_attention"]
        self.assertAlmostEqual(float(losses["total"]), float(expected), places=5)


if __name__ == "__main__":
    unittest.main()
