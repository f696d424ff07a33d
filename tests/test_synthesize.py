"""Synthesis CLI: playable wavs (one text, a text file), saved mels, HiFi-GAN audio with
--vocoder-dir, --stream and --output - (WAV on standard output) equal to whole synthesis, and
the user errors (missing checkpoint, unknown language, unknown characters,
unreadable reference, unusable vocoder) as one paragraph on stderr with exit status 2 and no
traceback."""

import contextlib
import io
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import pytest
import soundfile as sf

from myxtts.inference.checkpoint_loading import CheckpointMismatchError, load_checkpoint
from myxtts.inference.synthesizer import Synthesizer
from myxtts.inference.vocoding import VocoderError, load_vocoder
from myxtts.synthesize import guarded_main
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, REFERENCE_AUDIO,
                                     REPO, make_checkpoint, shared_vocoder_checkpoint)

SAMPLE_RATE = 16000  # configs/tiny.yaml
N_MELS = 40


@pytest.mark.slow
class SynthesizeCliTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-synthesize-test-")
        cls.checkpoint_dir = os.path.join(cls.tmp, "run")
        _, cls.saved_weights = make_checkpoint(cls.checkpoint_dir)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def _args(self, *extra, reference=REFERENCE_AUDIO, checkpoint_dir=None):
        return ["--checkpoint-dir", checkpoint_dir or self.checkpoint_dir,
                "--reference-audio", reference, "--max-decoder-steps", str(MAX_DECODER_STEPS),
                "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS), *extra]

    def _in_process(self, *args, **kwargs):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
            code = guarded_main(self._args(*args, **kwargs))
        return code, stderr.getvalue()

    def _assert_playable(self, path):
        audio, rate = sf.read(path, dtype="float32")
        self.assertEqual(rate, SAMPLE_RATE)
        self.assertEqual(audio.ndim, 1)
        self.assertGreater(len(audio), 0)
        self.assertTrue(np.all(np.isfinite(audio)))
        self.assertGreater(float(np.max(np.abs(audio))), 0.0)

    def test_loaded_weights_are_the_saved_ones(self):
        loaded = load_checkpoint(self.checkpoint_dir)
        self.assertTrue(loaded.checkpoint_path.endswith("ckpt-1"))
        weights = loaded.model.get_weights()
        self.assertEqual(len(weights), len(self.saved_weights))
        for got, saved in zip(weights, self.saved_weights):
            np.testing.assert_array_equal(got, saved)

    def test_a_config_that_does_not_fit_the_checkpoint_is_refused(self):
        other = os.path.join(self.tmp, "other-config")
        shutil.copytree(self.checkpoint_dir, other)
        with open(os.path.join(other, "config.yaml"), encoding="utf-8") as f:
            config = f.read()
        with open(os.path.join(other, "config.yaml"), "w", encoding="utf-8") as f:
            f.write(config.replace("decoder_layers: 1", "decoder_layers: 2"))
        with self.assertRaisesRegex(CheckpointMismatchError, "does not fit the model"):
            load_checkpoint(other)

    def test_one_text_writes_a_wav_and_its_mel(self):
        output = os.path.join(self.tmp, "hello.wav")
        env = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
        done = subprocess.run(
            [sys.executable, "-m", "myxtts.synthesize",
             *self._args("--text", "Hi there.", "--language", "en", "--output", output,
                         "--save-mel")],
            capture_output=True, text=True, cwd=REPO, timeout=600, env=env)
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertIn("Griffin-Lim", done.stderr)  # the vocoder choice is logged
        for noise in ("E0000", "I0000", "absl::InitializeLog"):  # a quiet console
            self.assertNotIn(noise, done.stderr)
        self._assert_playable(output)
        mel = np.load(os.path.join(self.tmp, "hello.npy"), allow_pickle=False)
        # Decoding that stops at the --max-decoder-steps cap (tiny.yaml: 2 frames per step)
        # without a predicted end says so with the number of frames, and only then.
        capped = mel.shape[0] == MAX_DECODER_STEPS * 2
        self.assertEqual(f"decoding stopped at its cap of {mel.shape[0]} mel frames"
                         in done.stderr, capped, done.stderr[-2000:])
        self.assertEqual(mel.dtype, np.float32)
        self.assertEqual(mel.shape[1], N_MELS)
        self.assertEqual(len(sf.read(output)[0]), (mel.shape[0] - 1) * 256 + 512)

    def test_text_file_writes_one_wav_per_line_into_a_folder(self):
        lines = os.path.join(self.tmp, "lines.txt")
        with open(lines, "w", encoding="utf-8") as f:
            # Texts whose token counts pad to different lengths: one process decodes both.
            f.write("Hallo Welt.\n\n\u00dcber die Stra\u00dfe gehen die Kinder heute fr\u00fch "
                    "zur Schule und singen.\n")
        output = os.path.join(self.tmp, "many")
        code, stderr = self._in_process("--text-file", lines, "--language", "de",
                                        "--output", output)
        self.assertEqual(code, 0, stderr)
        self.assertEqual(sorted(os.listdir(output)), ["001.wav", "002.wav"])
        for name in ("001.wav", "002.wav"):
            self._assert_playable(os.path.join(output, name))

    def test_texts_of_different_lengths_in_one_process(self):
        synth = Synthesizer.from_checkpoint_dir(self.checkpoint_dir,
                                                max_decoder_steps=MAX_DECODER_STEPS)
        latents = synth.speaker_latents(REFERENCE_AUDIO)
        for text in ("Hi.", "In the beginning God created the heaven and the earth, and the "
                            "earth was without form.", "Go on."):
            waveform, mel = synth.synthesize(text, "en", latents)
            self.assertGreater(len(waveform), 0)
            self.assertEqual(mel.shape[1], N_MELS)

    def test_the_sentences_of_a_text_decoded_as_a_batch_equal_each_alone(self):
        synth = Synthesizer.from_checkpoint_dir(self.checkpoint_dir, max_decoder_steps=60,
                                                griffin_lim_iterations=GRIFFIN_LIM_ITERS)
        latents = synth.speaker_latents(REFERENCE_AUDIO)
        text = ("Go. In the beginning God created the heaven and the earth. And the earth was "
                "without form, and void. Let there be light.")
        sentences = synth.sentences(text, "en")
        language_id = synth.language_id("en")
        batch = synth.synthesize_batch(sentences, language_id, latents)
        alone = [synth.synthesize_detailed(ids, language_id, latents) for ids in sentences]
        # The rows end at different steps, so rows that ended wait in the batch for the rest.
        self.assertGreater(len({len(result.mel) for result in alone}), 2)
        for together, single in zip(batch, alone):
            self.assertEqual(together.mel.shape, single.mel.shape)
            self.assertEqual(together.ended_by_stop, single.ended_by_stop)
            np.testing.assert_allclose(together.mel, single.mel, atol=1e-4)
            np.testing.assert_allclose(together.alignment, single.alignment, atol=1e-4)
            # Griffin-Lim's momentum carries the mel's rounding into the phases: judged as the
            # issue of batched synthesis is, by the signal-to-noise ratio against the sentence
            # alone.
            self.assertEqual(together.waveform.shape, single.waveform.shape)
            self.assertGreater(_snr_db(together.waveform, single.waveform), 40.0)
        # `synthesize` speaks the batch's sentences in the text's order, pauses between them.
        waveform, mel = synth.synthesize(text, "en", latents)
        joined_waveform, joined_mel = synth.join_sentences(alone)
        self.assertGreater(_snr_db(waveform, joined_waveform), 40.0)
        np.testing.assert_allclose(mel, joined_mel, atol=1e-4)

    def test_missing_checkpoint_exits_2_without_traceback(self):
        missing = os.path.join(self.tmp, "nowhere")
        done = subprocess.run(
            [sys.executable, "-m", "myxtts.synthesize",
             *self._args("--text", "Hello.", "--output", os.path.join(self.tmp, "x.wav"),
                         checkpoint_dir=missing)],
            capture_output=True, text=True, cwd=REPO, timeout=600)
        self.assertEqual(done.returncode, 2)
        self.assertNotIn("Traceback", done.stderr)
        self.assertIn(f"error: --checkpoint-dir {missing} does not exist", done.stderr)

    def test_user_errors_are_one_paragraph(self):
        empty = os.path.join(self.tmp, "no-checkpoints")
        os.makedirs(empty, exist_ok=True)
        for name in ("config.yaml", "vocab.json"):
            shutil.copy(os.path.join(self.checkpoint_dir, name), empty)
        not_audio = os.path.join(self.tmp, "reference.wav")
        with open(not_audio, "w", encoding="utf-8") as f:
            f.write("this is not audio")
        out = os.path.join(self.tmp, "err.wav")
        cases = [
            ((("--text", "Hello.", "--output", out), {"checkpoint_dir": empty}),
             "holds no checkpoint yet"),
            ((("--text", "Hello.", "--output", out, "--checkpoint", "ckpt-99"), {}),
             r"No checkpoint 'ckpt-99' in .* \(--checkpoint-dir .*, --checkpoint ckpt-99: "),
            ((("--text", "Bonjour.", "--language", "fr", "--output", out), {}),
             "Unknown language 'fr': this model was trained with en, de, es .*Pass one of them "
             "to --language."),
            ((("--text", "Room 42 \u2603", "--language", "de", "--output", out), {}),
             "outside the model's saved vocabulary .*'2' '4' '\u2603'"),
            ((("--text", "Hello.", "--output", out), {"reference": not_audio}),
             f"Cannot read the reference audio {not_audio}"),
            ((("--text", "Hello.", "--output", out, "--stream", "--save-mel"), {}),
             "--save-mel needs whole synthesis"),
        ]
        for (args, kwargs), message in cases:
            with self.subTest(message=message):
                code, stderr = self._in_process(*args, **kwargs)
                self.assertEqual(code, 2)
                self.assertNotIn("Traceback", stderr)
                self.assertRegex(stderr, "error: .*" + message)
        self.assertFalse(os.path.exists(out))

    def test_vocoder_dir_gives_hifigan_audio_and_the_log_says_so(self):
        vocoder_dir, _ = shared_vocoder_checkpoint()
        output = os.path.join(self.tmp, "hifigan.wav")
        code, stderr = self._in_process("--text", "Hello there.", "--output", output,
                                        "--save-mel", "--vocoder-dir", vocoder_dir)
        self.assertEqual(code, 0, stderr)
        self.assertIn("Vocoder: HiFi-GAN", stderr)
        self.assertNotIn("Vocoder: Griffin-Lim", stderr)
        audio, _ = sf.read(output, dtype="float32")
        mel = np.load(os.path.join(self.tmp, "hifigan.npy"), allow_pickle=False)
        expected, lengths = load_vocoder(vocoder_dir)(mel[None], [len(mel)])
        self.assertEqual(int(lengths[0]), len(mel) * 256)  # frames x hop, not Griffin-Lim's
        np.testing.assert_allclose(audio, expected[0].numpy(), atol=2 / 32768)  # 16-bit PCM

    def test_stream_and_standard_output_give_the_whole_synthesis(self):
        vocoder_dir, _ = shared_vocoder_checkpoint()
        text = "Hello there. Go on."
        whole, streamed = (os.path.join(self.tmp, name) for name in ("whole.wav", "streamed.wav"))
        for output, extra in ((whole, ()), (streamed, ("--stream",))):
            stdout = io.StringIO()
            with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(stdout):
                code = guarded_main(self._args("--text", text, "--output", output,
                                               "--vocoder-dir", vocoder_dir, *extra))
            self.assertEqual(code, 0)
        self.assertIn("first audio after", stdout.getvalue())
        expected = sf.read(whole, dtype="float32")[0]
        np.testing.assert_allclose(sf.read(streamed, dtype="float32")[0], expected,
                                   atol=2 / 32768)
        # `--output -`, typed from the repository root with a relative reference path: one WAV
        # stream on standard output, the messages on standard error.
        done = subprocess.run(
            [sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir", self.checkpoint_dir,
             "--reference-audio", os.path.relpath(REFERENCE_AUDIO, REPO), "--max-decoder-steps",
             str(MAX_DECODER_STEPS), "--vocoder-dir", vocoder_dir, "--text", text,
             "--output", "-"], capture_output=True, cwd=REPO, timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-3000:])
        self.assertEqual(done.stdout[:4], b"RIFF")
        self.assertIn(b"first audio after", done.stderr)
        audio, rate = sf.read(io.BytesIO(done.stdout), dtype="float32")
        self.assertEqual(rate, SAMPLE_RATE)
        np.testing.assert_allclose(audio, expected, atol=2 / 32768)
        # A pipe cannot be rewound: its header keeps the unknown sizes players read to the end.
        self.assertEqual(struct.unpack("<I", done.stdout[40:44])[0], 0xFFFFFFFF)
        # `--output - > file.wav`: standard output is a seekable file, so the sizes are written
        # (soxi and every reader see the true length, not 0xFFFFFFFF's 37 hours).
        redirected = os.path.join(self.tmp, "redirected.wav")
        with open(redirected, "wb") as out:
            done = subprocess.run(
                [sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
                 self.checkpoint_dir, "--reference-audio", os.path.relpath(REFERENCE_AUDIO, REPO),
                 "--max-decoder-steps", str(MAX_DECODER_STEPS), "--vocoder-dir", vocoder_dir,
                 "--text", text, "--output", "-"], stdout=out, stderr=subprocess.PIPE, cwd=REPO,
                timeout=600)
        self.assertEqual(done.returncode, 0, done.stderr.decode()[-3000:])
        with open(redirected, "rb") as f:
            written = f.read()
        self.assertEqual(struct.unpack("<I", written[4:8])[0], len(written) - 8)
        self.assertEqual(struct.unpack("<I", written[40:44])[0], len(written) - 44)
        self.assertEqual(sf.info(redirected).frames, len(expected))

    def test_a_reader_that_closes_standard_output_early_ends_the_stream_quietly(self):
        # `... --output - | head -c 100`: the reader goes away after the header. Eight
        # sentences make ~160 kB of audio, more than a pipe holds, so the writer is still
        # writing when the reader has gone.
        text = " ".join(["Hello there. Go on. Come here. Sit down."] * 2)
        with subprocess.Popen(
                [sys.executable, "-m", "myxtts.synthesize", *self._args(
                    "--text", text, "--output", "-")],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO) as proc:
            self.assertEqual(proc.stdout.read(100)[:4], b"RIFF")
            proc.stdout.close()
            stderr = proc.stderr.read().decode()
            self.assertEqual(proc.wait(timeout=600), 0, stderr[-3000:])
        self.assertNotIn("Traceback", stderr)
        self.assertIn("standard output was closed by its reader", stderr)

    def test_unusable_vocoder_dirs_are_refused_in_one_paragraph(self):
        vocoder_dir, _ = shared_vocoder_checkpoint()
        out = os.path.join(self.tmp, "refused.wav")
        for args, message in ((("--vocoder-dir", self.checkpoint_dir),
                               "holds no vocoder generator"),
                              (("--vocoder-checkpoint", "best"),
                               "--vocoder-checkpoint needs --vocoder-dir")):
            with self.subTest(message=message):
                code, stderr = self._in_process("--text", "Hello.", "--output", out, *args)
                self.assertEqual(code, 2)
                self.assertNotIn("Traceback", stderr)
                self.assertRegex(stderr, "error: .*" + message)
        # The vocoder run passed where the acoustic model goes is named as what it is.
        code, stderr = self._in_process("--text", "Hello.", "--output", out,
                                        checkpoint_dir=vocoder_dir)
        self.assertEqual(code, 2)
        self.assertNotIn("Traceback", stderr)
        self.assertRegex(stderr, "error: .* is a vocoder run .*Pass it as --vocoder-dir")
        self.assertFalse(os.path.exists(out))
        other = load_checkpoint(self.checkpoint_dir).config.data
        other.hop_length = 200
        for args, message in (((self.tmp,), "has no config.yaml"),
                              ((vocoder_dir, None, "ckpt-7"), r"No vocoder checkpoint \(ckpt-7\)"),
                              ((vocoder_dir, other), r"data.hop_length 256 \(vocoder\) vs 200")):
            with self.subTest(message=message), self.assertRaisesRegex(VocoderError, message):
                load_vocoder(*args)

if __name__ == "__main__":
    unittest.main()


def _snr_db(signal: np.ndarray, reference: np.ndarray) -> float:
    """`signal` against `reference` (equal lengths), in dB."""
    noise = np.sum((signal - reference) ** 2)
    return float(10 * np.log10(np.sum(reference ** 2) / max(noise, 1e-20)))
