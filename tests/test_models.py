"""XTTSModel on the tiny preset: padding invariance, causality, masks, voice cloning, decoding."""

import unittest

import numpy as np
import tensorflow as tf

from myxtts.models.layers import key_padding_mask
from tests.model_helpers import pad_batch, random_batch, tiny_config, tiny_model

ATOL = 1e-5


def _max_diff(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))))


class ModelTestCase(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tf.random.set_seed(0)
        cls.config = tiny_config()
        cls.r = cls.config.model.reduction_factor
        cls.model = tiny_model(cls.config)
        cls.batch = random_batch(cls.config)


class PaddingInvarianceTest(ModelTestCase):
    def test_text_encoder(self):
        b = self.batch
        padded = pad_batch(b, extra_text=5, extra_steps=0, extra_ref=0, r=self.r)
        encode = self.model.text_encoder
        out = encode(b["tokens"], b["token_lengths"], b["language_ids"])
        out2 = encode(padded["tokens"], b["token_lengths"], b["language_ids"])
        for i, n in enumerate(b["token_lengths"].numpy()):
            self.assertLessEqual(_max_diff(out2[i, :n], out[i, :n]), ATOL)

    def test_speaker_encoder(self):
        b = self.batch
        padded = pad_batch(b, extra_text=0, extra_steps=0, extra_ref=9, r=self.r)
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        latents2 = self.model.speaker_latents(padded["ref_mel"], b["ref_lengths"])
        self.assertLessEqual(_max_diff(latents2, latents), ATOL)

    def test_decoder_outputs_at_valid_positions(self):
        b = self.batch
        out = self.model(b, training=False)
        padded = pad_batch(b, extra_text=5, extra_steps=4, extra_ref=9, r=self.r)
        out2 = self.model(padded, training=False)
        for i in range(2):
            frames = int(b["mel_lengths"][i])
            steps = -(-frames // self.r)
            tokens = int(b["token_lengths"][i])
            for key in ("mel_before", "mel_after", "stop_logits"):
                self.assertLessEqual(_max_diff(out2[key][i, :frames], out[key][i, :frames]),
                                     ATOL, key)
            self.assertLessEqual(_max_diff(out2["alignments"][i, :steps, :tokens],
                                           out["alignments"][i, :steps, :tokens]), ATOL)


class MaskSignRegressionTest(ModelTestCase):
    """The decoder must read the text, never the padding (the source project's bug)."""

    def test_alignments_put_all_weight_on_valid_tokens(self):
        b = pad_batch(self.batch, extra_text=6, extra_steps=0, extra_ref=0, r=self.r)
        align = self.model(b, training=False)["alignments"].numpy()
        for i, n in enumerate(b["token_lengths"].numpy()):
            self.assertEqual(float(np.max(align[i, :, n:])), 0.0)
            np.testing.assert_allclose(align[i, :, :n].sum(-1), 1.0, atol=1e-5)

    def test_valid_tokens_change_the_output_padding_tokens_do_not(self):
        b = self.batch
        out = self.model(b, training=False)["mel_before"]
        tokens = b["tokens"].numpy()
        garbage = dict(b, tokens=tf.constant(np.where(
            np.arange(tokens.shape[1])[None] >= b["token_lengths"].numpy()[:, None],
            (tokens + 7) % 39 + 1, tokens)))
        self.assertLessEqual(_max_diff(self.model(garbage, training=False)["mel_before"], out),
                             ATOL)
        changed = tokens.copy()
        changed[:, 0] = changed[:, 0] % 39 + 1
        moved = self.model(dict(b, tokens=tf.constant(changed)), training=False)["mel_before"]
        self.assertGreater(_max_diff(moved, out), 1e-4)

    def test_attention_masks_are_boolean_true_attends(self):
        mask = key_padding_mask(tf.constant([2]), 4).numpy().ravel()
        np.testing.assert_array_equal(mask, [True, True, False, False])


class CausalityTest(ModelTestCase):
    def test_future_frames_do_not_change_past_outputs(self):
        b = dict(self.batch, mel_lengths=tf.constant([20, 20]))
        out = self.model(b, training=False)
        for t in (3, 8, 13):   # inside a step, at a step boundary, late
            mel = b["mel"].numpy().copy()
            mel[:, t + 1:] += np.random.default_rng(t).normal(0, 3, mel[:, t + 1:].shape)
            out2 = self.model(dict(b, mel=tf.constant(mel)), training=False)
            for key in ("mel_before", "stop_logits"):
                self.assertLessEqual(_max_diff(out2[key][:, :t + 1], out[key][:, :t + 1]),
                                     ATOL, f"{key} at t={t}")
            self.assertLessEqual(_max_diff(out2["alignments"][:, :(t + 1) // self.r],
                                           out["alignments"][:, :(t + 1) // self.r]), ATOL)
            # ...while later outputs do depend on them (the test is not vacuous).
            self.assertGreater(_max_diff(out2["mel_before"][:, t + 1 + self.r:],
                                         out["mel_before"][:, t + 1 + self.r:]), 1e-4)


class VoiceCloningTest(ModelTestCase):
    def test_speaker_reference_changes_the_mel(self):
        b = self.batch
        other = random_batch(self.config, seed=5)
        lat_a = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        lat_b = self.model.speaker_latents(other["ref_mel"], other["ref_lengths"])
        args = (b["tokens"], b["token_lengths"], b["language_ids"])
        mel_a = self.model.generate(*args, lat_a, max_steps=12, stop_threshold=0.9999)["mel"]
        mel_a2 = self.model.generate(*args, lat_a, max_steps=12, stop_threshold=0.9999)["mel"]
        mel_b = self.model.generate(*args, lat_b, max_steps=12, stop_threshold=0.9999)["mel"]
        self.assertEqual(_max_diff(mel_a, mel_a2), 0.0)
        self.assertGreater(float(np.mean(np.abs(mel_a - mel_b))), 1e-3)
        forced_b = self.model(dict(b, ref_mel=other["ref_mel"], ref_lengths=other["ref_lengths"]),
                              training=False)["mel_after"]
        forced_a = self.model(b, training=False)["mel_after"]
        self.assertGreater(float(np.mean(np.abs(forced_a - forced_b))), 1e-3)


class SpeakerTextConditioningTest(unittest.TestCase):
    """model.speaker_text_conditioning: the mean speaker latent, projected, on every text token."""

    def test_the_voice_reaches_the_text_memory_and_the_cache_still_equals_recompute(self):
        tf.random.set_seed(0)
        config = tiny_config(speaker_text_conditioning=True)
        model = tiny_model(config)
        self.assertEqual(model.decoder.speaker_projection.kernel.shape,
                         (config.model.d_model, config.model.d_model))
        b = random_batch(config, token_lengths=(7, 5))
        latents = model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        text = model.text_encoder(b["tokens"], b["token_lengths"], b["language_ids"])
        conditioned = model.decoder.condition_text(text, latents)
        # One vector per item, the same on every token: the difference is constant along T.
        shift = (conditioned - text).numpy()
        self.assertLessEqual(float(np.max(np.abs(shift - shift[:, :1]))), 1e-5)
        self.assertGreater(float(np.max(np.abs(shift[0, 0] - shift[1, 0]))), 1e-4)
        args = (b["tokens"], b["token_lengths"], b["language_ids"], latents)
        cached = model.generate(*args, max_steps=24, stop_threshold=0.99999)
        full = model.generate(*args, max_steps=24, stop_threshold=0.99999, use_cache=False)
        np.testing.assert_array_equal(cached["mel_lengths"].numpy(), full["mel_lengths"].numpy())
        self.assertLessEqual(_max_diff(cached["mel"], full["mel"]), 1e-4)
        # Off (the default), the text memory is the encoded text itself.
        self.assertIsNone(tiny_model().decoder.speaker_projection)


class VoiceNormsTest(unittest.TestCase):
    """model.voice_norms: every decoder norm scaled and shifted per item by the voice."""

    def test_the_voice_sets_every_norm_and_the_cache_still_equals_recompute(self):
        tf.random.set_seed(0)
        config = tiny_config(voice_norms=True)
        model = tiny_model(config)
        b = random_batch(config, token_lengths=(7, 5))
        latents = model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        transformer, d = model.decoder.transformer, config.model.d_model
        # Plain layer norm at the start: the voice's scale and shift are zero.
        self.assertEqual(float(np.abs(model.decoder.norm_modulation(latents)).max()), 0.0)
        model.decoder.voice_norms.kernel.assign(
            tf.random.normal(model.decoder.voice_norms.kernel.shape, stddev=0.3, seed=1))
        norms = model.decoder.norm_modulation(latents).numpy()
        self.assertEqual(norms.shape, (2, transformer.norm_count, 2, d))
        self.assertGreater(float(np.abs(norms[0] - norms[1]).max()), 1e-3)
        args = (b["tokens"], b["token_lengths"], b["language_ids"], latents)
        state = model.start_decode(*args, 4)
        np.testing.assert_allclose(state.norms[0].numpy(), norms, atol=1e-6)
        self.assertIn("norms_0", state.to_tensors())
        cached = model.generate(*args, max_steps=16, stop_threshold=0.99999)
        full = model.generate(*args, max_steps=16, stop_threshold=0.99999, use_cache=False)
        self.assertLessEqual(_max_diff(cached["mel"], full["mel"]), 1e-4)
        # The norms carry the voice: the same latents with the projection zeroed decode
        # otherwise.
        model.decoder.voice_norms.kernel.assign(tf.zeros_like(model.decoder.voice_norms.kernel))
        plain = model.generate(*args, max_steps=16, stop_threshold=0.99999)
        self.assertGreater(_max_diff(cached["mel"], plain["mel"]), 1e-3)
        # Off (the default): no projection, and the state carries no tensor for it.
        off = tiny_model()
        self.assertIsNone(off.decoder.voice_norms)
        off_state = off.start_decode(*args[:3], off.speaker_latents(b["ref_mel"],
                                                                    b["ref_lengths"]), 4)
        self.assertEqual(off_state.norms, ())
        self.assertFalse(any(k.startswith("norms") for k in off_state.to_tensors()))


class ReferenceSpectrumTest(unittest.TestCase):
    """model.reference_spectrum: the decoder reads and writes frames relative to the mean
    spectrum of the reference's speech frames, which travels as one more latent row."""

    @classmethod
    def setUpClass(cls):
        tf.random.set_seed(0)
        cls.config = tiny_config(reference_spectrum=True, decode_attention_window=0, d_model=48)
        cls.model = tiny_model(cls.config)
        cls.n, cls.r = cls.config.data.n_mels, cls.config.model.reduction_factor

    def test_the_spectrum_is_the_mean_of_the_speech_frames_only(self):
        from myxtts.models.encoders import reference_spectrum
        rng = np.random.default_rng(0)
        speech = rng.normal(-1.0, 0.3, (2, 6, self.n)).astype(np.float32)
        pause = np.full((2, 3, self.n), -5.0, np.float32)   # 40 dB under the speech
        padding = rng.normal(3.0, 1.0, (2, 4, self.n)).astype(np.float32)  # louder, not valid
        mel = np.concatenate([speech[:, :4], pause, speech[:, 4:], padding], axis=1)
        got = reference_spectrum(tf.constant(mel), tf.constant([7, 9])).numpy()
        np.testing.assert_allclose(got[0], speech[0, :4].mean(0), atol=1e-5)
        np.testing.assert_allclose(got[1], speech[1].mean(0), atol=1e-5)
        np.testing.assert_array_equal(reference_spectrum(tf.constant(mel), tf.constant([0, 0])),
                                      np.zeros((2, self.n), np.float32))

    def test_the_spectrum_travels_as_the_last_latent_row(self):
        from myxtts.models.encoders import reference_spectrum
        b = random_batch(self.config)
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"]).numpy()
        m = self.config.model
        self.assertEqual(m.speaker_latent_rows, m.num_speaker_latents + 1)
        self.assertEqual(latents.shape, (2, m.speaker_latent_rows, m.d_model))
        np.testing.assert_allclose(latents[:, -1, :self.n],
                                   reference_spectrum(b["ref_mel"], b["ref_lengths"]), atol=1e-6)
        self.assertEqual(float(np.abs(latents[:, -1, self.n:]).max(initial=0.0)), 0.0)
        self.assertEqual(tiny_config().model.speaker_latent_rows,
                         tiny_config().model.num_speaker_latents)

    def _decode(self, latents, steps=8):
        b = random_batch(self.config, token_lengths=(7, 5))
        state = self.model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"],
                                        latents, steps)
        return self.model.decode_steps(state, steps, 0.99999)

    def test_a_louder_spectrum_shifts_every_decoded_frame_by_as_much(self):
        b = random_batch(self.config)
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"]).numpy()
        shift = np.linspace(-0.5, 0.7, self.n).astype(np.float32)
        moved = latents.copy()
        moved[:, -1, :self.n] += shift
        base, shifted = self._decode(tf.constant(latents)), self._decode(tf.constant(moved))
        np.testing.assert_array_equal(base.lengths.numpy(), shifted.lengths.numpy())
        difference = (shifted.frames - base.frames).numpy().reshape(8, 2, self.r, self.n)
        np.testing.assert_allclose(difference, np.broadcast_to(shift, difference.shape),
                                   atol=1e-4)

    def test_teacher_forcing_on_the_decoded_frames_gives_them_back(self):
        """Training and decoding agree on the convention: the teacher-forced pass fed the
        decoded frames (absolute log mels) predicts those frames."""
        b = random_batch(self.config, token_lengths=(7, 5))
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        state = self._decode(latents)
        decoded = tf.reshape(tf.transpose(state.frames, [1, 0, 2]), [2, 8 * self.r, self.n])
        forced = self.model(dict(b, mel=decoded, mel_lengths=tf.constant([8 * self.r] * 2)),
                            training=False)["mel_before"]
        self.assertLessEqual(_max_diff(forced, decoded), 1e-4)
        args = (b["tokens"], b["token_lengths"], b["language_ids"], latents)
        cached = self.model.generate(*args, max_steps=16, stop_threshold=0.99999)
        full = self.model.generate(*args, max_steps=16, stop_threshold=0.99999, use_cache=False)
        self.assertLessEqual(_max_diff(cached["mel"], full["mel"]), 1e-4)


def _assert_decodes_agree(test, model, b, latents) -> None:
    """The cached decode, the full recompute and the decode driven 3 steps a call give the
    same mel."""
    args = (b["tokens"], b["token_lengths"], b["language_ids"], latents)
    cached = model.generate(*args, max_steps=16, stop_threshold=0.99999)
    full = model.generate(*args, max_steps=16, stop_threshold=0.99999, use_cache=False)
    test.assertLessEqual(_max_diff(cached["mel"], full["mel"]), 1e-4)
    state = model.start_decode(*args, max_steps=16)
    while not bool(tf.reduce_all(state.done)):
        state = model.decode_steps(state, 3, 0.99999)
    test.assertLessEqual(_max_diff(model.decoded(state)["mel"], cached["mel"]), 1e-5)


def _added_rows(test, count: int):
    """Checks that `test.latents` are the plain model's latents and `count` rows more, zeros
    past their first n_mels values; returns those rows' first n_mels values [B, count, n] and
    each reference's speech frames (within SPEECH_FRAME_RANGE of its loudest)."""
    from myxtts.models.encoders import SPEECH_FRAME_RANGE
    m = test.config.model
    latents = test.latents.numpy()
    test.assertEqual(latents.shape, (2, m.num_speaker_latents + 1 + count, m.d_model))
    np.testing.assert_allclose(latents[:, :-count],
                               test.plain.speaker_latents(test.batch["ref_mel"],
                                                          test.batch["ref_lengths"]), atol=1e-6)
    test.assertEqual(float(np.abs(latents[:, -count:, test.n:]).max(initial=0.0)), 0.0)
    speech = []
    for i, length in enumerate(test.batch["ref_lengths"].numpy()):
        mel = test.batch["ref_mel"].numpy()[i, :length]
        level = mel.mean(-1)
        speech.append(mel[level >= level.max() - SPEECH_FRAME_RANGE])
    return latents[:, -count:, :test.n], speech


def _reference_row_model(cls, **setting) -> None:
    """A test class's tiny reference_spectrum model with one more reference-row `setting`, its
    batch of two items and their speaker latents (cls.config, model, n, r, batch, latents),
    and the model without the setting, with the same weights (cls.plain_config, plain)."""
    tf.random.set_seed(0)
    cls.config = tiny_config(reference_spectrum=True, decode_attention_window=0, d_model=48,
                             **setting)
    cls.model = tiny_model(cls.config)
    cls.plain_config = tiny_config(reference_spectrum=True, decode_attention_window=0,
                                   d_model=48)
    cls.plain = tiny_model(cls.plain_config)
    cls.plain.set_weights(cls.model.get_weights())  # the same weights: none are added
    cls.n, cls.r = cls.config.data.n_mels, cls.config.model.reduction_factor
    cls.batch = random_batch(cls.config, token_lengths=(7, 5))
    cls.latents = cls.model.speaker_latents(cls.batch["ref_mel"], cls.batch["ref_lengths"])


class ReferenceStatisticsTest(unittest.TestCase):
    """model.reference_statistics: the reference's spread per mel band travels as one more
    latent row, and every decoded frame is mapped to the reference's mean and spread over the
    speech frames written so far; nothing trained changes."""

    @classmethod
    def setUpClass(cls):
        _reference_row_model(cls, reference_statistics=True)

    def test_the_spread_travels_after_the_spectrum(self):
        rows, speech = _added_rows(self, 1)
        for i, frames in enumerate(speech):
            np.testing.assert_allclose(rows[i, 0], frames.std(0), atol=1e-5)

    def test_frames_are_mapped_to_the_references_mean_and_spread(self):
        """Frames that stray 0.2 around their own mean, for a reference whose spectrum is
        elsewhere and whose frames stray 0.3: mapped step by step, the speech frames take the
        reference's mean and spread; quiet frames and ended items are not counted."""
        from myxtts.models import xtts
        rng = np.random.default_rng(0)
        steps, n, r = 400, self.n, self.r
        own = np.linspace(-1.2, -0.6, n).astype(np.float32)
        spectrum = np.linspace(-2.0, -1.0, n).astype(np.float32)[None].repeat(2, 0)
        spread = np.full((2, n), 0.3, np.float32)
        frames = rng.normal(own, 0.2, (steps, 2, r, n)).astype(np.float32)
        quiet = rng.random((steps, 2, r)) < 0.2
        frames[quiet] = -6.0
        offset = tf.constant(np.tile(spectrum, [1, r]))
        statistics = xtts._start_statistics(tf.constant(spread))
        done = tf.constant([False, False])
        mapped = []
        for step in range(steps):
            if step == steps // 2:
                done = tf.constant([False, True])  # the second item ends half way
            out, statistics = xtts._mapped(tf.constant(frames[step].reshape(2, r * n)), offset,
                                           statistics, done, r)
            mapped.append(out.numpy().reshape(2, r, n))
        mapped = np.stack(mapped)
        speech = ~quiet
        np.testing.assert_allclose(statistics[1].numpy()[:, 0],
                                   [speech[:, 0].sum(), speech[: steps // 2, 1].sum()])
        # the last quarter, where the prior's pull is under 2 %
        late = mapped[3 * steps // 4:, 0][speech[3 * steps // 4:, 0]]  # [frames, n]
        self.assertLess(np.abs(late.mean(0) - spectrum[0]).mean(), 0.04)
        self.assertLess(np.abs(late.std(0) / spread[0] - 1.0).mean(), 0.1)
        # the plain frames are 0.4-0.8 away from the spectrum, and stray 0.2
        self.assertGreater(np.abs(frames[3 * steps // 4:, 0][speech[3 * steps // 4:, 0]]
                                  .mean(0) - spectrum[0]).mean(), 0.4)
        self.assertTrue(np.all(mapped[quiet] < spectrum.min() - 2.5))  # pauses stay quiet

    def test_decoded_frames_stray_as_the_references_do(self):
        b = self.batch
        steps = 24
        errors = {}
        for name, model, latents in (("plain", self.plain, self.latents[:, :-1]),
                                     ("mapped", self.model, self.latents)):
            state = model.decode_steps(
                model.start_decode(b["tokens"], b["token_lengths"], b["language_ids"], latents,
                                   steps), steps, 0.99999)
            frames = tf.transpose(state.frames, [1, 0, 2]).numpy().reshape(2, -1, self.n)
            spread = self.latents.numpy()[:, -1, :self.n]
            errors[name] = np.mean([np.abs(np.log(frames[i, :length].std(0) / spread[i])).mean()
                                    for i, length in enumerate(state.lengths.numpy())])
        self.assertLess(errors["mapped"], 0.8 * errors["plain"])

    def test_the_cache_the_recompute_and_a_chunked_decode_agree(self):
        _assert_decodes_agree(self, self.model, self.batch, self.latents)


class ReferenceMatchingTest(unittest.TestCase):
    """model.reference_matching: the reference's speech frames travel as latent rows, and every
    decoded speech frame moves that share of the way toward its nearest ones; nothing trained
    changes."""

    @classmethod
    def setUpClass(cls):
        _reference_row_model(cls, reference_matching=0.5)

    def test_the_speech_frames_travel_after_the_spectrum(self):
        from myxtts.config import REFERENCE_MATCHING_FRAMES
        from myxtts.models.encoders import REFERENCE_FRAME_PAD
        rows, speech = _added_rows(self, REFERENCE_MATCHING_FRAMES)
        for i, frames in enumerate(speech):
            np.testing.assert_allclose(rows[i, :len(frames)], frames, atol=1e-6)
            self.assertTrue(np.all(rows[i, len(frames):] == REFERENCE_FRAME_PAD))

    def test_a_speech_frame_moves_toward_the_mean_of_its_nearest_reference_frames(self):
        from myxtts.config import REFERENCE_MATCHING_FRAMES as F
        from myxtts.models import xtts
        from myxtts.models.encoders import REFERENCE_FRAME_PAD
        rng = np.random.default_rng(0)
        n, t = self.n, 5
        reference = np.full((3, F, n), REFERENCE_FRAME_PAD, np.float32)
        reference[:2, :40] = rng.normal(-1.5, 0.5, (2, 40, n))
        reference[2, :3] = rng.normal(-1.5, 0.5, (3, n))  # fewer frames than neighbours
        mel = rng.normal(-1.5, 0.5, (3, t, n)).astype(np.float32)
        mel[0, 0] = -6.0  # a pause
        spectrum = np.full((3, n), -1.5, np.float32)
        valid = np.ones((3, t), bool)
        valid[1, -1] = False  # past the item's length
        for share in (0.5, 1.0):
            out = xtts._matched(tf.constant(mel), tf.constant(spectrum), tf.constant(reference),
                                share, tf.constant(valid)).numpy()
            for i in range(2):
                for j in range(t):
                    if (i, j) in ((0, 0), (1, t - 1)):
                        np.testing.assert_array_equal(out[i, j], mel[i, j])
                        continue
                    distances = ((reference[i, :40] - mel[i, j]) ** 2).sum(-1)
                    target = reference[i, np.argsort(distances)[:4]].mean(0)
                    np.testing.assert_allclose(out[i, j], mel[i, j]
                                               + share * (target - mel[i, j]), atol=1e-4)
            np.testing.assert_array_equal(out[2], mel[2])

    def test_the_postnets_output_is_matched_and_the_decode_is_the_plain_ones(self):
        """The matching acts on the postnet's output only: the decoded frames are the plain
        model's, and the mel is the plain mel matched, its speech frames nearer the
        reference's frames."""
        from myxtts.config import REFERENCE_MATCHING_FRAMES as F
        from myxtts.models.layers import length_mask
        b = self.batch
        text = (b["tokens"], b["token_lengths"], b["language_ids"])
        matched = self.model.generate(*text, self.latents, max_steps=40, stop_threshold=0.99999)
        plain = self.plain.generate(*text, self.latents[:, :-F], max_steps=40,
                                    stop_threshold=0.99999)
        lengths = matched["mel_lengths"]
        np.testing.assert_array_equal(lengths, plain["mel_lengths"])
        expected = self.model.reference_matched(
            plain["mel"], self.latents, length_mask(lengths, tf.shape(plain["mel"])[1]))
        np.testing.assert_allclose(matched["mel"], expected, atol=1e-5)
        nearest = {}
        for name, mel in (("plain", plain["mel"]), ("matched", matched["mel"])):
            distances = []
            for i, length in enumerate(lengths.numpy()):
                reference = self.latents.numpy()[i, -F:, :self.n]
                reference = reference[reference.mean(-1) > -50]
                d = ((mel.numpy()[i, :length, None] - reference[None]) ** 2).sum(-1)
                distances.append(np.sqrt(d.min(-1)).mean())
            nearest[name] = np.mean(distances)
        self.assertLess(nearest["matched"], 0.8 * nearest["plain"])
        self.assertLess(int(lengths[1]), matched["mel"].shape[1])
        for i, length in enumerate(lengths.numpy()):  # past an item's length: zeros
            self.assertEqual(float(np.abs(matched["mel"][i, length:]).max(initial=0.0)), 0.0)

    def test_the_streamed_decode_matches_its_windows_as_the_whole_decode(self):
        """The streaming driver's postnet windows (ModelDecoder) give the whole decode's mel."""
        from myxtts.inference.model_decoder import ModelDecoder
        from myxtts.inference.streaming import postnet_chunks
        b = self.batch
        length = int(b["token_lengths"][0])
        threshold = self.model.stop_threshold
        self.model.stop_threshold = 0.99999  # the untrained stop head would stop at once
        try:
            whole = self.model.generate(b["tokens"][:1], b["token_lengths"][:1],
                                        b["language_ids"][:1], self.latents[:1], max_steps=40)
            decoder = ModelDecoder(self.model, 40, token_padding=1, jit_compile=False)
            chunks = [mel for mel, _, _, _ in postnet_chunks(
                decoder, b["tokens"][0, :length].numpy().tolist(), int(b["language_ids"][0]),
                self.latents[:1], first_chunk_steps=2, chunk_steps=4) if mel is not None]
        finally:
            self.model.stop_threshold = threshold
        self.assertGreater(len(chunks), 2)
        streamed = np.concatenate(chunks)
        frames = int(whole["mel_lengths"][0])
        self.assertEqual(len(streamed), frames)
        np.testing.assert_allclose(streamed, whole["mel"][0, :frames], atol=1e-4)

    def test_the_cache_the_recompute_and_a_chunked_decode_agree(self):
        _assert_decodes_agree(self, self.model, self.batch, self.latents)

    def test_a_voice_with_the_frame_rows_is_another_models_voice(self):
        """Voice files hold the frame rows: a model decoding without them refuses such a voice
        (and the reverse), by the conditioning fingerprint, though no weight differs."""
        from myxtts.inference.voices import conditioning_fingerprint
        self.assertNotEqual(conditioning_fingerprint(self.model, self.config),
                            conditioning_fingerprint(self.plain, self.plain_config))

    def test_several_references_pool_their_frames(self):
        from myxtts.config import REFERENCE_MATCHING_FRAMES as F
        from myxtts.models.encoders import REFERENCE_FRAME_PAD
        latents = self.latents.numpy()
        pooled = self.model.pooled_latents(latents).numpy()
        np.testing.assert_allclose(pooled[0, :-F], latents[:, :-F].mean(0), atol=1e-6)
        own = [rows[rows[:, 0] != REFERENCE_FRAME_PAD] for rows in latents[:, -F:]]
        real = pooled[0, -F:][pooled[0, -F:, 0] != REFERENCE_FRAME_PAD]
        np.testing.assert_array_equal(real, np.concatenate(own))
        # more frames than rows: evenly thinned to F of them
        many = np.repeat(latents[:1], 3, axis=0)
        many[:, -F:] = np.random.default_rng(0).normal(-2.0, 0.3, (3, F, many.shape[-1]))
        thinned = self.model.pooled_latents(many).numpy()[0, -F:]
        np.testing.assert_array_equal(thinned, many[:, -F:].reshape(3 * F, -1)[::3])


class SelfFeedingTest(unittest.TestCase):
    """model.self_feeding: in training, step inputs become the model's own one-step-ahead
    predictions (from a first pass without gradient)."""

    @classmethod
    def setUpClass(cls):
        # No dropout anywhere: the first pass and the training pass are then the same function.
        cls.config = tiny_config(dropout=0.0, prenet_dropout=0.0)
        cls.decoder = tiny_model(cls.config).decoder
        batch = random_batch(cls.config)
        model = tiny_model(cls.config)
        cls.latents = model.speaker_latents(batch["ref_mel"], batch["ref_lengths"])
        cls.text = model.text_encoder(batch["tokens"], batch["token_lengths"],
                                      batch["language_ids"])
        cls.mask = key_padding_mask(batch["token_lengths"], tf.shape(batch["tokens"])[1])
        r, n = cls.decoder.r, cls.decoder.n_mels
        cls.inputs = tf.random.uniform([2, 12, r * n], 0.5, 1.0, seed=2)

    def _decode(self, inputs, training, rate=None):
        decoder = self.decoder
        decoder.self_feeding = self.config.model.self_feeding if rate is None else rate
        try:
            return decoder(inputs, self.latents, self.text, self.mask,
                           seed=tf.constant([5, 6], tf.int32), training=training)
        finally:
            decoder.self_feeding = self.config.model.self_feeding

    def test_every_step_fed_its_own_prediction_of_the_step_before(self):
        recorded, _, _ = self._decode(self.inputs, training=False)
        own = tf.pad(recorded, [[0, 0], [1, 0], [0, 0]])[:, :-1]  # step 0: the go-frame
        expected, _, _ = self._decode(own, training=False)
        fed, _, _ = self._decode(self.inputs, training=True, rate=1.0)
        self.assertLessEqual(_max_diff(fed, expected), ATOL)
        self.assertGreater(_max_diff(fed, recorded), 1e-3)
        # No gradient reaches the recorded frames through the first pass.
        with tf.GradientTape(persistent=True) as tape:
            tape.watch(self.inputs)
            fed, _, _ = self._decode(self.inputs, training=True, rate=1.0)
            plain, _, _ = self._decode(self.inputs, training=True, rate=0.0)
        self.assertEqual(float(tf.reduce_max(tf.abs(tape.gradient(fed, self.inputs)))), 0.0)
        self.assertGreater(float(tf.reduce_max(tf.abs(tape.gradient(plain, self.inputs)))), 0.0)

    def test_the_rate_chooses_steps_and_inference_is_untouched(self):
        decoder = self.decoder
        text = decoder.condition_text(self.text, self.latents)
        seed = tf.constant([7, 8], tf.int32)
        recorded, _, _ = self._decode(self.inputs, training=False)
        own = tf.pad(recorded, [[0, 0], [1, 0], [0, 0]])[:, :-1].numpy()
        decoder.self_feeding = 0.5
        try:
            mixed = decoder.feed_own_frames(self.inputs, self.latents, text, self.mask, seed,
                                            training=True).numpy()
            self.assertIs(decoder.feed_own_frames(self.inputs, self.latents, text, self.mask,
                                                  seed, training=False), self.inputs)
        finally:
            decoder.self_feeding = 0.0
        is_own = np.all(np.abs(mixed - own) <= ATOL, axis=-1)
        is_recorded = np.all(mixed == self.inputs.numpy(), axis=-1)
        self.assertTrue(np.all(is_own | is_recorded))
        self.assertTrue(0.25 < is_own[:, 1:].mean() < 0.75, is_own.mean())


class GenerateTest(ModelTestCase):
    def _inputs(self, token_lengths=(7, 3)):
        b = random_batch(self.config, token_lengths=token_lengths)
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        return (b["tokens"], b["token_lengths"], b["language_ids"], latents)

    def test_kv_cache_equals_full_recompute(self):
        args = self._inputs(token_lengths=(7, 5))   # text limit: 42 and 30 steps
        cached = self.model.generate(*args, max_steps=32, stop_threshold=0.99999)
        full = self.model.generate(*args, max_steps=32, stop_threshold=0.99999, use_cache=False)
        np.testing.assert_array_equal(cached["mel_lengths"].numpy(), full["mel_lengths"].numpy())
        self.assertGreaterEqual(int(cached["mel_lengths"][1]), 50)
        self.assertLessEqual(_max_diff(cached["mel"], full["mel"]), 1e-4)
        self.assertLessEqual(_max_diff(cached["alignments"], full["alignments"]), 1e-4)

    def test_a_higher_cap_only_sizes_the_buffers(self):
        args = self._inputs(token_lengths=(5, 3))   # text limit: 30 and 18 steps
        low = self.model.generate(*args, max_steps=32, stop_threshold=0.99999)
        high = self.model.generate(*args, max_steps=48, stop_threshold=0.99999)
        np.testing.assert_array_equal(high["mel_lengths"].numpy(), low["mel_lengths"].numpy())
        self.assertLessEqual(_max_diff(high["mel"][:, :32 * self.r], low["mel"]), 1e-5)
        self.assertEqual(float(np.max(np.abs(high["mel"][:, 32 * self.r:]))), 0.0)
        self.assertEqual(float(np.max(np.abs(high["alignments"][:, 32:]))), 0.0)

    def test_text_length_limits_each_item_and_padding_frames_are_zero(self):
        args = self._inputs(token_lengths=(7, 2))
        out = self.model.generate(*args, max_steps=40, stop_threshold=0.99999)
        per_token = self.config.model.max_frames_per_token
        expected = [min(40, int(np.ceil(n * per_token / self.r))) * self.r for n in (7, 2)]
        np.testing.assert_array_equal(out["mel_lengths"].numpy(), expected)
        self.assertEqual(out["mel"].shape, (2, 40 * self.r, self.config.data.n_mels))
        self.assertEqual(float(np.max(np.abs(out["mel"][1, expected[1]:]))), 0.0)
        self.assertGreater(float(np.min(np.abs(out["mel"][1, :expected[1]]).sum(-1))), 0.0)

    def test_stop_token_ends_decoding_per_item(self):
        args = self._inputs(token_lengths=(7, 3))
        bias = self.model.decoder.stop_projection.bias
        saved = bias.numpy()
        try:
            # Frame 1 of every step says "stop": every item ends after frame 2 of step 0.
            bias.assign(np.array([-30.0, 30.0][:self.r], np.float32))
            out = self.model.generate(*args, max_steps=20)
        finally:
            bias.assign(saved)
        np.testing.assert_array_equal(out["mel_lengths"].numpy(), [2, 2])

    def test_a_decode_driven_in_chunks_equals_the_whole_decode(self):
        """start_decode, then decode_steps a few steps per call (separate tf.functions, as a
        streaming driver runs them): the same frames, lengths and alignments as one decode,
        and each partial state's frames are a prefix of the final mel."""
        args = self._inputs(token_lengths=(7, 5))
        whole = self.model.generate(*args, max_steps=32, stop_threshold=0.99999)
        start = tf.function(lambda *a: self.model.start_decode(*a, max_steps=32))
        run = tf.function(lambda state: self.model.decode_steps(state, 5, 0.99999))
        state = start(*args)
        self.assertEqual(int(state.step), 0)
        steps = []
        while not bool(tf.reduce_all(state.done)):
            before = int(state.step)
            state = run(state)
            steps.append(int(state.step) - before)
            # Frames with the postnet's full right context decoded are final.
            final = int(state.step) * self.r - self.model.postnet.receptive_field
            self.assertLessEqual(_max_diff(self.model.decoded(state)["mel"][:, :final],
                                           whole["mel"][:, :final]), 1e-4)
        self.assertEqual(steps[:-1], [5] * (len(steps) - 1))
        out = self.model.decoded(state)
        np.testing.assert_array_equal(out["mel_lengths"].numpy(), whole["mel_lengths"].numpy())
        self.assertLessEqual(_max_diff(out["mel"], whole["mel"]), 1e-5)
        self.assertLessEqual(_max_diff(out["alignments"], whole["alignments"]), 1e-5)
        np.testing.assert_array_equal(out["stopped"].numpy(), whole["stopped"].numpy())

    def test_rows_leaving_the_schedulers_batch_leave_the_others_unchanged(self):
        """The checkpoint's decode backend through the one chunk scheduler: the row the length
        cap ends first and a row the caller drops leave the batch (ModelDecoder.select); the
        row that stays gets the frames it gets alone, and its postnet gives the whole mel."""
        from myxtts.decoding import scheduler
        from myxtts.inference.model_decoder import ModelDecoder
        b = random_batch(self.config, token_lengths=(7, 2, 6), mel_lengths=(20, 13, 9),
                         ref_lengths=(12, 7, 10))
        tokens, token_lengths, language_ids = b["tokens"], b["token_lengths"], b["language_ids"]
        latents = self.model.speaker_latents(b["ref_mel"], b["ref_lengths"])
        sentences = [tokens[k, : int(token_lengths[k])].numpy().tolist() for k in range(3)]
        threshold = self.model.stop_threshold
        self.model.stop_threshold = 0.99999  # the untrained stop head would stop at once
        try:
            whole = self.model.generate(tokens, token_lengths, language_ids, latents,
                                        max_steps=32)
            decoder = ModelDecoder(self.model, 32, token_padding=1, jit_compile=False)

            def decode(rows, drop=None):
                """{row: its frames} of a decode of `rows`; row `drop` unwanted after 2 chunks."""
                state = decoder.start_batch([sentences[k] for k in rows],
                                            language_ids.numpy()[rows], tf.gather(latents, rows))
                got, ended, unwanted = {k: [] for k in rows}, set(), set()
                for chunk in scheduler.decoded_chunks(decoder, state, rows, 2, 4,
                                                      leaves=lambda k: k in unwanted):
                    self.assertEqual([row.row for row in chunk],
                                     [k for k in rows if k not in ended | unwanted])
                    for row in chunk:
                        got[row.row].append(row.frames)
                        if row.done:
                            ended.add(row.row)
                    if len(got.get(drop, ())) == 2:
                        unwanted.add(drop)
                return {k: np.concatenate(v) for k, v in got.items()}, ended

            together, ended = decode([0, 1, 2], drop=2)
            self.assertEqual(ended, {0, 1})
            alone = decode([0])[0]
        finally:
            self.model.stop_threshold = threshold
        length = int(whole["mel_lengths"][0])
        self.assertEqual(len(together[0]), length)
        self.assertLess(len(together[1]), length)
        np.testing.assert_allclose(together[0], alone[0], atol=1e-5)
        mel = decoder.postnet_batch(together[0][None], 0, latents[:1].numpy())[0]
        np.testing.assert_allclose(mel, whole["mel"][0, :length], atol=1e-4)

    def test_xla_decode_matches_graph_decode(self):
        args = self._inputs()
        graph = self.model.generate(*args, max_steps=16, stop_threshold=0.99999)
        xla = self.model.generate(*args, max_steps=16, stop_threshold=0.99999, jit_compile=True)
        np.testing.assert_array_equal(graph["mel_lengths"].numpy(), xla["mel_lengths"].numpy())
        self.assertLessEqual(_max_diff(graph["mel"], xla["mel"]), 1e-4)


if __name__ == "__main__":
    unittest.main()
