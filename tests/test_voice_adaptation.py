"""Adapting the model to a voice (myxtts.inference.voice_adaptation): a few steps of fine-tuning
on a reference recording and its transcript lower the model's loss on that recording, change what
it says in that voice, leave the checkpoint's weights in place until they are used and come back
with use_weights(None), and are the same every time; myxtts-synthesize --reference-text
--adapt-steps end to end, and its flag errors in one paragraph."""

import contextlib
import io
import os
import re
import subprocess
import sys

import numpy as np
import pytest
import soundfile as sf

from myxtts.inference.synthesizer import Synthesizer
from myxtts.synthesize import guarded_main
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, REFERENCE_AUDIO,
                                     REPO, make_checkpoint)

# samples/ljspeech_sample/metadata.csv, S003 (REFERENCE_AUDIO)
REFERENCE_TEXT = ("And God saw the light, that it was good: and God divided the light from the "
                  "darkness.")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("adaptation") / "run")
    make_checkpoint(directory)
    return directory


@pytest.fixture(scope="module")
def synth(run_dir):
    return Synthesizer.from_checkpoint_dir(run_dir, max_decoder_steps=MAX_DECODER_STEPS,
                                           griffin_lim_iterations=GRIFFIN_LIM_ITERS)


def _weights(synth):
    return [v.numpy() for v in synth.model.trainable_variables]


@pytest.mark.slow
def test_adapting_fits_the_reference_and_the_checkpoint_weights_come_back(synth):
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    checkpoint = _weights(synth)
    _, before = synth.synthesize("Hello there.", "en", latents)
    adapted = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                        steps=8, learning_rate=1e-3)
    assert len(adapted.losses) == 9
    assert adapted.losses[-1] < 0.9 * adapted.losses[0], adapted.losses
    # adapt leaves the model as it was; the adapted values differ from it
    for now, was in zip(_weights(synth), checkpoint):
        np.testing.assert_array_equal(now, was)
    assert any(not np.array_equal(a, c) for a, c in zip(adapted.values, checkpoint))
    # the speaker encoder reads no loss: the voice's latents are given
    encoder = {id(v) for v in synth.model.speaker_encoder.trainable_variables}
    for variable, value, was in zip(synth.model.trainable_variables, adapted.values, checkpoint):
        if id(variable) in encoder:
            np.testing.assert_array_equal(value, was)
    synth.use_weights(adapted)
    try:
        _, spoken = synth.synthesize("Hello there.", "en", latents)
        assert not np.allclose(spoken, before, atol=1e-3)
        # the same steps again give the same weights
        again = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                          steps=8, learning_rate=1e-3)
        for a, b in zip(again.values, adapted.values):
            np.testing.assert_array_equal(a, b)
    finally:
        synth.use_weights(None)
    for now, was in zip(_weights(synth), checkpoint):
        np.testing.assert_array_equal(now, was)
    np.testing.assert_array_equal(synth.synthesize("Hello there.", "en", latents)[1], before)


def _run(*argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = guarded_main(list(argv))
    return code, stdout.getvalue() + stderr.getvalue()


@pytest.mark.slow
def test_cli_adapts_to_the_reference_and_speaks_in_it(run_dir, tmp_path):
    # As a user types it from the repository root: relative paths, a new process.
    output = os.path.relpath(str(tmp_path / "hello.wav"), REPO)
    done = subprocess.run(
        [sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
         os.path.relpath(run_dir, REPO), "--reference-audio",
         "samples/ljspeech_sample/wavs/S003.flac", "--reference-text", REFERENCE_TEXT,
         "--adapt-steps", "3", "--text", "Hello there.", "--output", output,
         "--max-decoder-steps", str(MAX_DECODER_STEPS), "--griffin-lim-iters",
         str(GRIFFIN_LIM_ITERS)],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"Adapted to the voice of S003\.flac: 3 steps, mel loss [0-9.]+ -> "
                     r"[0-9.]+", done.stdout), done.stdout
    samples, rate = sf.read(os.path.join(REPO, output))
    assert rate == 16000 and samples.size > 0


@pytest.mark.slow
def test_cli_refuses_adaptation_flags_that_cannot_work(run_dir, tmp_path):
    out = str(tmp_path / "out.wav")
    speak = ("--checkpoint-dir", run_dir, "--text", "Hello.", "--output", out)
    voice = str(tmp_path / "v.npz")
    samples, rate = sf.read(REFERENCE_AUDIO)  # 5.0 s; twice is longer than the tiny model's 8 s
    long_reference = str(tmp_path / "long.wav")
    sf.write(long_reference, np.concatenate([samples, samples]), rate)
    cases = [
        (("--reference-audio", REFERENCE_AUDIO, REFERENCE_AUDIO, "--reference-text", "One.",
          "--adapt-steps", "3"),
         r"--adapt-steps needs what each --reference-audio recording says: 2 recording\(s\) "
         r"and 1 --reference-text"),
        (("--reference-audio", REFERENCE_AUDIO, "--reference-text", REFERENCE_TEXT),
         "--reference-text is read by --adapt-steps"),
        (("--reference-audio", REFERENCE_AUDIO, "--reference-text", REFERENCE_TEXT,
          "--adapt-steps", "3", "--save-voice", voice),
         "--save-voice with --adapt-steps: a voice file holds the voice's latents"),
        (("--voice", voice, "--adapt-steps", "3"), "pass --reference-audio .* instead of --voice"),
        (("--reference-audio", REFERENCE_AUDIO, "--adapt-steps", "-1"),
         "--adapt-steps -1 must be 0"),
        (("--reference-audio", REFERENCE_AUDIO, "--adapt-learning-rate", "0.1"),
         "--adapt-learning-rate needs --adapt-steps"),
        (("--reference-audio", REFERENCE_AUDIO, "--reference-text", "Ünïcødé ☃",
          "--adapt-steps", "3"),
         r"\(--reference-text: the words of each --reference-audio recording\.\)"),
        (("--reference-audio", long_reference, "--reference-text", REFERENCE_TEXT,
          "--adapt-steps", "3"),
         r"The reference audio .*long\.wav holds 10\.0 s of sound; adapting to a voice reads "
         r"each reference whole.*data\.max_audio_seconds = 8 s"),
    ]
    for argv, message in cases:
        code, printed = _run(*speak, *argv)
        assert code == 2, (argv, printed)
        assert re.search(message, printed), (argv, printed)
        assert "Traceback" not in printed
    assert not os.path.exists(out) and not os.path.exists(voice)
