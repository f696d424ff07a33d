"""myxtts.models.layers: the one attention function and its mask convention (True = may attend).

The source project shipped additive masks with the wrong sign, so its decoder attended only to
padding; these tests pin the convention down at the lowest level.
"""

import unittest

import numpy as np
import tensorflow as tf

from myxtts.models.layers import (FORWARD_JUMP, MultiHeadAttention, TransformerBlock, attend,
                                  causal_mask, forward_initial_state, forward_step,
                                  forward_weights, key_padding_mask)


def _reference_attention(q, k, v, valid):
    """NumPy attention over the keys where valid is True (no masking tricks)."""
    logits = q @ np.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    logits = np.where(valid, logits, -np.inf)
    w = np.exp(logits - logits.max(-1, keepdims=True))
    w = w / w.sum(-1, keepdims=True)
    return w @ v, w


class AttendTest(unittest.TestCase):
    def setUp(self):
        rng = np.random.default_rng(0)
        self.q = rng.normal(size=(2, 3, 4, 8)).astype(np.float32)
        self.k = rng.normal(size=(2, 3, 6, 8)).astype(np.float32)
        self.v = rng.normal(size=(2, 3, 6, 8)).astype(np.float32)
        self.lengths = tf.constant([6, 2])

    def test_matches_reference_and_masked_keys_get_zero_weight(self):
        mask = key_padding_mask(self.lengths, 6)
        out, weights = attend(self.q, self.k, self.v, mask)
        valid = mask.numpy()
        ref_out, ref_w = _reference_attention(self.q, self.k, self.v, valid)
        np.testing.assert_allclose(out.numpy(), ref_out, atol=1e-5)
        np.testing.assert_allclose(weights.numpy(), ref_w, atol=1e-6)
        self.assertEqual(float(tf.reduce_max(weights[1, :, :, 2:])), 0.0)
        np.testing.assert_allclose(tf.reduce_sum(weights, -1).numpy(), 1.0, atol=1e-6)

    def test_mask_sign_true_means_attend(self):
        # Item 1 may attend to keys 0..1 only: its output must be a mix of v[0:2] and must not
        # move when the padded keys/values change; with an inverted mask it would be a mix of
        # the padding instead.
        mask = key_padding_mask(self.lengths, 6)
        out, weights = attend(self.q, self.k, self.v, mask)
        k2, v2 = self.k.copy(), self.v.copy()
        k2[1, :, 2:] = 50.0
        v2[1, :, 2:] = -100.0
        out2, _ = attend(self.q, k2, v2, mask)
        np.testing.assert_allclose(out2[1].numpy(), out[1].numpy(), atol=1e-6)
        self.assertGreater(float(tf.reduce_sum(weights[1, :, :, :2])), 0.999 * 3 * 4)

    def test_causal_mask_is_lower_triangular(self):
        mask = causal_mask(4).numpy()[0, 0]
        np.testing.assert_array_equal(mask, np.tril(np.ones((4, 4), bool)))

    def test_fully_masked_row_is_finite(self):
        _, weights = attend(self.q, self.k, self.v, tf.zeros([1, 1, 1, 6], tf.bool))
        self.assertTrue(np.isfinite(weights.numpy()).all())

    def test_half_precision_softmax_is_float32_and_finite(self):
        # |q.k| ~ 3e5 would overflow float16 without the pre-scaling of q.
        q = tf.fill([1, 1, 2, 64], tf.constant(70.0, tf.float16))
        k = tf.fill([1, 1, 3, 64], tf.constant(70.0, tf.float16))
        v = tf.ones([1, 1, 3, 64], tf.float16)
        out, weights = attend(q, k, v, None)
        self.assertEqual(weights.dtype, tf.float32)
        self.assertEqual(out.dtype, tf.float16)
        self.assertTrue(np.isfinite(weights.numpy()).all())
        np.testing.assert_allclose(out.numpy(), 1.0, atol=1e-3)


class LayerPaddingTest(unittest.TestCase):
    def test_cross_attention_ignores_memory_padding(self):
        rng = np.random.default_rng(1)
        layer = MultiHeadAttention(16, 2)
        x = rng.normal(size=(2, 5, 16)).astype(np.float32)
        memory = rng.normal(size=(2, 4, 16)).astype(np.float32)
        lengths = tf.constant([4, 3])
        out, _ = layer(x, memory, key_padding_mask(lengths, 4))
        padded = np.concatenate([memory, rng.normal(5.0, 3.0, (2, 6, 16))], 1).astype(np.float32)
        padded[1, 3:] = rng.normal(5.0, 3.0, (7, 16))
        out2, w2 = layer(x, padded, key_padding_mask(lengths, 10))
        np.testing.assert_allclose(out2.numpy(), out.numpy(), atol=1e-5)
        self.assertEqual(float(tf.reduce_max(w2[1, :, :, 3:])), 0.0)

    def test_block_with_causal_mask_does_not_look_ahead(self):
        rng = np.random.default_rng(2)
        block = TransformerBlock(16, 2, 32, dropout=0.0)
        x = rng.normal(size=(1, 6, 16)).astype(np.float32)
        y, _ = block(x, causal_mask(6))
        x2 = x.copy()
        x2[:, 3:] += 10.0
        y2, _ = block(x2, causal_mask(6))
        np.testing.assert_allclose(y2[:, :3].numpy(), y[:, :3].numpy(), atol=1e-5)
        self.assertGreater(float(tf.reduce_max(tf.abs(y2[:, 3:] - y[:, 3:]))), 1e-2)


class ForwardAttentionTest(unittest.TestCase):
    def test_reading_moves_forward_at_most_jump_tokens_per_step(self):
        rng = np.random.default_rng(0)
        logits = rng.normal(0.0, 3.0, (2, 3, 12, 20)).astype(np.float32)
        weights = forward_weights(tf.constant(logits)).numpy()
        np.testing.assert_allclose(weights.sum(-1), 1.0, atol=1e-5)
        for s in range(12):
            # step s can reach token (s + 1) * FORWARD_JUMP at most, never further
            self.assertEqual(float(weights[:, :, s, (s + 1) * FORWARD_JUMP + 1:].sum()), 0.0)
        # where the mass starts each step is never before where it started the step before
        first = (weights > 0).argmax(-1)
        self.assertTrue(np.all(np.diff(first, axis=-1) >= 0))

    def test_masked_keys_get_no_weight_and_steps_equal_the_scan(self):
        rng = np.random.default_rng(1)
        logits = rng.normal(0.0, 1.0, (1, 2, 6, 8)).astype(np.float32)
        logits[..., 5:] = -1e9  # padding keys
        weights = forward_weights(tf.constant(logits)).numpy()
        self.assertEqual(float(weights[..., 5:].max()), 0.0)
        state = forward_initial_state(1, 2, 8)
        for s in range(6):
            state = forward_step(state, tf.constant(logits[:, :, s]))
            np.testing.assert_allclose(np.exp(state.numpy()), weights[:, :, s], atol=1e-6)

    def test_gradients_stay_finite_when_content_weights_underflow(self):
        logits = np.zeros((1, 1, 10, 12), np.float32)
        logits[..., -1] = 200.0  # all content weight on the last token, unreachable early on
        x = tf.Variable(logits)
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(forward_weights(x) * tf.range(12, dtype=tf.float32))
        grad = tape.gradient(loss, x).numpy()
        self.assertTrue(np.all(np.isfinite(grad)))


if __name__ == "__main__":
    unittest.main()
