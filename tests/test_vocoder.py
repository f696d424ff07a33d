"""The HiFi-GAN vocoder stage: generator lengths, placement of everything on the model device
(two logical CPUs, fresh process), learning, resume, and the synthesis/export round trip."""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import pytest
import soundfile as sf
import tensorflow as tf

from myxtts.config import ConfigError, XTTSConfig
from tests.device_harness import run_probe
from tests.inference_helpers import (MAX_DECODER_STEPS, REFERENCE_AUDIO, make_checkpoint,
                                     make_vocoder_checkpoint)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
TINY = os.path.join(REPO, "configs", "tiny.yaml")


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

    def test_upsample_rates_must_multiply_to_the_hop(self):
        with self.assertRaisesRegex(ConfigError, r"vocoder.upsample_rates .* data.hop_length"):
            tiny(**{"vocoder.upsample_rates": [8, 8, 2]})


DEVICE_AND_RESUME_PROBE = """
import numpy as np
from myxtts.config import XTTSConfig
from myxtts.training.vocoder_trainer import VocoderTrainer
import tempfile

def make(directory):
    config = XTTSConfig.from_yaml("configs/tiny.yaml")
    config.training.checkpoint_dir = directory
    config.training.precision = "mixed_float16"   # a LossScaleOptimizer on each side
    return VocoderTrainer(config, model_device=plan.model_device)

rng = np.random.default_rng(0)
with tf.device(plan.data_device):
    audio = tf.constant(rng.normal(0, 0.1, (4, 16 * 256)), tf.float32)
    mel = tf.constant(rng.normal(-2, 1, (4, 16, 40)), tf.float32)
    batch = {"audio": audio, "mel": mel, "mel_target": mel}
out = {"batch": audio.device}
directory = tempfile.mkdtemp()
trainer = make(directory)
warm = trainer.step(batch, adversarial=False)
gan = trainer.step(batch, adversarial=True)
out["outputs"] = sorted({t.device for t in list(warm.values()) + list(gan.values())})
out["variables"] = sorted({v.value.device if hasattr(v, "value") else v.device
                           for v in trainer.variables})
out["n_variables"] = len(trainer.variables)
out["loss_scale_variables"] = [v.path for v in trainer.variables if "dynamic_scale" in v.path]
out["step_variables"] = sorted({v.device for v in [trainer.step.step, trainer.epoch,
                                                   trainer.best_val_loss]})
# distinct loss scales, so a restore that mixed them up (or skipped one) is caught
trainer.step.gen.optimizer.dynamic_scale.assign(512.0)
trainer.step.disc.optimizer.dynamic_scale.assign(64.0)
saved = [np.array(v.numpy()) for v in trainer.variables]
trainer.checkpoints.save(trainer.global_step)
resumed = make(directory)
out["resumed_step"] = resumed.global_step
out["mismatched"] = [v.path for v, value in zip(resumed.variables, saved)
                     if not np.array_equal(np.array(v.numpy()), value)]
out["resumed_count"] = [len(resumed.variables), len(saved)]
out["resumed_scales"] = [float(resumed.step.gen.optimizer.dynamic_scale.numpy()),
                         float(resumed.step.disc.optimizer.dynamic_scale.numpy())]
print(json.dumps(out))
"""


@pytest.mark.slow
class DevicePlacementAndResumeTest(unittest.TestCase):
    """Generator, both discriminators, both optimizers and both loss scales on /CPU:1."""

    @classmethod
    def setUpClass(cls):
        cls.r = run_probe(DEVICE_AND_RESUME_PROBE, timeout=600)

    def test_batch_from_data_device_outputs_on_model_device(self):
        self.assertTrue(self.r["batch"].endswith("CPU:0"), self.r["batch"])
        self.assertEqual([d[-5:] for d in self.r["outputs"]], ["CPU:1"] * len(self.r["outputs"]))

    def test_every_variable_including_both_loss_scales_on_model_device(self):
        self.assertGreater(self.r["n_variables"], 100)
        self.assertEqual(len(self.r["loss_scale_variables"]), 2, self.r["loss_scale_variables"])
        for device in self.r["variables"] + self.r["step_variables"]:
            self.assertTrue(device.endswith("CPU:1"), device)

    def test_resume_restores_both_optimizers_and_loss_scales(self):
        self.assertEqual(self.r["resumed_step"], 2)
        self.assertEqual(self.r["resumed_count"][0], self.r["resumed_count"][1])
        self.assertEqual(self.r["mismatched"], [])
        self.assertEqual(self.r["resumed_scales"], [512.0, 64.0])


@pytest.mark.slow
class OverfitTest(unittest.TestCase):
    def test_warmup_steps_leave_the_discriminators_alone(self):
        from myxtts.training.vocoder_trainer import VocoderTrainer
        with tempfile.TemporaryDirectory() as directory:
            trainer = VocoderTrainer(tiny(**{"training.checkpoint_dir": directory}),
                                     model_device="/CPU:0")
            before = [w.numpy() for w in trainer.mpd.weights + trainer.msd.weights]
            rng = np.random.default_rng(0)
            mel = tf.constant(rng.normal(-2, 1, (2, 16, 40)), tf.float32)
            batch = {"audio": tf.constant(rng.normal(0, 0.1, (2, 4096)), tf.float32),
                     "mel": mel, "mel_target": mel}
            out = trainer.step(batch, adversarial=False)
            after = [w.numpy() for w in trainer.mpd.weights + trainer.msd.weights]
            self.assertEqual(int(trainer.step.gen.optimizer.iterations.numpy()), 1)
            self.assertEqual(int(trainer.step.disc.optimizer.iterations.numpy()), 0)
            self.assertTrue(all(np.array_equal(a, b) for a, b in zip(before, after)))
            self.assertAlmostEqual(float(out["total"]), 45.0 * np.log(10.0) * float(out["mel"]),
                                   places=3)
            trainer.step(batch, adversarial=True)
            self.assertEqual(int(trainer.step.disc.optimizer.iterations.numpy()), 1)

    def test_a_few_generator_steps_on_one_clip_lower_the_mel_loss(self):
        from myxtts.data import audio as audio_lib
        from myxtts.training.vocoder_trainer import VocoderTrainer
        from tests.data_samples import speech
        with tempfile.TemporaryDirectory() as directory:
            config = tiny(**{"training.checkpoint_dir": directory,
                             "vocoder.learning_rate": 2e-3})
            trainer = VocoderTrainer(config, model_device="/CPU:0")
            samples = speech("S001")[8000:8000 + 16 * 256]
            audio = tf.constant(samples[None])
            mel = audio_lib.LogMel.from_config(config.data)(audio)[:, :16]
            batch = {"audio": audio, "mel": mel, "mel_target": mel}
            losses = [float(trainer.step(batch, adversarial=False)["mel"]) for _ in range(12)]
        self.assertLess(np.mean(losses[-3:]), 0.8 * np.mean(losses[:3]), losses)


def _run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.mark.slow
class VocoderServingTest(unittest.TestCase):
    """synthesize --vocoder-dir, and an export whose signatures run in a process that never
    imports myxtts."""

    @classmethod
    def setUpClass(cls):
        from myxtts.inference.export import export_saved_model
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-vocoder-test-")
        cls.acoustic_dir = os.path.join(cls.tmp, "acoustic")
        cls.vocoder_dir = os.path.join(cls.tmp, "vocoder")
        make_checkpoint(cls.acoustic_dir)
        make_vocoder_checkpoint(cls.vocoder_dir)
        cls.result = export_saved_model(cls.acoustic_dir, os.path.join(cls.tmp, "models", "m"),
                                        max_decoder_steps=MAX_DECODER_STEPS,
                                        vocoder_dir=cls.vocoder_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_synthesize_cli_writes_hifigan_audio(self):
        out = os.path.join(self.tmp, "hello.wav")
        done = _run([sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
                     self.acoustic_dir, "--vocoder-dir", self.vocoder_dir, "--reference-audio",
                     REFERENCE_AUDIO, "--text", "Hello there.", "--output", out,
                     "--max-decoder-steps", str(MAX_DECODER_STEPS)], cwd=REPO)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("Vocoder: HiFi-GAN", done.stderr)
        audio, rate = sf.read(out)
        self.assertEqual(rate, 16000)
        # HiFi-GAN gives frames * hop samples (Griffin-Lim would give (frames - 1) * hop + win)
        self.assertEqual(len(audio) % 256, 0)
        self.assertGreater(np.abs(audio).max(), 0.0)

    def test_vocoder_dir_that_is_an_acoustic_checkpoint_is_refused(self):
        done = _run([sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
                     self.acoustic_dir, "--vocoder-dir", self.acoustic_dir, "--reference-audio",
                     REFERENCE_AUDIO, "--text", "Hello.", "--output",
                     os.path.join(self.tmp, "x.wav")], cwd=REPO)
        self.assertEqual(done.returncode, 2, done.stderr[-2000:])
        self.assertIn("holds no HiFi-GAN generator", done.stderr)
        self.assertNotIn("Traceback", done.stderr)

    def test_fresh_process_runs_vocode_and_serving_default(self):
        from myxtts.inference.vocoding import load_vocoder
        self.assertIn("vocode", self.result.signatures)
        rng = np.random.default_rng(3)
        mel = rng.normal(-2.5, 0.8, (2, 20, 40)).astype(np.float32)
        lengths = np.array([20, 13], np.int32)
        ref = np.zeros((1, 30, 40), np.float32) - 3.0
        inputs = {"vocode/mel": mel, "vocode/mel_lengths": lengths,
                  "serving_default/text": np.array(["Hello there."]),
                  "serving_default/language": np.array(["en"]),
                  "serving_default/reference_mel": ref,
                  "serving_default/reference_lengths": np.array([30], np.int32)}
        inputs_path = os.path.join(self.tmp, "inputs.npz")
        outputs_path = os.path.join(self.tmp, "outputs.npz")
        np.savez(inputs_path, **inputs)
        done = _run([sys.executable, os.path.join(HERE, "serving_runner.py"), self.result.path,
                     inputs_path, outputs_path], cwd=self.tmp)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        report = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertFalse(report["myxtts_imported"])
        self.assertEqual(report["requests"], {"serving_default": [], "vocode": []})
        out = np.load(outputs_path, allow_pickle=False)
        vocoder = load_vocoder(self.vocoder_dir)
        waveform, waveform_lengths = vocoder(mel, lengths)
        np.testing.assert_array_equal(out["vocode/waveform_lengths"], lengths * 256)
        np.testing.assert_array_equal(waveform_lengths, lengths * 256)
        np.testing.assert_allclose(out["vocode/waveform"], waveform.numpy(), atol=1e-5)
        self.assertTrue(np.all(out["vocode/waveform"][1, 13 * 256:] == 0))
        np.testing.assert_array_equal(out["serving_default/waveform_lengths"],
                                      out["serving_default/mel_lengths"] * 256)


if __name__ == "__main__":
    unittest.main()
