"""Adapting the model to a voice (myxtts.inference.voice_adaptation): a few steps of fine-tuning
on a reference recording and its transcript lower the model's loss on that recording and change
what it says in that voice; the checkpoint's weights stay in place until the adapted ones are
used and come back with use_weights(None), and adapting again gives the same weights. Adapting
every weight leaves the speaker encoder's alone; adapting the postnet leaves the decode (frames
written, where the stop head ends) the checkpoint's. myxtts-synthesize --reference-text
--adapt-steps --adapt-part postnet --save-voice end to end, the adapted voice file spoken again
with --voice, and the flag errors in one paragraph."""

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
                                     REFERENCE_TEXT, REPO, make_checkpoint)


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
def test_adapting_every_weight_fits_the_reference_and_the_checkpoint_weights_come_back(synth):
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    checkpoint = _weights(synth)
    _, before = synth.synthesize("Hello there.", "en", latents)
    adapted = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                        steps=8, learning_rate=1e-3)
    assert adapted.part == "all" and len(adapted.losses) == 9
    assert adapted.losses[-1] < 0.9 * adapted.losses[0], adapted.losses
    # adapt leaves the model as it was; the speaker encoder is not adapted (the voice's latents
    # are given), every other weight the mel loss reads moved
    for now, was in zip(_weights(synth), checkpoint):
        np.testing.assert_array_equal(now, was)
    encoder = {id(v) for v in synth.model.speaker_encoder.trainable_variables}
    adaptable = [(v, w) for v, w in zip(synth.model.trainable_variables, checkpoint)
                 if id(v) not in encoder]
    assert len(adapted.values) == len(adaptable)
    moved = [not np.array_equal(a, w) for a, (_, w) in zip(adapted.values, adaptable)]
    assert sum(moved) >= len(moved) - 2, moved  # the stop head reads no mel loss
    synth.use_weights(adapted)
    try:
        _, spoken = synth.synthesize("Hello there.", "en", latents)
        assert not np.allclose(spoken, before, atol=1e-3)
        # the same steps again, while the adapted weights are in use, give the same weights
        again = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                          steps=8, learning_rate=1e-3)
        for a, b in zip(again.values, adapted.values):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(synth.synthesize("Hello there.", "en", latents)[1],
                                      spoken)
    finally:
        synth.use_weights(None)
    for now, was in zip(_weights(synth), checkpoint):
        np.testing.assert_array_equal(now, was)
    np.testing.assert_array_equal(synth.synthesize("Hello there.", "en", latents)[1], before)


@pytest.mark.slow
def test_adapting_the_postnet_leaves_the_decode_the_checkpoints(synth):
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    checkpoint = _weights(synth)
    postnet = [v.numpy() for v in synth.model.postnet.trainable_variables]
    ids, language_id = synth.encode("Hello there.", "en"), synth.language_id("en")
    before = synth.synthesize_detailed(ids, language_id, latents)
    adapted = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                        steps=8, learning_rate=1e-3, part="postnet")
    assert adapted.losses[-1] < 0.9 * adapted.losses[0], adapted.losses
    assert [a.shape for a in adapted.values] == [p.shape for p in postnet]
    assert all(not np.array_equal(a, p) for a, p in zip(adapted.values, postnet))
    synth.use_weights(adapted)
    try:
        spoken = synth.synthesize_detailed(ids, language_id, latents)
        # the same frames written, read and ended the same way; what the postnet makes of them
        # differs, and only the postnet's weights are changed
        assert spoken.mel.shape == before.mel.shape
        assert spoken.ended_by_stop == before.ended_by_stop
        np.testing.assert_array_equal(spoken.alignment, before.alignment)
        assert not np.allclose(spoken.mel, before.mel, atol=1e-3)
        moved = {id(v) for v in synth.model.postnet.trainable_variables}
        for variable, was in zip(synth.model.trainable_variables, checkpoint):
            if id(variable) not in moved:
                np.testing.assert_array_equal(variable.numpy(), was)
    finally:
        synth.use_weights(None)
    for now, was in zip(_weights(synth), checkpoint):
        np.testing.assert_array_equal(now, was)


def _run(*argv):
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = guarded_main(list(argv))
    return code, stdout.getvalue() + stderr.getvalue()


@pytest.mark.slow
def test_cli_adapts_saves_the_adapted_voice_and_speaks_it_again(run_dir, tmp_path):
    # As a user types it from the repository root: relative paths, a new process.
    output = os.path.relpath(str(tmp_path / "hello.wav"), REPO)
    voice = os.path.relpath(str(tmp_path / "anna.npz"), REPO)
    done = subprocess.run(
        [sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
         os.path.relpath(run_dir, REPO), "--reference-audio",
         "samples/ljspeech_sample/wavs/S003.flac", "--reference-text", REFERENCE_TEXT,
         "--adapt-steps", "3", "--adapt-part", "postnet", "--save-voice", voice, "--text",
         "Hello there.", "--output",
         output, "--max-decoder-steps", str(MAX_DECODER_STEPS), "--griffin-lim-iters",
         str(GRIFFIN_LIM_ITERS)],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert re.search(r"Adapted to the voice of S003\.flac \(postnet\): 3 steps, mel loss "
                     r"[0-9.]+ -> [0-9.]+", done.stdout), done.stdout
    assert re.search(rf"{re.escape(voice)}: the voice of S003\.flac \([0-9]+ latents, its postnet "
                     r"adapted\)", done.stdout), done.stdout
    adapted, rate = sf.read(os.path.join(REPO, output))
    assert rate == 16000 and adapted.size > 0
    # the voice file speaks adapted: the same audio as the run that adapted
    again = str(tmp_path / "again.wav")
    code, printed = _run("--checkpoint-dir", run_dir, "--voice", os.path.join(REPO, voice),
                         "--text", "Hello there.", "--output", again, "--max-decoder-steps",
                         str(MAX_DECODER_STEPS), "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS))
    assert code == 0, printed
    assert "is adapted to S003.flac: its postnet speaks" in printed
    np.testing.assert_array_equal(sf.read(again)[0], adapted)


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
        (("--voice", voice, "--adapt-steps", "3"), "pass --reference-audio .* instead of --voice"),
        (("--reference-audio", REFERENCE_AUDIO, "--reference-text", REFERENCE_TEXT,
          "--adapt-steps", "3", "--save-voice", voice),
         r"--save-voice with --adapt-steps: a voice file holds an adapted postnet, not every "
         r"weight \(--adapt-part all\); pass --adapt-part postnet"),
        (("--reference-audio", REFERENCE_AUDIO, "--adapt-part", "postnet"),
         "--adapt-part postnet needs --adapt-steps"),
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
