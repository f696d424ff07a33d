"""Fine-tuning (--init-from, training.freeze): a tiny model trained briefly on speaker anna's
English rows is fine-tuned on speaker ben (English, German, Spanish) through train_main.py with
the text and speaker encoders frozen, next to a from-scratch run on ben. Frozen weights stay bit
for bit, get no optimizer slots, new characters and languages get rows of their own, the source
run is not touched, and after the same few steps the fine-tuned run's validation loss on ben is
lower than the from-scratch run's. The --init-from argument mistakes are reported before
TensorFlow starts; the config a warm start gets is checked without training.

    python -m pytest tests/test_finetune.py -v
"""

import glob
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import pytest
import yaml

from myxtts.config import XTTSConfig
from myxtts.data.text import Tokenizer
from myxtts.source_run import SourceRunError, continued_run, locate_source, warm_start_config
from myxtts.model_info import update_model_info
from tests.data_samples import sample_rows, write_metadata
from tests.device_harness import REPO
from tests.test_cli_start import _train_main

FROZEN = ("text_encoder", "speaker_encoder")
LANGUAGE_TABLE = "text_encoder/language_embedding/_embeddings"
TABLES = {LANGUAGE_TABLE, "text_encoder/token_embedding/_embeddings"}
BASE_STEPS, STEPS = 30, 10


def speaker_folder(root: str, speaker: str, languages) -> str:
    """The sample rows of one speaker (and languages) as a dataset folder."""
    folder = os.path.join(root, speaker)
    os.makedirs(os.path.join(folder, "wavs"))
    lines = []
    for uid, text, who, language, path in sample_rows():
        if who == speaker and language in languages:
            shutil.copy(path, os.path.join(folder, "wavs"))
            lines.append(f"{uid}|{text}|{text}|{who}|{language}")
    write_metadata(folder, lines)
    return folder


def write_yaml(path: str, raw: dict) -> str:
    with open(path, "w", encoding="utf-8") as f:
        yaml.safe_dump(raw, f)
    return path


def base_config(languages):
    """configs/tiny.yaml with one length bucket, short decodes and no validation."""
    with open(os.path.join(REPO, "configs", "tiny.yaml"), encoding="utf-8") as f:
        raw = yaml.safe_load(f)
    raw["data"].update(num_buckets=1, val_fraction=0.2, languages=languages)
    raw["model"].update(max_decoder_steps=20)
    raw["training"].update(validate_every_steps=1000, checkpoint_every_steps=1000)
    return raw


def run(*args):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="")
    return subprocess.Popen([sys.executable, os.path.join(REPO, "train_main.py"), *args],
                            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)


def finish(proc) -> str:
    out, _ = proc.communicate(timeout=600)
    assert proc.returncode == 0, out[-4000:]
    return out


def checkpoint_graph(prefix: str):
    """(reader, object graph) of a checkpoint."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from tensorflow.core.protobuf import \
        trackable_object_graph_pb2  # pylint: disable=import-outside-toplevel
    reader = tf.train.load_checkpoint(prefix)
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    return reader, graph


def model_weights(prefix: str) -> dict:
    """{path below the model, e.g. text_encoder/conv_0/conv/_kernel: array}. A variable
    the optimizer also tracks is stored under the optimizer's key, so paths are found by walking
    the object graph from `model`."""
    reader, graph = checkpoint_graph(prefix)
    weights, todo = {}, [("", next(c.node_id for c in graph.nodes[0].children
                                   if c.local_name == "model"))]
    while todo:
        path, node_id = todo.pop()
        for attribute in graph.nodes[node_id].attributes:
            if attribute.name == "VARIABLE_VALUE":
                weights[path] = reader.get_tensor(attribute.checkpoint_key)
        todo += [(f"{path}/{c.local_name}".lstrip("/"), c.node_id)
                 for c in graph.nodes[node_id].children]
    return weights


def file_hashes(directory: str) -> dict:
    hashes = {}
    for path in sorted(glob.glob(os.path.join(directory, "**"), recursive=True)):
        if os.path.isfile(path):
            with open(path, "rb") as f:
                hashes[os.path.relpath(path, directory)] = hashlib.sha256(f.read()).hexdigest()
    return hashes


@pytest.mark.slow
class FineTuneTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        anna = speaker_folder(cls.tmp, "anna", {"en"})
        ben = speaker_folder(cls.tmp, "ben", {"en", "de", "es"})
        cls.base, cls.ft, cls.scratch = (os.path.join(cls.tmp, n) for n in ("base", "ft", "scr"))
        # The fine-tuning config sets no model field: the base run's config.yaml decides.
        training = dict(validate_every_steps=STEPS, checkpoint_every_steps=STEPS,
                        log_every_steps=5, learning_rate=2e-3, warmup_steps=5, precision="fp32",
                        xla=False)
        data = dict(num_buckets=1, val_fraction=0.2, batch_size=4, min_audio_seconds=0.3,
                    max_audio_seconds=8.0, ref_min_seconds=1.0, ref_max_seconds=2.0)
        ft_yaml = write_yaml(os.path.join(cls.tmp, "ft.yaml"), {"data": data, "training": dict(
            training, freeze=list(FROZEN), pretrained_lr_scale=0.5)})
        scratch = base_config(["en", "de", "es"])
        scratch["data"].update(data)
        scratch["training"].update(training)
        # The base run on anna and the from-scratch run on ben share the two cores.
        base_proc = run("--config", write_yaml(os.path.join(cls.tmp, "base.yaml"),
                                               base_config(["en"])),
                        "--train-data", anna, "--checkpoint-dir", cls.base,
                        "--max-steps", str(BASE_STEPS))
        scratch_proc = run("--config", write_yaml(os.path.join(cls.tmp, "scratch.yaml"), scratch),
                           "--train-data", ben, "--checkpoint-dir", cls.scratch,
                           "--max-steps", str(STEPS))
        finish(base_proc)
        cls.source_files = file_hashes(cls.base)
        cls.log = finish(run("--config", ft_yaml, "--init-from", cls.base, "--train-data", ben,
                             "--checkpoint-dir", cls.ft, "--max-steps", str(STEPS)))
        finish(scratch_proc)
        cls.ft_checkpoint = os.path.join(cls.ft, f"ckpt-{STEPS}")
        cls.source = model_weights(os.path.join(cls.base, f"ckpt-{BASE_STEPS}"))
        cls.tuned = model_weights(cls.ft_checkpoint)
        cls.optimizer_names = {a.full_name for node in checkpoint_graph(cls.ft_checkpoint)[1].nodes
                               for a in node.attributes if a.full_name.startswith("adam_w/")}

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def paths(self, part):
        return sorted(p for p in self.source if p.startswith(f"{part}/"))

    def test_frozen_weights_are_unchanged_bit_for_bit(self):
        self.assertEqual(self.source.keys(), self.tuned.keys())
        for part in FROZEN:
            paths = self.paths(part)
            self.assertGreater(len(paths), 5, part)
            for path in paths:
                old, new = self.source[path], self.tuned[path]
                if path in TABLES:  # the source rows; the new rows train (below)
                    new = new[: len(old)]
                self.assertEqual(old.tobytes(), new.tobytes(), path)
        changed = [p for p in self.paths("decoder")
                   if not np.array_equal(self.source[p], self.tuned[p])]
        self.assertGreater(len(changed), 5, "the decoder did not train")

    def test_frozen_variables_have_no_optimizer_slots(self):
        slots = {name.rsplit("_", 1)[0] for name in self.optimizer_names
                 if name.endswith(("_momentum", "_velocity"))}
        self.assertIn("adam_w/xtts_decoder_prenet_dense_0_kernel", slots)
        frozen = {s for s in slots if s.startswith(tuple(f"adam_w/xtts_{p}_" for p in FROZEN))}
        # Only the embedding tables that gained rows for new characters and languages.
        self.assertEqual(frozen, {"adam_w/xtts_text_encoder_token_embedding_embeddings",
                                  "adam_w/xtts_text_encoder_language_embedding_embeddings"})

    def test_new_characters_and_languages_get_rows_of_their_own(self):
        source_vocab = Tokenizer.load(os.path.join(self.base, "vocab.json")).symbols
        vocab = Tokenizer.load(os.path.join(self.ft, "vocab.json")).symbols
        self.assertEqual(vocab[: len(source_vocab)], source_vocab)
        self.assertTrue({"ß", "ñ", "ü"} <= set(vocab[len(source_vocab):]), vocab)
        config = XTTSConfig.from_yaml(os.path.join(self.ft, "config.yaml"))
        self.assertEqual(config.data.languages, ["en", "de", "es"])
        self.assertEqual(config.model.d_model, 32)  # tiny's, not the default 256
        old, new = self.source[LANGUAGE_TABLE], self.tuned[LANGUAGE_TABLE]
        self.assertEqual(new.shape, (3, old.shape[1]))
        self.assertFalse(np.allclose(new[1:], old.mean(0)), "new language rows did not train")
        self.assertIn("languages en kept with their ids, de, es added for the new data", self.log)
        self.assertRegex(self.log, r"added \d+ the source never saw: .*'ß'")
        with open(os.path.join(self.ft, "model_info.json"), encoding="utf-8") as f:
            record = json.load(f)["init_from"]
        self.assertEqual(record["checkpoint"], os.path.join(self.base, f"ckpt-{BASE_STEPS}"))
        self.assertEqual(record["added_languages"], ["de", "es"])

    def test_fresh_optimizer_at_step_zero_in_its_own_directory(self):
        self.assertIn(f"Initialised from {self.base}/ckpt-{BASE_STEPS} (step {BASE_STEPS} of "
                      f"that run): model weights only; fresh optimizer, step 0", self.log)
        reader, _ = checkpoint_graph(self.ft_checkpoint)
        self.assertEqual(int(reader.get_tensor("optimizer/_iterations/.ATTRIBUTES/"
                                               "VARIABLE_VALUE")), STEPS)

    def test_the_source_run_is_unchanged(self):
        self.assertEqual(file_hashes(self.base), self.source_files)

    def test_fine_tuned_validation_loss_beats_from_scratch(self):
        losses = {}
        for name, directory in (("fine-tuned", self.ft), ("from scratch", self.scratch)):
            with open(os.path.join(directory, "model_info.json"), encoding="utf-8") as f:
                info = json.load(f)
            self.assertEqual(info["best_step"], STEPS)
            losses[name] = info["last_val_loss"]
        self.assertLess(losses["fine-tuned"], losses["from scratch"], losses)


class WarmStartArgumentsTest(unittest.TestCase):
    """What --init-from decides before TensorFlow: a fake source run (config.yaml, vocab.json,
    an index naming ckpt-5) is enough."""

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.source = os.path.join(cls.tmp, "source")
        os.makedirs(cls.source)
        config = XTTSConfig.from_dict(base_config(["en"]))
        config.to_yaml(os.path.join(cls.source, "config.yaml"))
        Tokenizer.build(["hello"], "multilingual").save(os.path.join(cls.source, "vocab.json"))
        with open(os.path.join(cls.source, "checkpoint"), "w", encoding="utf-8") as f:
            f.write('model_checkpoint_path: "ckpt-5"\n')
        open(os.path.join(cls.source, "ckpt-5.index"), "wb").close()
        cls.data = speaker_folder(cls.tmp, "ben", {"en", "de", "es"})

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def yaml(self, name, raw):
        return write_yaml(os.path.join(self.tmp, name), raw)

    def fails_before_tensorflow(self, *args, expect):
        proc = _train_main("--train-data", self.data, *args)
        self.assertEqual(proc.returncode, 2, proc.stderr[-2000:])
        self.assertIn(expect, proc.stderr)
        self.assertEqual(len(proc.stderr.strip().splitlines()), 1, proc.stderr)
        self.assertIn("tensorflow imported: False", proc.stdout)
        return proc.stderr

    def test_argument_mistakes(self):
        config = self.yaml("other.yaml", {"model": {"d_model": 64, "dropout": 0.0},
                                          "data": {"n_mels": 80}})
        run_dir = os.path.join(self.tmp, "run")
        error = self.fails_before_tensorflow(
            "--config", config, "--init-from", self.source, "--checkpoint-dir", run_dir,
            expect=f"sets fields that define the model to other values than {self.source}/"
                   f"config.yaml, the model this run starts from: data.n_mels: 80 (source: 40); "
                   f"model.d_model: 64 (source: 32)")
        self.assertNotIn("dropout", error)  # not a field that defines the model
        self.fails_before_tensorflow("--config", "configs/finetune.yaml", "--init-from",
                                     self.source, "--checkpoint-dir", self.source,
                                     expect="is the run in --checkpoint-dir")
        self.fails_before_tensorflow("--config", "configs/finetune.yaml", "--init-from",
                                     self.source, "--resume-from", self.source,
                                     "--checkpoint-dir", run_dir,
                                     expect=f"A warm start and a resume contradict each other: "
                                            f"a warm start begins a new run from another run's "
                                            f"weights, a resume continues a run from its own "
                                            f"checkpoint. Ask for one of them. (--init-from "
                                            f"{self.source} asks for a warm start, --resume-from "
                                            f"{self.source} for a resume.)")
        missing = os.path.join(self.tmp, "nowhere")
        self.fails_before_tensorflow("--config", "configs/finetune.yaml", "--init-from", missing,
                                     "--checkpoint-dir", run_dir,
                                     expect=f"The warm-start source {missing} does not exist")
        self.assertFalse(os.path.exists(run_dir))

    def test_the_library_names_the_source_and_the_command_its_flag(self):
        """locate_source is reached from train_main.py and from XTTSTrainer(init_from=...): its
        errors name the path; train_main.py adds --init-from."""
        empty = os.path.join(self.tmp, "empty_run")
        os.makedirs(empty, exist_ok=True)
        with self.assertRaises(SourceRunError) as error:
            locate_source(empty)
        library = str(error.exception)
        self.assertIn(f"The warm-start source {empty} holds no checkpoint", library)
        self.assertNotIn("--", library)
        command = self.fails_before_tensorflow(
            "--config", "configs/finetune.yaml", "--init-from", empty, "--checkpoint-dir",
            os.path.join(self.tmp, "run_from_empty"), expect=library)
        self.assertIn(f"{library} (--init-from {empty})", command)

    def test_config_takes_the_model_and_extends_the_languages(self):
        path = self.yaml("ft.yaml", {"model": {"dropout": 0.0}, "data": {"batch_size": 2}})
        source = locate_source(os.path.join(self.source, "ckpt-5.index"))
        self.assertEqual((source.directory, source.checkpoint),
                         (self.source, os.path.join(self.source, "ckpt-5")))
        config = warm_start_config(XTTSConfig.from_yaml(path), path, source, self.data, None)
        self.assertEqual((config.model.d_model, config.model.max_decoder_steps), (32, 20))
        self.assertEqual(config.model.dropout, 0.0)  # set by the file: not the source's 0.1
        self.assertEqual((config.data.n_mels, config.data.batch_size), (40, 2))
        self.assertEqual(config.data.languages, ["en", "de", "es"])
        # A warm-started run continued without --init-from takes its own config.yaml.
        run_dir = os.path.join(self.tmp, "continued")
        os.makedirs(run_dir)
        config.to_yaml(os.path.join(run_dir, "config.yaml"))
        source.tokenizer.save(os.path.join(run_dir, "vocab.json"))
        self.assertIsNone(continued_run(run_dir))
        update_model_info(run_dir, init_from={"checkpoint": "x"})
        again = warm_start_config(XTTSConfig.from_yaml(path), path, continued_run(run_dir),
                                  self.data, None)
        self.assertEqual(again.to_dict(), config.to_dict())


if __name__ == "__main__":
    unittest.main()
