"""The HiFi-GAN vocoder stage: generator lengths, complete checkpoints, and training on the test
run's two logical CPUs (placement, warm-up, overfit, validation, SIGTERM, resume). The synthesis
and export round trips with a vocoder are in test_synthesize.py and test_export.py."""

import json
import os
import signal
import tempfile
import unittest

from tests.logical_devices import PLAN  # first: configures the devices before TensorFlow starts

import keras  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import tensorflow as tf  # noqa: E402

from myxtts.config import ConfigError, XTTSConfig  # noqa: E402
from tests.trainer_probes import restored_global_state  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TINY = os.path.join(REPO, "configs", "tiny.yaml")
SAMPLE_DIR = os.path.join(REPO, "samples", "ljspeech_sample")


def tiny(**overrides) -> XTTSConfig:
    config = XTTSConfig.from_yaml(TINY)
    return config.override(overrides, source="test")


class GeneratorTest(unittest.TestCase):
    def test_output_length_is_frames_times_hop_for_every_preset(self):
        from myxtts.vocoder.generator import HiFiGANGenerator
        for preset, hop in (("tiny", 256), ("tiny", 300), ("small", 256), ("full", 256)):
            with self.subTest(preset=preset, hop=hop):
                config = tiny(**{"vocoder.preset": preset, "data.hop_length": hop})
                generator = HiFiGANGenerator.from_config(config)  # built, not trained
                self.assertEqual(int(np.prod(generator.upsample_rates)), hop)
                audio = generator(tf.zeros([2, 3, config.data.n_mels]))
                self.assertEqual(audio.shape, (2, 3 * hop))
                self.assertEqual(audio.dtype, tf.float32)

    def test_tf_checkpoint_holds_every_weight_of_generator_and_discriminators(self):
        from myxtts.vocoder.discriminators import (MultiPeriodDiscriminator,
                                                   MultiScaleDiscriminator)
        from myxtts.vocoder.generator import HiFiGANGenerator
        config = tiny()
        models = {"generator": HiFiGANGenerator.from_config(config),
                  "mpd": MultiPeriodDiscriminator(width=0.125),
                  "msd": MultiScaleDiscriminator(width=0.125, grouped=False)}
        with tempfile.TemporaryDirectory() as directory:
            path = tf.train.Checkpoint(**models).save(os.path.join(directory, "ckpt"))
            saved = [name for name, _ in tf.train.list_variables(path)]
        for name, model in models.items():
            with self.subTest(model=name):
                self.assertEqual(len([n for n in saved if n.startswith(f"{name}/")]),
                                 len(model.weights))

    def test_vocos_output_length_is_frames_times_hop(self):
        from myxtts.vocoder.generator import build_generator
        for n_fft, hop in ((512, 256), (1024, 300)):
            with self.subTest(n_fft=n_fft, hop=hop):
                config = tiny(**{"vocoder.generator": "vocos", "data.n_fft": n_fft,
                                 "data.win_length": n_fft, "data.hop_length": hop})
                generator = build_generator(config)
                self.assertEqual(generator.vocoder_name, "Vocos")
                for frames in (1, 3, 16):
                    audio = generator(tf.zeros([2, frames, config.data.n_mels]))
                    self.assertEqual(audio.shape, (2, frames * hop))
                    self.assertEqual(audio.dtype, tf.float32)

    def test_vocos_inverse_stft_inverts_a_centred_stft(self):
        """The head's spectrum goes through the inverse of a centred, Hann-windowed STFT (frame
        i centred on sample i * hop): exact where frames overlap, i.e. all but the last hop,
        which fades instead of blowing up where only one frame's window edge covers it."""
        from myxtts.vocoder.vocos import VocosGenerator
        for n_fft, hop, win in ((1024, 256, 1024), (1024, 256, 800), (512, 256, 512)):
            with self.subTest(n_fft=n_fft, hop=hop, win=win):
                generator = VocosGenerator(80, n_fft, hop, win, channels=8, layers=1)
                window = generator._window  # pylint: disable=protected-access
                audio = np.random.default_rng(0).normal(size=[2, 20 * hop]).astype(np.float32)
                frames = tf.signal.frame(tf.pad(audio, [[0, 0], [n_fft // 2, n_fft // 2]]),
                                         n_fft, hop)[:, :20]
                spectrum = tf.signal.rfft(frames * window)
                # pylint: disable=protected-access
                # The inverse FFT as TensorFlow's op, and as the on-device graphs' matmuls.
                for inverse in (tf.signal.irfft(spectrum, [n_fft]),
                                generator._inverse_rfft_as_matmul(tf.math.real(spectrum),
                                                                  tf.math.imag(spectrum))):
                    restored = generator._inverse_stft(inverse).numpy()
                    self.assertEqual(restored.shape, audio.shape)
                    np.testing.assert_allclose(restored[:, :19 * hop], audio[:, :19 * hop],
                                               atol=1e-5)
                self.assertLessEqual(np.abs(restored).max(), np.abs(audio).max() + 1e-5)

    def test_vocos_needs_an_fft_of_at_least_two_hops(self):
        with self.assertRaisesRegex(ConfigError, r"vocoder.generator.*n_fft >= 2 x"):
            tiny(**{"vocoder.generator": "vocos", "data.hop_length": 300})

    def test_stft_loss_is_zero_on_the_recording_and_grows_with_the_error(self):
        from myxtts.vocoder.losses import stft_loss
        resolutions = tiny().vocoder.stft_resolutions
        rng = np.random.default_rng(0)
        real = tf.constant(rng.normal(0, 0.1, (2, 4096)), tf.float32)
        noise = tf.constant(rng.normal(0, 0.1, (2, 4096)), tf.float32)
        losses = [float(stft_loss(real + scale * noise, real, resolutions))
                  for scale in (0.0, 0.1, 1.0)]
        self.assertAlmostEqual(losses[0], 0.0, places=6)
        self.assertLess(losses[0], losses[1])
        self.assertLess(losses[1], losses[2])

    def test_upsample_rates_must_multiply_to_the_hop(self):
        with self.assertRaisesRegex(ConfigError, r"vocoder.upsample_rates .* data.hop_length"):
            tiny(**{"vocoder.upsample_rates": [8, 8, 2]})


class TeacherForcedMelsTest(unittest.TestCase):
    def setUp(self):
        self.enterContext(restored_global_state())  # the checkpoint sets the dtype policy

    def test_gta_mels_are_frame_aligned_with_the_recordings_and_reused(self):
        from myxtts.data import audio as audio_lib
        from myxtts.data import cache as cache_lib
        from myxtts.data.prepare import prepare_dataset
        from myxtts.training.gta import teacher_forced_mels
        from tests.inference_helpers import SAMPLE_DIR, make_checkpoint, tiny_inference_config
        with tempfile.TemporaryDirectory() as directory:
            acoustic = os.path.join(directory, "acoustic")
            make_checkpoint(acoustic)
            config = tiny_inference_config(os.path.join(directory, "vocoder"))
            items = prepare_dataset(config, SAMPLE_DIR).items["train"][:2]
            out_dir = os.path.join(directory, "vocoder", "gta")
            paths = teacher_forced_mels(acoustic, items, config, out_dir, "/CPU:0")
            log_mel = audio_lib.LogMel.from_config(config.data)
            for item in items:
                gta = np.load(paths[item.id])
                frames = log_mel(cache_lib.load_samples(item, config.data)[None]).shape[1]
                self.assertEqual(gta.shape, (frames, config.data.n_mels))
                self.assertTrue(np.all(np.isfinite(gta)))
            with self.assertLogs("myxtts.vocoder", "INFO") as logs:
                self.assertEqual(teacher_forced_mels(acoustic, items, config, out_dir,
                                                     "/CPU:0"), paths)
            self.assertIn("Reusing 2 teacher-forced mels", "".join(logs.output))
            config.data.hop_length = 200
            with self.assertRaisesRegex(ConfigError, "data.hop_length 256 vs 200"):
                teacher_forced_mels(acoustic, items, config, out_dir, "/CPU:0")


def _values(trainer):
    return [np.array(v.numpy()) for v in trainer.variables]


def _mismatched(trainer, saved):
    return [v.path for v, value in zip(trainer.variables, saved)
            if not np.array_equal(np.array(v.numpy()), value)]


def _devices(tensors):
    return sorted({t.value.device if isinstance(t, keras.Variable) else t.device
                   for t in tensors})


@pytest.mark.slow
class TrainingOnTwoDevicesTest(unittest.TestCase):
    """Segments featurized on /CPU:0; generator, discriminators, both optimizers and both loss
    scales on /CPU:1; warm-up, overfit, validation, SIGTERM save, resume, fine-tuning.

    One run does everything that needs a trained vocoder, so the GAN step compiles once. The
    discriminators are cut to periods 2, 3 and one scale: the same code with a graph half the
    size."""

    @classmethod
    def setUpClass(cls):
        # pylint: disable=import-outside-toplevel
        from myxtts.data.segments import SegmentPipeline
        from myxtts.training.vocoder_trainer import VocoderTrainer
        cls.enterClassContext(restored_global_state())
        root = cls.enterClassContext(tempfile.TemporaryDirectory())

        def config(name, **overrides):
            c = XTTSConfig.from_yaml(TINY)
            return c.override({"training.checkpoint_dir": os.path.join(root, name),
                               "vocoder.mpd_periods": [2, 3], "vocoder.msd_scales": 1,
                               "vocoder.batch_size": 1, "vocoder.learning_rate": 2e-3,
                               "training.validate_every_steps": 12, "training.max_steps": 100,
                               **overrides}, source="test")

        r = cls.r = {}
        c = config("run")
        pipeline = SegmentPipeline(c, SAMPLE_DIR, data_device=PLAN.data_device,
                                   work_dir=c.training.checkpoint_dir)
        raw = next(iter(pipeline.train_dataset(0)))
        with tf.device(PLAN.data_device):
            r["featurized"] = _devices(pipeline.featurize(raw).values())
        r["raw"] = _devices(raw.values())
        with pipeline.train_batches(0, PLAN.model_device) as feeder:
            batch = next(iter(feeder))   # one clip: a segment of one utterance
        r["batch"] = _devices(batch.values())
        r["batch_shape"] = batch["audio"].shape.as_list()

        trainer = VocoderTrainer(c, model_device=PLAN.model_device)
        discriminators = [w.numpy().copy() for w in trainer.mpd.weights + trainer.msd.weights]
        warm = [trainer.step(batch, adversarial=False) for _ in range(10)]
        r["warmup_mel"] = [float(o["mel"]) for o in warm]
        r["warmup_total_over_mel"] = float(warm[0]["total"]) / float(warm[0]["mel"])
        r["warmup_discriminators_changed"] = sum(
            not np.array_equal(a, w.numpy())
            for a, w in zip(discriminators, trainer.mpd.weights + trainer.msd.weights))
        r["iterations_after_warmup"] = [int(trainer.step.gen.optimizer.iterations.numpy()),
                                        int(trainer.step.disc.optimizer.iterations.numpy())]
        gan = trainer.step(batch, adversarial=True)
        r["iterations_after_gan"] = [int(trainer.step.gen.optimizer.iterations.numpy()),
                                     int(trainer.step.disc.optimizer.iterations.numpy())]
        r["outputs"] = _devices([*warm[0].values(), *gan.values()])
        r["variables"] = _devices(trainer.variables + [trainer.step.step, trainer.epoch,
                                                       trainer.best_val_loss])
        r["n_variables"] = len(trainer.variables)

        # The Vocos generator trains through the same step, on the same device.
        vocos = VocoderTrainer(config("vocos", **{"vocoder.generator": "vocos"}),
                               model_device=PLAN.model_device)
        r["vocos_mel"] = [float(vocos.step(batch, adversarial=False)["mel"]) for _ in range(10)]
        vocos_gan = vocos.step(batch, adversarial=True)
        r["vocos_variables"] = _devices(vocos.variables)
        r["vocos_outputs"] = _devices(list(vocos_gan.values()))

        # fit(): the feeder loop, validation at step 12 (best/, TensorBoard audio), and a real
        # SIGTERM sent to this process during that validation: fit() routes it to the trainer,
        # whose next step finishes, saves and stops.
        validate = trainer.validate

        def validate_then_sigterm(pipeline, monitor=None):
            stop = validate(pipeline, monitor)
            handler = signal.getsignal(signal.SIGTERM)
            if not callable(handler):  # would end the test process
                raise AssertionError(f"fit() installed no SIGTERM handler ({handler!r})")
            os.kill(os.getpid(), signal.SIGTERM)
            return stop

        trainer.validate = validate_then_sigterm
        summary = trainer.fit(pipeline)
        r["fit"] = [summary.step, summary.reason, os.path.basename(summary.checkpoint)]
        r["best"] = sorted(os.listdir(os.path.join(c.training.checkpoint_dir, "best")))
        tags = set()
        for path in tf.io.gfile.glob(os.path.join(c.training.checkpoint_dir, "tensorboard", "val",
                                                  "*")):
            for record in tf.data.TFRecordDataset(path):
                tags.update(v.tag for v in
                            tf.compat.v1.Event.FromString(record.numpy()).summary.value)
        r["val_tags"] = sorted(tags)
        with open(os.path.join(c.training.checkpoint_dir, "model_info.json"),
                  encoding="utf-8") as f:
            r["model_info"] = json.load(f)
        saved = _values(trainer)
        resumed = VocoderTrainer(c, model_device=PLAN.model_device)   # auto-resume
        r["resumed_step"] = resumed.global_step
        r["resumed_mismatched"] = _mismatched(resumed, saved)

        # training.max_minutes (the run's minutes, the checkpoint's among them) ends a fit by
        # itself (after the first step here), with a checkpoint.
        trainer.config.training.max_minutes = float(trainer.minutes_trained.numpy()) + 1e-9
        again = trainer.fit(pipeline)
        r["timed_fit"] = [again.step, again.reason, os.path.basename(again.checkpoint)]

        # --vocoder-init: a new run starts from the trained run's weights, with fresh optimizers.
        tuned = VocoderTrainer(config("finetune"), model_device=PLAN.model_device,
                               init_from=c.training.checkpoint_dir)
        r["finetune"] = [tuned.global_step, int(tuned.step.gen.optimizer.iterations.numpy()),
                         sum(not np.array_equal(a.numpy(), b.numpy()) for a, b in zip(
                             tuned.generator.weights + tuned.mpd.weights + tuned.msd.weights,
                             trainer.generator.weights + trainer.mpd.weights
                             + trainer.msd.weights))]

        # mixed_float16: each optimizer is a LossScaleOptimizer. Every variable gets a distinct
        # value (slots, iteration counters, both loss scales), is saved, and a new trainer must
        # restore it.
        c16 = config("fp16", **{"training.precision": "mixed_float16"})
        half = VocoderTrainer(c16, model_device=PLAN.model_device)
        r["fp16_variables"] = _devices(half.variables)
        r["loss_scale_variables"] = [v.path for v in half.variables if "dynamic_scale" in v.path]
        rng = np.random.default_rng(0)
        for v in half.variables:
            dtype = tf.as_dtype(v.dtype)
            v.assign((rng.normal(0, 1, v.shape) if dtype.is_floating
                      else rng.integers(1, 1000, v.shape)).astype(dtype.as_numpy_dtype))
        half.step.gen.optimizer.dynamic_scale.assign(512.0)
        half.step.disc.optimizer.dynamic_scale.assign(64.0)
        half.step.step.assign(7)
        saved = _values(half)
        half.checkpoints.save(half.global_step)
        restored = VocoderTrainer(c16, model_device=PLAN.model_device)
        r["fp16_restored"] = [restored.global_step, len(restored.variables), len(saved)]
        r["fp16_mismatched"] = _mismatched(restored, saved)
        r["fp16_scales"] = [float(restored.step.gen.optimizer.dynamic_scale.numpy()),
                            float(restored.step.disc.optimizer.dynamic_scale.numpy())]

    def assert_on_model_device(self, devices):
        self.assertTrue(devices)
        for device in devices:
            self.assertTrue(device.endswith("CPU:1"), device)

    def test_segments_are_featurized_on_the_data_device_and_handed_to_the_model_device(self):
        for device in self.r["raw"] + self.r["featurized"]:
            self.assertTrue(device.endswith("CPU:0"), device)
        self.assert_on_model_device(self.r["batch"])
        self.assertEqual(self.r["batch_shape"], [1, 16 * 256])

    def test_generator_and_discriminator_steps_keep_everything_on_the_model_device(self):
        self.assertGreater(self.r["n_variables"], 100)
        self.assert_on_model_device(self.r["variables"])
        self.assert_on_model_device(self.r["outputs"])
        self.assertEqual(len(self.r["loss_scale_variables"]), 2, self.r["loss_scale_variables"])
        self.assert_on_model_device(self.r["fp16_variables"])

    def test_warmup_steps_train_the_generator_alone_on_the_mel_loss(self):
        self.assertEqual(self.r["iterations_after_warmup"], [10, 0])
        self.assertEqual(self.r["warmup_discriminators_changed"], 0)
        self.assertAlmostEqual(self.r["warmup_total_over_mel"], 45.0 * np.log(10.0), places=3)
        self.assertEqual(self.r["iterations_after_gan"], [11, 1])

    def test_a_few_generator_steps_on_one_clip_lower_the_mel_loss(self):
        for generator in ("warmup_mel", "vocos_mel"):
            with self.subTest(generator=generator):
                losses = self.r[generator]
                self.assertLess(np.mean(losses[-3:]), 0.8 * np.mean(losses[:3]), losses)

    def test_vocos_generator_steps_keep_everything_on_the_model_device(self):
        self.assert_on_model_device(self.r["vocos_variables"])
        self.assert_on_model_device(self.r["vocos_outputs"])

    def test_sigterm_saves_validation_keeps_best_and_tensorboard_audio(self):
        self.assertEqual(self.r["fit"], [13, "signal SIGTERM", "ckpt-13"])
        self.assertIn("checkpoint", self.r["best"])
        for tag in ("loss/objective", "audio/clip0_vocoder", "audio/clip0_recording",
                    "mel/generated"):
            self.assertIn(tag, self.r["val_tags"])
        self.assertEqual(self.r["model_info"]["stage"], "vocoder")
        self.assertEqual(self.r["model_info"]["steps_trained"], 13)

    def test_max_minutes_ends_training_by_itself(self):
        self.assertEqual(self.r["timed_fit"], [14, "max_minutes", "ckpt-14"])

    def test_resume_restores_everything_of_a_trained_run(self):
        self.assertEqual(self.r["resumed_step"], 13)
        self.assertEqual(self.r["resumed_mismatched"], [])

    def test_vocoder_init_starts_a_new_run_from_the_weights(self):
        self.assertEqual(self.r["finetune"], [0, 0, 0])

    def test_resume_restores_both_optimizers_and_loss_scales(self):
        self.assertEqual(self.r["fp16_restored"][0], 7)
        self.assertEqual(self.r["fp16_restored"][1], self.r["fp16_restored"][2])
        self.assertEqual(self.r["fp16_mismatched"], [])
        self.assertEqual(self.r["fp16_scales"], [512.0, 64.0])


if __name__ == "__main__":
    unittest.main()
