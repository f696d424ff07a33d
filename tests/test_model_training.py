"""XTTSModel training behaviour: overfitting one batch, mixed precision, XLA, gradient
checkpointing, preset sizes and device placement (real forward/backward passes, tiny model)."""

import glob
import os
import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.training.losses import compute_losses  # noqa: E402
from tests.model_helpers import REPO, VOCAB, random_batch, tiny_config, tiny_model  # noqa: E402
from tests.trainer_probes import restored_global_state  # noqa: E402


def _train_step(model, optimizer, config, mode="graph"):
    """One optimizer step, run "eager", as a "graph" tf.function or "xla"-compiled."""
    r = config.model.reduction_factor

    def step(batch):
        with tf.GradientTape() as tape:
            outputs = model(batch, training=True)
            losses = compute_losses(outputs, batch, config.training, optimizer.iterations, r)
            scaled = (optimizer.scale_loss(losses["total"])
                      if hasattr(optimizer, "scale_loss") else losses["total"])
        grads = tape.gradient(scaled, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return losses, outputs

    return step if mode == "eager" else tf.function(step, jit_compile=(mode == "xla"))


def _aligned_batch(config):
    """Each token owns 4 consecutive frames of its own mel pattern: a learnable, diagonal
    text-to-mel mapping."""
    rng = np.random.default_rng(0)
    n, frames_per_token = config.data.n_mels, 4
    patterns = rng.normal(-2.0, 1.0, (VOCAB, n)).astype(np.float32)
    tokens = np.array([[3, 9, 14, 20, 7, 31, 25, 11], [5, 17, 28, 2, 36, 0, 0, 0]], np.int32)
    token_lengths = np.array([8, 5], np.int32)
    mel = np.full((2, 32, n), -5.0, np.float32)
    for b in range(2):
        for i in range(token_lengths[b]):
            mel[b, i * frames_per_token:(i + 1) * frames_per_token] = patterns[tokens[b, i]]
    return {"tokens": tf.constant(tokens), "token_lengths": tf.constant(token_lengths),
            "language_ids": tf.constant([0, 1], tf.int32), "mel": tf.constant(mel),
            "mel_lengths": tf.constant(token_lengths * frames_per_token),
            "ref_mel": tf.constant(mel[:, :12]), "ref_lengths": tf.constant([12, 12], tf.int32)}


def _diagonal_band_weight(alignments, batch, r, width=0.2):
    """Mean attention weight within |token/N - step/S| <= width over valid steps."""
    values = []
    for b in range(alignments.shape[0]):
        steps = -(-int(batch["mel_lengths"][b]) // r)
        tokens = int(batch["token_lengths"][b])
        s = np.arange(steps)[:, None] / steps
        n = np.arange(tokens)[None, :] / tokens
        band = np.abs(s - n) <= width
        values.append((alignments[b, :steps, :tokens].numpy() * band).sum(-1).mean())
    return float(np.mean(values))


class PolicyTestCase(unittest.TestCase):
    """Keras dtype policies and random seeds are global: every test restores those it found."""

    def setUp(self):
        self.enterContext(restored_global_state())


@pytest.mark.slow
class OverfitTest(PolicyTestCase):
    def test_overfits_one_batch_and_learns_the_diagonal(self):
        keras.utils.set_random_seed(0)
        config = tiny_config(dropout=0.0, prenet_dropout=0.1)
        config.training.guided_attention_decay_steps = 0
        model = tiny_model(config)
        batch = _aligned_batch(config)
        r = config.model.reduction_factor
        before = model(batch, training=False)
        initial = float(compute_losses(before, batch, config.training, 0, r)["total"])
        band_before = _diagonal_band_weight(before["alignments"], batch, r)
        step = _train_step(model, keras.optimizers.Adam(3e-3), config)
        for _ in range(200):
            step(batch)
        after = model(batch, training=False)
        final = float(compute_losses(after, batch, config.training, 0, r)["total"])
        band_after = _diagonal_band_weight(after["alignments"], batch, r)
        self.assertLessEqual(final, 0.4 * initial, f"total loss {initial:.3f} -> {final:.3f}")
        self.assertGreater(band_after, band_before + 0.1,
                           f"diagonal band weight {band_before:.3f} -> {band_after:.3f}")


class PrecisionAndXlaTest(PolicyTestCase):
    def _check_step(self, policy, mode, gradient_checkpointing=False):
        keras.mixed_precision.set_global_policy(policy)
        config = tiny_config(gradient_checkpointing=gradient_checkpointing)
        model = tiny_model(config)
        optimizer = keras.optimizers.Adam(1e-3)
        if policy == "mixed_float16":
            optimizer = keras.mixed_precision.LossScaleOptimizer(optimizer)
        step = _train_step(model, optimizer, config, mode)
        batch = random_batch(config)
        for _ in range(2):
            losses, outputs = step(batch)
        for key, value in losses.items():
            self.assertEqual(value.dtype, tf.float32, key)
            self.assertTrue(np.isfinite(value.numpy()), f"{key} = {value} under {policy}")
        for key, value in outputs.items():
            self.assertEqual(value.dtype, tf.float32, key)
        return model, batch

    def test_mixed_float16_step_and_decode(self):
        model, batch = self._check_step("mixed_float16", "eager")
        self.assertEqual(model.decoder.transformer.compute_dtype, "float16")
        latents = model.speaker_latents(batch["ref_mel"], batch["ref_lengths"])
        self.assertEqual(latents.dtype, tf.float32)
        out = model.generate(batch["tokens"], batch["token_lengths"], batch["language_ids"],
                             latents, max_steps=8)
        self.assertEqual(out["mel"].dtype, tf.float32)
        self.assertTrue(np.isfinite(out["mel"].numpy()).all())

    @pytest.mark.slow
    def test_mixed_float16_xla_step_with_gradient_checkpointing(self):
        self._check_step("mixed_float16", "xla", gradient_checkpointing=True)

    def test_mixed_bfloat16_step(self):
        self._check_step("mixed_bfloat16", "eager")


class GradientCheckpointingTest(unittest.TestCase):
    def test_recomputed_blocks_give_the_same_gradients(self):
        for overrides in ({}, {"voice_norms": True}):
            with self.subTest(**overrides):
                self._check_gradients(overrides)

    def _check_gradients(self, overrides):
        plain = tiny_model(dropout=0.0, prenet_dropout=0.0, **overrides)
        checkpointed = tiny_model(dropout=0.0, prenet_dropout=0.0, gradient_checkpointing=True,
                                  **overrides)
        checkpointed.set_weights(plain.get_weights())
        config = tiny_config(**overrides)
        batch = random_batch(config)

        def grads(model):
            with tf.GradientTape() as tape:
                losses = compute_losses(model(batch, training=True), batch, config.training, 0,
                                        config.model.reduction_factor)
            grads = tape.gradient(losses["total"], model.trainable_variables)
            return [tf.convert_to_tensor(g) for g in grads]   # embeddings: IndexedSlices

        for g1, g2, v in zip(grads(plain), grads(checkpointed), plain.trainable_variables):
            np.testing.assert_allclose(g2.numpy(), g1.numpy(), atol=1e-5, err_msg=v.path)


class CheckpointTest(unittest.TestCase):
    def test_tf_checkpoint_of_the_model_holds_every_weight(self):
        import tempfile
        model = tiny_model()
        path = tf.train.Checkpoint(model=model).save(os.path.join(tempfile.mkdtemp(), "ckpt"))
        saved = [name for name, _ in tf.train.list_variables(path) if name.startswith("model/")]
        self.assertEqual(len(saved), len(model.weights))
        restored = tiny_model()
        tf.train.Checkpoint(model=restored).restore(path).assert_existing_objects_matched()
        for a, b in zip(model.get_weights(), restored.get_weights()):
            np.testing.assert_array_equal(a, b)


@pytest.mark.slow
class PresetTest(unittest.TestCase):
    def test_every_preset_builds_and_reports_its_size(self):
        from myxtts.models.xtts import XTTSModel
        counts = {}
        for path in sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml"))):
            config = XTTSConfig.from_yaml(path)
            model = XTTSModel(config.model, 100, len(config.data.languages), config.data.n_mels)
            name = os.path.basename(path)[:-5]
            counts[name] = model.count_params()
            print(f"{name}: {counts[name]:,} parameters")
            del model
        self.assertLess(counts["tiny"], 200_000)
        self.assertLess(counts["tiny"], counts["small"])
        self.assertLess(counts["small"], counts["base"])
        self.assertLess(counts["base"], counts["large"])


class DevicePlacementTest(unittest.TestCase):
    def test_model_built_in_a_device_scope_lives_there(self):
        config = tiny_config()
        with tf.device(PLAN.model_device):
            model = tiny_model(config)
            batch = random_batch(config)
            out = model(batch, training=True)
            latents = model.speaker_latents(batch["ref_mel"], batch["ref_lengths"])
            gen = model.generate(batch["tokens"], batch["token_lengths"], batch["language_ids"],
                                 latents, max_steps=4)
        self.assertTrue(PLAN.model_device.endswith("CPU:1"), PLAN)
        variables = sorted({v.value.device for v in model.variables})
        outputs = sorted({t.device for t in [*out.values(), *gen.values()]})
        for device in variables + outputs:
            self.assertTrue(device.endswith("CPU:1"), (variables, outputs))


if __name__ == "__main__":
    unittest.main()
