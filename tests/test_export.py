"""SavedModel export: in-graph tokenizer, signatures, fresh-process round trip against the
synthesizer (Griffin-Lim, and HiFi-GAN with a `vocode` signature), TF Serving requests, the
streaming signatures streaming in a fresh process like the checkpoint, versioning and
models.config."""

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
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from myxtts.data.text import Tokenizer, clean_text
from myxtts.inference.checkpoint_loading import LoadedCheckpoint
from myxtts.exporters.serving_graph import ServingModule
from myxtts.exporters.tf_serving import export_tf_serving
from myxtts.inference.synthesizer import Synthesizer
from myxtts.inference.text_graph import InGraphTokenizer
from myxtts.inference.vocoding import load_vocoder
from myxtts.models.xtts import DecodeState, XTTSModel
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, REFERENCE_AUDIO,
                                     REPO, make_checkpoint, shared_vocoder_checkpoint,
                                     tiny_inference_config)

# Trains or exports a model: outside the fast tier (pytest -m "not slow", README).
pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
TEXT = "Hello there, World!"
SIGNATURES = {
    "serving_default": ["text", "language", "reference_mel", "reference_lengths"],
    "synthesize_latents": ["text", "language", "speaker_latents"],
    "synthesize_tokens": ["tokens", "token_lengths", "language_ids", "speaker_latents"],
    "speaker_latents": ["reference_mel", "reference_lengths"],
    "tokenize": ["text", "language"],
    "reference_mel": ["audio", "audio_lengths"],
    "decode_start": ["tokens", "token_lengths", "language_ids", "speaker_latents"],
    "decode_steps": ["steps", "step", "frames", "done", "caches_0_0", "memory_0_1_0"],
    "postnet_window": ["mel_before"],
    "postnet_window_adapted": ["mel_before", "postnet_weights"],
    "vocode_window": ["mel", "first_frame"],
    "streaming_info": [],
}
STREAMED_TEXT = "Hello there. How are you?"


class ExporterRegistryTest(unittest.TestCase):
    def test_formats_resolve_to_their_exporter(self):
        from myxtts.exporters.registry import exporter, formats  # pylint: disable=import-outside-toplevel
        from myxtts.exporters.edge import export_onnx, export_tflite  # pylint: disable=import-outside-toplevel
        self.assertEqual(formats(), ["onnx", "tf_serving", "tflite"])
        self.assertIs(exporter("tf_serving"), export_tf_serving)
        self.assertIs(exporter("tflite"), export_tflite)
        self.assertIs(exporter("onnx"), export_onnx)
        with self.assertRaisesRegex(KeyError, "Unknown export format 'coreml'; known: onnx, "
                                              "tf_serving, tflite"):
            exporter("coreml")


class InGraphTokenizerTest(unittest.TestCase):
    """tf.strings front end == Tokenizer.encode(clean_text(...)) on texts it covers."""

    TEXTS = ["Hello, World!", "  \u201cQuoted\u201d\ttext \u2014 with dashes\u2026  ",
             "Mr. Smith and DR. Who, etc. vs. the Rev. Jones",
             "U\u0308ber cafe\u0301 an\u0303o Stra\u00dfe",  # NFD spellings
             "\u00dcBER Caf\u00e9 A\u00d1O", "\ufb01ne caf\u00e9 na\u00efve",
             "\u00d6L\u00a0und\u2002mehr\u3000Zeilen\nUmbruch", "\u039f\u0394\u039f\u03a3"]
    LANGUAGES = ["en", "de", "es"]

    def test_ids_equal_python_tokenizer_for_every_cleaner(self):
        for cleaner in ("basic", "english", "multilingual"):
            vocab_texts = [clean_text(t, cleaner, "de") for t in self.TEXTS]
            tokenizer = Tokenizer.build(vocab_texts + ["\u00e4\u00f6\u00fc\u00df\u00f1"],
                                        cleaner)
            graph = InGraphTokenizer(tokenizer, self.LANGUAGES, max_tokens=300)
            for language in ("en", "de"):
                tokens, lengths, ids = graph(self.TEXTS, [language] * len(self.TEXTS))
                self.assertEqual(ids.numpy().tolist(),
                                 [self.LANGUAGES.index(language)] * len(self.TEXTS))
                for i, text in enumerate(self.TEXTS):
                    with self.subTest(cleaner=cleaner, language=language, text=text):
                        want = tokenizer.encode(clean_text(text, cleaner, language))
                        self.assertEqual(tokens[i, :lengths[i]].numpy().tolist(), want)
                        self.assertTrue(np.all(tokens[i, lengths[i]:].numpy() == 0))

    NUMBER_TEXTS = ["In 1984 he paid $3.50 for 2 books.", "The 21st of May, 2023, at 7 pm.",
                    "It rose 12.5% to 1,234,567 units, then 40 % more.",
                    "\u00a320 and $1 and $0.01 and $5 and $1,000.05 and $.5.",
                    "He was 101 in 1900, 2005, 2050, 1100, 2099, 0999 and 2100.",
                    "The 1st, 2nd, 3rd, 4th, 11th, 12th, 20th, 22nd, 100th and 101st.",
                    "0 and 00 and 3.14159 and 10.05 and 999999999999999999.",
                    "Call 555-0199, or 2,50 or 1,0000 or 12,345,678,901; Dr. No at 3:45."]

    def test_english_numbers_give_the_python_tokens(self):
        for cleaner in ("english", "multilingual"):
            cleaned = [clean_text(t, cleaner, "en") for t in self.NUMBER_TEXTS]
            tokenizer = Tokenizer.build(cleaned, cleaner)
            self.assertFalse(any(c.isdigit() for c in tokenizer.symbols[1:]), cleaner)
            graph = InGraphTokenizer(tokenizer, self.LANGUAGES, max_tokens=1000)
            tokens, lengths, _ = graph(self.NUMBER_TEXTS, ["en"] * len(self.NUMBER_TEXTS))
            for i, text in enumerate(self.NUMBER_TEXTS):
                with self.subTest(cleaner=cleaner, text=text):
                    self.assertEqual(tokenizer.decode(tokens[i, :lengths[i]].numpy().tolist()),
                                     cleaned[i])
                    self.assertEqual(tokens[i, :lengths[i]].numpy().tolist(),
                                     tokenizer.encode(cleaned[i]))

    def test_rejects_what_the_graph_cannot_clean(self):
        tokenizer = Tokenizer.build(["hello"], "multilingual")
        graph = InGraphTokenizer(tokenizer, self.LANGUAGES, max_tokens=8)
        cases = [(["R\u00f8d"], ["en"], "outside the model's vocabulary"),
                 (["Hello"], ["fr"], "Unknown language; this model knows en, de, es"),
                 (["  "], ["en"], "empty after cleaning"),
                 (["hello hello"], ["en"], "longer than the model's 8 tokens"),
                 # more digits than int64 holds stay digits (Python would spell them out)
                 (["hello 1234567890123456789"], ["en"], "outside the model's vocabulary")]
        for texts, languages, message in cases:
            with self.subTest(texts=texts, languages=languages):
                with self.assertRaisesRegex(tf.errors.InvalidArgumentError, message):
                    graph(texts, languages)


@pytest.mark.slow
class PhonemeModelSignaturesTest(unittest.TestCase):
    """espeak-ng cannot run in a graph: phoneme models serve token ids (and speakers) only."""

    def test_text_signatures_are_left_out_and_default_takes_tokens(self):
        config = tiny_inference_config("unused")
        tokenizer = Tokenizer(list("abc"), "multilingual", use_phonemes=True)
        model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                          config.data.n_mels)
        module = ServingModule(LoadedCheckpoint("", "", config, tokenizer, model, {}),
                               max_decoder_steps=3, griffin_lim_iterations=2, assets={})
        signatures = module.signatures()
        self.assertEqual(sorted(signatures), ["decode_start", "decode_steps", "postnet_window",
                                              "postnet_window_adapted",
                                              "reference_mel", "serving_default",
                                              "speaker_latents", "streaming_info",
                                              "synthesize_tokens", "vocode_window"])
        latents = tf.zeros([1, config.model.num_speaker_latents, config.model.d_model])
        out = signatures["serving_default"](tokens=tf.constant([[1, 2, 3]]),
                                            token_lengths=tf.constant([3]),
                                            language_ids=tf.constant([0]),
                                            speaker_latents=latents)
        self.assertEqual(sorted(out), sorted(["waveform", "waveform_lengths", "mel",
                                              "mel_lengths"]))
        self.assertEqual(int(out["mel_lengths"][0]), out["mel"].shape[1])
        self.assertEqual(out["mel"].shape[2], config.data.n_mels)


def _served(overrides: dict):
    """(config, model, ServingModule) of a tiny inference config with `overrides` (dotted
    keys); the module's signatures are made when a test asks, so it may change the model's
    weights first."""
    tf.random.set_seed(0)
    config = tiny_inference_config("unused").override(overrides, source="test")
    tokenizer = Tokenizer(list("abc"), "basic")
    model = XTTSModel(config.model, tokenizer.vocab_size, len(config.data.languages),
                      config.data.n_mels)
    return config, model, ServingModule(LoadedCheckpoint("", "", config, tokenizer, model, {}),
                                        max_decoder_steps=6, griffin_lim_iterations=2,
                                        assets={})


def _latents_and_tokens(config, signatures):
    """Speaker latents of a random reference, from the served speaker_latents, and the token
    inputs of a three-token sentence."""
    ref = tf.random.stateless_normal([1, 30, config.data.n_mels], [1, 2], -2.0)
    latents = signatures["speaker_latents"](
        reference_mel=ref, reference_lengths=tf.constant([30]))["speaker_latents"]
    return latents, dict(tokens=tf.constant([[1, 2, 3]]), token_lengths=tf.constant([3]),
                         language_ids=tf.constant([0]))


class ReferenceSpectrumSignaturesTest(unittest.TestCase):
    """A model.reference_spectrum model serves its extra latent row through the signatures."""

    def test_latents_carry_the_spectrum_row_and_the_decode_equals_the_model(self):
        config, model, module = _served({"model.reference_spectrum": True,
                                         "model.d_model": 48})
        signatures = module.signatures()
        latents, tokens = _latents_and_tokens(config, signatures)
        self.assertEqual(latents.shape, (1, config.model.num_speaker_latents + 1,
                                         config.model.d_model))
        served = signatures["synthesize_tokens"](speaker_latents=latents, **tokens)
        own = model.generate(*tokens.values(), latents, max_steps=6)
        length = int(own["mel_lengths"][0])
        self.assertEqual(int(served["mel_lengths"][0]), length)
        np.testing.assert_allclose(served["mel"][0, :length], own["mel"][0, :length], atol=1e-4)

    def test_a_voice_norms_model_streams_through_the_decode_signatures(self):
        config, model, module = _served({"model.voice_norms": True})
        kernel = model.decoder.voice_norms.kernel
        kernel.assign(tf.random.stateless_normal(kernel.shape, [3, 4], stddev=0.3))
        signatures = module.signatures()
        latents, tokens = _latents_and_tokens(config, signatures)
        state = signatures["decode_start"](speaker_latents=latents, **tokens)
        self.assertIn("norms_0", state)
        state = signatures["decode_steps"](steps=tf.constant(6), **state)
        own = model.decode_steps(model.start_decode(*tokens.values(), latents, 6), 6)
        np.testing.assert_allclose(state["frames"], own.frames, atol=1e-4)


def _assert_served_decode_is_the_models(test, overrides, extra_rows: int, state_key: str):
    """A model with `overrides` serves latents of num_speaker_latents + `extra_rows` rows, a
    state holding `state_key`, and the model's own mel and frames through synthesize_tokens and
    through decode_steps driven 2 steps a call; returns (model, its whole decode's state, the
    latents, the token inputs, the signatures)."""
    config, model, module = _served(overrides)
    signatures = module.signatures()
    latents, tokens = _latents_and_tokens(config, signatures)
    test.assertEqual(latents.shape, (1, config.model.num_speaker_latents + extra_rows,
                                     config.model.d_model))
    served = signatures["synthesize_tokens"](speaker_latents=latents, **tokens)
    own = model.generate(*tokens.values(), latents, max_steps=6)
    np.testing.assert_allclose(served["mel"], own["mel"], atol=1e-4)
    state = signatures["decode_start"](speaker_latents=latents, **tokens)
    test.assertIn(state_key, state)
    for _ in range(3):
        state = signatures["decode_steps"](steps=tf.constant(2), **state)
    whole = model.decode_steps(model.start_decode(*tokens.values(), latents, 6), 6)
    np.testing.assert_allclose(state["frames"], whole.frames, atol=1e-4)
    return model, whole, latents, tokens, signatures


class ReferenceStatisticsSignaturesTest(unittest.TestCase):
    """A model.reference_statistics model serves its spread row, and its mapped decode, through
    the signatures: the whole decode and the decode driven a few steps a call (as a streaming
    client drives it) give the model's own frames."""

    def test_the_served_decode_maps_the_frames_as_the_model_does(self):
        model, whole, latents, tokens, _ = _assert_served_decode_is_the_models(
            self, {"model.reference_spectrum": True, "model.reference_statistics": True,
                   "model.d_model": 48}, 2, "statistics_3")
        unmapped = _served({"model.reference_spectrum": True, "model.d_model": 48})[1]
        unmapped.set_weights(model.get_weights())
        plain = unmapped.decode_steps(unmapped.start_decode(*tokens.values(), latents[:, :-1],
                                                            6), 6)
        self.assertGreater(float(tf.reduce_max(tf.abs(plain.frames - whole.frames))), 1e-2)


class ReferenceMatchingSignaturesTest(unittest.TestCase):
    """A model.reference_matching model serves its frame rows, and its matched decode, through
    the signatures: the whole decode and the decode driven a few steps a call give the model's
    own frames."""

    def test_the_served_postnet_matches_the_frames_as_the_model_does(self):
        from myxtts.config import REFERENCE_MATCHING_FRAMES
        model, whole, latents, _, signatures = _assert_served_decode_is_the_models(
            self, {"model.reference_spectrum": True, "model.reference_matching": 0.5,
                   "model.d_model": 48}, 1 + REFERENCE_MATCHING_FRAMES, "matching_0")
        self.assertEqual(sorted(spec.name for spec in tf.nest.flatten(
            signatures["postnet_window"].structured_input_signature)),
            ["mel_before", "speaker_latents"])
        frames = int(whole.step) * model.reduction_factor
        mel_before = tf.reshape(tf.transpose(whole.frames, [1, 0, 2]),
                                [1, -1, model.n_mels])[:, :frames]
        served = signatures["postnet_window"](mel_before=mel_before, speaker_latents=latents)
        np.testing.assert_allclose(served["mel"], model.decoded(whole)["mel"][:, :frames],
                                   atol=1e-4)
        unmatched = model.postnet(mel_before, tf.ones([1, frames], tf.bool))
        self.assertGreater(float(tf.reduce_max(tf.abs(served["mel"] - unmatched))), 1e-2)


def _run(cmd, **kwargs):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)


@pytest.mark.slow
class ExportRoundTripTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-export-test-")
        cls.checkpoint_dir = os.path.join(cls.tmp, "run")
        make_checkpoint(cls.checkpoint_dir)
        cls.export_dir = os.path.join(cls.tmp, "models", "myxtts")
        cls.result = export_tf_serving(cls.checkpoint_dir, cls.export_dir,
                                        max_decoder_steps=MAX_DECODER_STEPS,
                                        griffin_lim_iterations=GRIFFIN_LIM_ITERS)
        cls.synth = Synthesizer.from_checkpoint_dir(cls.checkpoint_dir,
                                                    max_decoder_steps=MAX_DECODER_STEPS,
                                                    griffin_lim_iterations=GRIFFIN_LIM_ITERS)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def test_first_export_is_version_1_with_assets(self):
        self.assertEqual(self.result.version, 1)
        self.assertEqual(self.result.path, os.path.join(self.export_dir, "1"))
        self.assertEqual(sorted(self.result.signatures), sorted(SIGNATURES))
        self.assertEqual(os.listdir(self.export_dir), ["1"])  # no temporary folder left
        assets = os.path.join(self.result.path, "assets")
        self.assertEqual(Tokenizer.load(os.path.join(assets, "vocab.json")), self.synth.tokenizer)
        with open(os.path.join(assets, "model_info.json"), encoding="utf-8") as f:
            info = json.load(f)
        self.assertEqual(info["export"]["max_decoder_steps"], MAX_DECODER_STEPS)
        self.assertTrue(info["export"]["checkpoint"].endswith("ckpt-1"))
        self.assertTrue(os.path.isfile(os.path.join(assets, "config.yaml")))

    def test_saved_model_cli_lists_the_signatures(self):
        shown = _run(["saved_model_cli", "show", "--dir", self.result.path, "--all"])
        self.assertEqual(shown.returncode, 0, shown.stderr[-2000:])
        for signature, inputs in SIGNATURES.items():
            self.assertIn(f"signature_def['{signature}']", shown.stdout)
            for name in inputs:
                self.assertIn(f"inputs['{name}']", shown.stdout)

    def _inputs(self):
        synth = self.synth
        ref_mel = synth.reference_mel(REFERENCE_AUDIO)
        ref_audio = sf.read(REFERENCE_AUDIO, dtype="float32")[0]  # 16 kHz mono, as tiny.yaml
        ref_audio = ref_audio[: synth.reference_samples]
        latents = synth.speaker_latents_from_mel(ref_mel).numpy()
        ids = synth.encode(TEXT, "en")
        text = {"text": np.array([TEXT]), "language": np.array(["en"])}
        reference = {"reference_mel": ref_mel[None], "reference_lengths":
                     np.array([len(ref_mel)], np.int32)}
        signatures = {
            "serving_default": {**text, **reference},
            "synthesize_latents": {**text, "speaker_latents": latents},
            "synthesize_tokens": {"tokens": np.array([ids], np.int32),
                                  "token_lengths": np.array([len(ids)], np.int32),
                                  "language_ids": np.array([0], np.int32),
                                  "speaker_latents": latents},
            "speaker_latents": reference,
            "tokenize": text,
            "reference_mel": {"audio": ref_audio[None],
                              "audio_lengths": np.array([len(ref_audio)], np.int32)},
            "decode_start": {"tokens": np.array([ids], np.int32),
                             "token_lengths": np.array([len(ids)], np.int32),
                             "language_ids": np.array([0], np.int32),
                             "speaker_latents": latents},
            "decode_steps": {**self._decode_state(ids, latents), "steps": np.int32(3)},
            "postnet_window": {"mel_before": np.zeros([1, 9, 40], np.float32) - 2.0},
            # an adapted voice's postnet: here the model's own weights, halved
            "postnet_window_adapted": {
                "mel_before": np.zeros([1, 9, 40], np.float32) - 2.0,
                "postnet_weights": 0.5 * np.concatenate(
                    [v.numpy().ravel() for v in synth.model.postnet.trainable_variables])},
            "vocode_window": {"mel": np.zeros([1, 9, 40], np.float32) - 2.0,
                              "first_frame": np.int32(5)},
        }
        return {f"{s}/{k}": v for s, inputs in signatures.items() for k, v in inputs.items()}

    def _decode_state(self, ids, latents):
        """A decode state after two steps, as named arrays (the decode_steps inputs)."""
        model = self.synth.model
        state = model.start_decode(np.array([ids], np.int32), np.array([len(ids)], np.int32),
                                   np.array([0], np.int32), latents, MAX_DECODER_STEPS)
        return {k: v.numpy() for k, v in model.decode_steps(state, 2).to_tensors().items()}

    def test_fresh_process_without_myxtts_matches_the_synthesizer(self):
        inputs_path = os.path.join(self.tmp, "inputs.npz")
        outputs_path = os.path.join(self.tmp, "outputs.npz")
        np.savez(inputs_path, **self._inputs())
        done = _run([sys.executable, os.path.join(HERE, "serving_runner.py"), self.result.path,
                     inputs_path, outputs_path], cwd=self.tmp)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        report = json.loads(done.stdout.strip().splitlines()[-1])
        self.assertFalse(report["myxtts_imported"])
        self.assertEqual(report["requests"], {name: [] for name, inputs in SIGNATURES.items()
                                              if inputs})
        self.assertEqual(report["assets"], ["config.yaml", "model_info.json", "vocab.json"])
        out = np.load(outputs_path, allow_pickle=False)

        synth = self.synth
        ref_mel = synth.reference_mel(REFERENCE_AUDIO)
        latents = synth.speaker_latents_from_mel(ref_mel)
        ids = synth.encode(TEXT, "en")  # one text, one decode (as the signatures)
        waveform, mel = synth.synthesize_tokens(ids, 0, latents)
        np.testing.assert_array_equal(out["tokenize/tokens"], [ids])
        np.testing.assert_array_equal(out["tokenize/token_lengths"], [len(ids)])
        np.testing.assert_allclose(out["reference_mel/reference_mel"][0], ref_mel, atol=1e-4)
        np.testing.assert_allclose(out["speaker_latents/speaker_latents"], latents.numpy(),
                                   atol=1e-4)
        # decode_steps: three more steps of the state, as the checkpoint's model runs them.
        state = synth.model.decode_steps(DecodeState.from_tensors(
            {k: tf.constant(v) for k, v in self._decode_state(ids, latents).items()}), 3)
        self.assertEqual(int(out["decode_steps/step"]), 5)
        np.testing.assert_allclose(out["decode_steps/frames"], state.frames.numpy(), atol=1e-4)
        frames = np.zeros([1, 9, 40], np.float32) - 2.0
        np.testing.assert_allclose(out["postnet_window/mel"],
                                   synth.model.postnet(frames, np.ones([1, 9], bool)), atol=1e-5)
        halved = [0.5 * v.numpy() for v in synth.model.postnet.trainable_variables]
        np.testing.assert_allclose(out["postnet_window_adapted/mel"],
                                   synth.model.postnet.stateless_call(
                                       halved, [], frames, np.ones([1, 9], bool))[0], atol=1e-5)
        expected_frames = min(MAX_DECODER_STEPS, -(-len(ids) * 12 // 2)) * 2
        self.assertEqual(mel.shape, (expected_frames, synth.config.data.n_mels))
        hop, win = synth.config.data.hop_length, synth.config.data.win_length
        for name in ("serving_default", "synthesize_latents", "synthesize_tokens"):
            with self.subTest(signature=name):
                np.testing.assert_array_equal(out[f"{name}/mel_lengths"], [len(mel)])
                np.testing.assert_allclose(out[f"{name}/mel"][0], mel, atol=1e-4)
                self.assertEqual(out[f"{name}/waveform"].dtype, np.float32)
                np.testing.assert_array_equal(out[f"{name}/waveform_lengths"],
                                              [(len(mel) - 1) * hop + win])
                # Griffin-Lim's 32 phase iterations amplify the mels' float-rounding
                # differences (< 1e-4) in a few samples: the same audio, to 50 dB.
                exported = out[f"{name}/waveform"][0]
                noise = np.sum((exported - waveform) ** 2) + 1e-20
                self.assertGreater(10 * np.log10(np.sum(waveform ** 2) / noise), 50)

    def test_fresh_process_runs_every_signature_with_a_vocoder(self):
        synth_mel = self.synth.synthesize_tokens(
            self.synth.encode(TEXT, "en"), 0,
            self.synth.speaker_latents_from_mel(self.synth.reference_mel(REFERENCE_AUDIO)))[1]
        exports = {}
        for generator, name in (("hifigan", "HiFi-GAN"), ("vocos", "Vocos")):
            with self.subTest(generator=generator):
                exports[generator] = self._export_with_vocoder(generator, name)
        # One fresh process (one TensorFlow start) runs every export, one after the other.
        done = _run([sys.executable, os.path.join(HERE, "serving_runner.py"),
                     *(path for export in exports.values() for path in export[1:])],
                    cwd=self.tmp)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        reports = done.stdout.strip().splitlines()[-len(exports):]
        for (generator, export), report in zip(exports.items(), reports):
            with self.subTest(generator=generator):
                self._check_vocoder_export(generator, export, json.loads(report), synth_mel)

    def _export_with_vocoder(self, generator, name):
        """Exports the checkpoint with the `generator` vocoder and writes the runner's inputs;
        returns (vocoder_dir, version path, inputs path, outputs path)."""
        vocoder_dir, _ = shared_vocoder_checkpoint(generator)
        with self.assertLogs("myxtts", "INFO") as logs:
            result = export_tf_serving(self.checkpoint_dir,
                                        os.path.join(self.tmp, generator, "myxtts"),
                                        max_decoder_steps=MAX_DECODER_STEPS,
                                        vocoder_dir=vocoder_dir)
        self.assertTrue(any(f"Vocoder: {name}" in line for line in logs.output), logs.output)
        self.assertEqual(sorted(result.signatures), sorted([*SIGNATURES, "vocode"]))
        inputs = {**self._inputs(), "vocode/mel": self.VOCODE_MEL,
                  "vocode/mel_lengths": self.VOCODE_LENGTHS}
        inputs_path = os.path.join(self.tmp, f"{generator}-inputs.npz")
        outputs_path = os.path.join(self.tmp, f"{generator}-outputs.npz")
        np.savez(inputs_path, **inputs)
        return vocoder_dir, result.path, inputs_path, outputs_path

    VOCODE_MEL = np.random.default_rng(3).normal(-2.5, 0.8, (2, 20, 40)).astype(np.float32)
    VOCODE_LENGTHS = np.array([20, 13], np.int32)

    def _check_vocoder_export(self, generator, export, report, synth_mel):
        vocoder_dir, version_path, _, outputs_path = export
        mel, lengths = self.VOCODE_MEL, self.VOCODE_LENGTHS
        self.assertFalse(report["myxtts_imported"])
        self.assertEqual(report["requests"], {s: [] for s in [*SIGNATURES, "vocode"]
                                              if s == "vocode" or SIGNATURES[s]})
        out = np.load(outputs_path, allow_pickle=False)

        vocoder = load_vocoder(vocoder_dir)
        waveform, _ = vocoder(mel, lengths)
        np.testing.assert_array_equal(out["vocode/waveform_lengths"], lengths * 256)
        np.testing.assert_allclose(out["vocode/waveform"], waveform.numpy(), atol=1e-5)
        self.assertTrue(np.all(out["vocode/waveform"][1, 13 * 256:] == 0))
        # The synthesis signatures: the acoustic model's mel (as with Griffin-Lim), the
        # vocoder's audio.
        for signature in ("serving_default", "synthesize_latents", "synthesize_tokens"):
            with self.subTest(signature=signature):
                np.testing.assert_allclose(out[f"{signature}/mel"][0], synth_mel, atol=1e-4)
                np.testing.assert_array_equal(out[f"{signature}/waveform_lengths"],
                                              [len(synth_mel) * 256])
                expected, _ = vocoder(out[f"{signature}/mel"], out[f"{signature}/mel_lengths"])
                np.testing.assert_allclose(out[f"{signature}/waveform"], expected.numpy(),
                                           atol=1e-5)
        if generator == "hifigan":
            self._check_streaming(version_path, vocoder)

    def _check_streaming(self, version_dir, vocoder):
        """The streaming signatures stream in a fresh process what the checkpoint streams."""
        synth = Synthesizer.from_checkpoint_dir(self.checkpoint_dir,
                                                max_decoder_steps=MAX_DECODER_STEPS,
                                                vocoder=vocoder)
        latents = synth.speaker_latents(REFERENCE_AUDIO)
        ids = synth.encode(TEXT, "en")
        inputs_path = os.path.join(self.tmp, "stream-inputs.npz")
        outputs_path = os.path.join(self.tmp, "stream-outputs.npz")
        np.savez(inputs_path, ids=np.array(ids, np.int32), latents=latents.numpy(),
                 text=np.array(STREAMED_TEXT))
        done = _run([sys.executable, "-m", "tests.children.stream_export",
                     os.path.dirname(version_dir), inputs_path, outputs_path], cwd=REPO)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        out = np.load(outputs_path, allow_pickle=False)
        chunks = list(synth.stream_sentences([ids], 0, latents, first_chunk_steps=2,
                                             chunk_steps=2))
        self.assertGreater(len(chunks), 2)
        np.testing.assert_array_equal(out["tokens_chunks"], [len(c) for c in chunks])
        np.testing.assert_allclose(out["tokens"], np.concatenate(chunks), atol=1e-4)
        text = np.concatenate(list(synth.stream(STREAMED_TEXT, "en", latents,
                                                first_chunk_steps=2, chunk_steps=2)))
        self.assertEqual(out["text"].shape, text.shape)
        np.testing.assert_allclose(out["text"], text, atol=1e-4)

    def test_new_exports_take_the_next_version_and_never_overwrite(self):
        export_dir = os.path.join(self.tmp, "versions", "myxtts")
        shutil.copytree(self.result.path, os.path.join(export_dir, "1"))
        os.makedirs(os.path.join(export_dir, "5"))
        with open(os.path.join(export_dir, "5", "keep.txt"), "w", encoding="utf-8") as f:
            f.write("version 5 belongs to someone else")
        fingerprint = os.path.join(export_dir, "1", "fingerprint.pb")
        with open(fingerprint, "rb") as f:
            before = f.read()
        config_path = os.path.join(self.tmp, "versions", "models.config")
        with open(config_path, "w", encoding="utf-8") as f:
            f.write('model_config_list { config { name: "other" base_path: "/models/other" '
                    'model_platform: "tensorflow" } }')

        result = export_tf_serving(self.checkpoint_dir, export_dir,
                                    max_decoder_steps=MAX_DECODER_STEPS,
                                    griffin_lim_iterations=GRIFFIN_LIM_ITERS)

        self.assertEqual(result.version, 6)
        self.assertEqual(sorted(os.listdir(export_dir)), ["1", "5", "6"])
        self.assertEqual(os.listdir(os.path.join(export_dir, "5")), ["keep.txt"])
        with open(fingerprint, "rb") as f:
            self.assertEqual(f.read(), before)
        self.assertTrue(os.path.isfile(os.path.join(export_dir, "6", "saved_model.pb")))
        self.assertEqual(result.models_config, config_path)
        parsed = model_server_config_pb2.ModelServerConfig()
        with open(config_path, encoding="utf-8") as f:
            text_format.Parse(f.read(), parsed)
        entries = {c.name: (c.base_path, c.model_platform)
                   for c in parsed.model_config_list.config}
        self.assertEqual(entries, {"other": ("/models/other", "tensorflow"),
                                   "myxtts": ("/models/myxtts", "tensorflow")})


if __name__ == "__main__":
    unittest.main()


def test_decode_rows_is_checked_before_anything_loads(tmp_path):
    # pylint: disable=import-outside-toplevel
    from myxtts.cli import UsageError
    from myxtts.export import main
    run = str(tmp_path)
    with pytest.raises(UsageError, match="--decode-rows is for --format tflite or onnx"):
        main(["--checkpoint-dir", run, "--decode-rows", "4"])
    with pytest.raises(UsageError, match="--decode-rows 0: give 1 to 16 rows"):
        main(["--format", "onnx", "--checkpoint-dir", run, "--decode-rows", "0"])
