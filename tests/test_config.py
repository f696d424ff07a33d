"""XTTSConfig: strict YAML, flag overrides, presets."""

import glob
import os
import tempfile
import unittest

from myxtts.config import ConfigError, XTTSConfig, markdown_reference
from tests import children

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _write(text):
    fd, path = tempfile.mkstemp(suffix=".yaml")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


class ConfigTest(unittest.TestCase):
    def test_every_preset_loads_and_validates(self):
        presets = sorted(glob.glob(os.path.join(REPO, "configs", "*.yaml")))
        self.assertGreaterEqual(len(presets), 3)
        for path in presets:
            config = XTTSConfig.from_yaml(path)
            self.assertIsInstance(config.model.d_model, int, path)

    def test_tiny_overrides_defaults(self):
        config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
        self.assertEqual(config.model.d_model, 32)
        self.assertEqual(config.training.optimizer, "adamw")  # untouched default

    def test_unknown_key_names_key_and_file(self):
        path = _write("model:\n  d_modle: 64\n")
        with self.assertRaises(ConfigError) as ctx:
            XTTSConfig.from_yaml(path)
        self.assertIn("model.d_modle", str(ctx.exception))
        self.assertIn(path, str(ctx.exception))

    def test_unknown_section(self):
        with self.assertRaisesRegex(ConfigError, "unknown section 'optim'"):
            XTTSConfig.from_yaml(_write("optim:\n  lr: 1\n"))

    def test_wrong_type_names_key(self):
        with self.assertRaisesRegex(ConfigError, r"data.batch_size must be int, got 'many'"):
            XTTSConfig.from_yaml(_write("data:\n  batch_size: many\n"))
        with self.assertRaisesRegex(ConfigError, "training.xla must be bool"):
            XTTSConfig.from_yaml(_write("training:\n  xla: 1\n"))

    def test_int_accepted_for_float(self):
        config = XTTSConfig.from_yaml(_write("training:\n  learning_rate: 1\n"))
        self.assertEqual(config.training.learning_rate, 1.0)

    def test_invalid_value(self):
        with self.assertRaisesRegex(ConfigError, "model.d_model"):
            XTTSConfig.from_yaml(_write("model:\n  d_model: 30\n  num_heads: 4\n"))

    def test_reference_statistics_needs_the_reference_spectrum(self):
        with self.assertRaisesRegex(ConfigError, "model.reference_statistics needs "
                                                 "model.reference_spectrum"):
            XTTSConfig.from_yaml(_write("model:\n  reference_statistics: true\n"))
        config = XTTSConfig()
        with self.assertRaisesRegex(ConfigError, "--reference-statistics needs model.reference_"
                                                 "spectrum.*got on; it sets model.reference_statistics"):
            config.override({"model.reference_statistics": True},
                            names={"model.reference_statistics": "--reference-statistics"})

    def test_reference_matching_needs_the_reference_spectrum_and_a_share(self):
        with self.assertRaisesRegex(ConfigError, "model.reference_matching needs "
                                                 "model.reference_spectrum"):
            XTTSConfig.from_yaml(_write("model:\n  reference_matching: 0.5\n"))
        with self.assertRaisesRegex(ConfigError, "--reference-matching is 1.5: the share.*"
                                                 "within \\[0, 1\\]"):
            XTTSConfig.from_yaml(_write("model:\n  reference_spectrum: true\n")).override(
                {"model.reference_matching": 1.5},
                names={"model.reference_matching": "--reference-matching"})

    def test_a_retired_key_loads_only_at_the_value_that_means_what_the_code_does(self):
        # A run's or an export's config.yaml written before the keys were retired holds them.
        config = XTTSConfig.from_dict({"model": {"text_alignment": "attention",
                                                 "decoder_input": "previous_frames",
                                                 "prosody_features": False},
                                       "training": {"duration_loss_weight": 2.0,
                                                    "aligner_loss_weight": 1.0,
                                                    "prosody_loss_weight": 0.1}}, "old.yaml")
        self.assertEqual(config, XTTSConfig())
        self.assertNotIn("text_alignment", config.to_yaml())
        with self.assertRaisesRegex(ConfigError, "old.yaml: model.text_alignment was retired "
                                                 r"\(docs/history.md"):
            XTTSConfig.from_dict({"model": {"text_alignment": "durations"}}, "old.yaml")
        with self.assertRaisesRegex(ConfigError, "model.prosody_features was retired"):
            XTTSConfig().override({"model.prosody_features": True})

    def test_missing_file_and_bad_yaml(self):
        with self.assertRaisesRegex(ConfigError, "does not exist"):
            XTTSConfig.from_yaml("/nonexistent/x.yaml")
        with self.assertRaisesRegex(ConfigError, "not valid YAML"):
            XTTSConfig.from_yaml(_write("data: [1, 2\n"))

    def test_yaml_round_trip(self):
        config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", "tiny.yaml"))
        config.override({"training.grad_accum_steps": 3})
        path = _write("")
        config.to_yaml(path)
        self.assertEqual(XTTSConfig.from_yaml(path), config)

    def test_overrides_win_and_none_is_ignored(self):
        config = XTTSConfig().override({"data.batch_size": 8, "training.epochs": None})
        self.assertEqual(config.data.batch_size, 8)
        self.assertEqual(config.training.epochs, 100)
        with self.assertRaisesRegex(ConfigError, "command line: unknown key 'data.bogus'"):
            XTTSConfig().override({"data.bogus": 1})

    def test_a_misspelled_key_names_the_closest_one(self):
        cases = [({"training": {"learning_rte": 1e-3}}, "did you mean `learning_rate`?"),
                 ({"model": {"learning_rate": 1e-3}},
                  "did you mean `training.learning_rate`, in the training section?"),
                 ({"trainin": {}}, "unknown section 'trainin' (did you mean `training`?)")]
        for raw, hint in cases:
            with self.subTest(raw=raw):
                with self.assertRaises(ConfigError) as error:
                    XTTSConfig.from_dict(raw, "x.yaml")
                self.assertIn(hint, str(error.exception))
        with self.assertRaises(ConfigError) as error:
            XTTSConfig.from_dict({"data": {"zzz": 1}}, "x.yaml")
        self.assertNotIn("did you mean", str(error.exception))

    def test_every_field_documented(self):
        self.assertNotIn("|  |", markdown_reference())

    def test_modules_used_before_tensorflow_do_not_import_it(self):
        import subprocess
        modules = ["myxtts.config", "myxtts.devices", "myxtts.cli", "myxtts.run_directory",
                   "myxtts.atomic_write", "myxtts.source_run", "myxtts.model_info",
                   "myxtts.data.audio_io", "myxtts.data.text", "myxtts.inference.text_front_end",
                   "myxtts.inference.voices", "myxtts.synthesize"]
        self.assertEqual(subprocess.run(children.command("config", *modules),
                                        cwd=REPO).returncode, 0)


if __name__ == "__main__":
    unittest.main()
