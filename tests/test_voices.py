"""Voices as files (myxtts.inference.voices): a saved voice loads bit for bit and speaks the same,
several references average, another model's voice is refused (a model with the same speaker
conditioning, as fine-tuning with it frozen leaves it, accepts it), files that are not voices
are refused in one paragraph, and myxtts-synthesize --reference-audio A B / --save-voice /
--voice end to end. Adapted voices (their postnet fine-tuned on the references) round-trip, speak
only with the model whose decoder they were fitted to, and are refused where only latents are
spoken."""

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
from myxtts.inference.voices import (FORMAT, FORMAT_VERSION, PLAIN_VERSION, Voice,
                                     VoiceFileError, VoiceMismatchError)
from myxtts.synthesize import guarded_main
from tests.inference_helpers import (GRIFFIN_LIM_ITERS, MAX_DECODER_STEPS, REFERENCE_AUDIO,
                                     REFERENCE_TEXT, REPO, SAMPLE_DIR, finetuned_checkpoint,
                                     make_checkpoint)

OTHER_REFERENCE = os.path.join(SAMPLE_DIR, "wavs", "S005.wav")  # the same speaker, anna

def _synthesizer(directory):
    return Synthesizer.from_checkpoint_dir(directory, max_decoder_steps=MAX_DECODER_STEPS,
                                           griffin_lim_iterations=GRIFFIN_LIM_ITERS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Checkpoint directories: "a"; "b", another model (other weights everywhere); "frozen", a's
    model with every weight but the speaker encoder's moved."""
    root = tmp_path_factory.mktemp("voices")
    dirs = {name: str(root / name) for name in ("a", "b", "frozen")}
    make_checkpoint(dirs["a"], step=1)
    make_checkpoint(dirs["b"], step=2)
    finetuned_checkpoint(dirs["a"], dirs["frozen"], "speaker_encoder", step=3)
    return dirs


@pytest.fixture(scope="module")
def synth(runs):
    return _synthesizer(runs["a"])


@pytest.mark.slow
def test_a_saved_voice_loads_bit_for_bit_and_speaks_the_same(synth, tmp_path):
    path = str(tmp_path / "anna.npz")
    synth.voice(REFERENCE_AUDIO).save(path)
    voice = Voice.load(path)
    direct = synth.speaker_latents(REFERENCE_AUDIO)
    assert voice.latents.dtype == np.float32
    np.testing.assert_array_equal(voice.latents, direct[0].numpy())
    assert (voice.references, voice.checkpoint, voice.file) == (
        ("S003.flac",), synth.loaded.checkpoint_path, path)
    _, from_file = synth.synthesize("Hello there.", "en", synth.latents_of(voice))
    _, from_audio = synth.synthesize("Hello there.", "en", direct)
    np.testing.assert_array_equal(from_file, from_audio)
    assert sorted(os.listdir(tmp_path)) == ["anna.npz"]  # no temporary file left


@pytest.mark.slow
def test_several_references_average_their_latents(synth):
    one, other = (synth.speaker_latents(p)[0].numpy() for p in (REFERENCE_AUDIO, OTHER_REFERENCE))
    voice = synth.voice([REFERENCE_AUDIO, OTHER_REFERENCE])
    assert voice.references == ("S003.flac", "S005.wav")
    np.testing.assert_allclose(voice.latents, (one + other) / 2, rtol=1e-6, atol=1e-7)
    assert not np.allclose(one, other, atol=1e-3)  # so the mean is neither of them
    np.testing.assert_array_equal(
        synth.speaker_latents([REFERENCE_AUDIO, OTHER_REFERENCE])[0].numpy(), voice.latents)


@pytest.mark.slow
def test_another_models_voice_is_refused_and_the_same_conditioning_accepts_it(runs, synth,
                                                                               tmp_path):
    path = str(tmp_path / "anna.npz")
    synth.voice([REFERENCE_AUDIO, OTHER_REFERENCE]).save(path)
    voice = Voice.load(path)
    other = _synthesizer(runs["b"])
    with pytest.raises(VoiceMismatchError) as error:
        other.latents_of(voice)
    message = str(error.value)
    for part in (f"The voice {path} was made by {synth.loaded.checkpoint_path} from S003.flac, "
                 f"S005.wav", f"the speaker conditioning of {other.loaded.checkpoint_path} "
                 f"differs", "Make the voice again from the recordings"):
        assert part in message
    # The same checkpoint loaded again, and a model whose speaker encoder was frozen while the
    # rest trained on, make the same latents from the recordings: they accept the voice.
    again, frozen = _synthesizer(runs["a"]), _synthesizer(runs["frozen"])
    np.testing.assert_array_equal(again.latents_of(voice)[0].numpy(), voice.latents)
    np.testing.assert_array_equal(frozen.latents_of(voice)[0].numpy(),
                                  frozen.voice([REFERENCE_AUDIO, OTHER_REFERENCE]).latents)
    assert not np.array_equal(frozen.model.decoder.get_weights()[0],
                              synth.model.decoder.get_weights()[0])


@pytest.mark.slow
def test_an_adapted_voice_keeps_its_postnet_and_only_its_models_decoder_takes_it(runs, synth,
                                                                                 tmp_path):
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    adapted = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                        steps=3, learning_rate=1e-3, part="postnet")
    path = str(tmp_path / "adapted.npz")
    # made while another voice's every-weight adaptation is in use: the file still names the
    # checkpoint's decoder, so a fresh load of the checkpoint takes it
    synth.use_weights(synth.adapt_to_references(latents, [OTHER_REFERENCE], [REFERENCE_TEXT],
                                                "en", steps=2, learning_rate=1e-3))
    try:
        synth.voice(REFERENCE_AUDIO, adapted).save(path)
    finally:
        synth.use_weights(None)
    voice = Voice.load(path)
    _synthesizer(runs["a"]).use_voice(voice)
    assert len(voice.postnet) == len(synth.model.postnet.weights)
    for stored, value in zip(voice.postnet, adapted.values):
        np.testing.assert_array_equal(stored, value)
    try:
        synth.use_weights(adapted)
        _, direct = synth.synthesize("Hello there.", "en", latents)
        synth.use_weights(None)
        _, from_file = synth.synthesize("Hello there.", "en", synth.use_voice(voice))
        np.testing.assert_array_equal(from_file, direct)
        # a plain voice puts the checkpoint's postnet back
        _, plain = synth.synthesize("Hello there.", "en",
                                    synth.use_voice(synth.voice(REFERENCE_AUDIO)))
        assert not np.allclose(plain, direct, atol=1e-4)
    finally:
        synth.use_weights(None)
    # latents alone would not sound adapted: latents_of (and the server's, the export's and the
    # on-device runtime's, which share Voice.latents_for) refuse it
    with pytest.raises(VoiceMismatchError, match=rf"The voice {re.escape(path)} was adapted to "
                       r"its recordings \(S003\.flac\).*make its voices without "
                       r"--adapt-steps\.$"):
        synth.latents_of(voice)
    # the frozen model makes the same latents, but its decoder writes other frames
    frozen = _synthesizer(runs["frozen"])
    with pytest.raises(VoiceMismatchError, match=r"its postnet was fitted to that model's "
                       r"decoder, and the decoder of .*ckpt-3 differs.*Adapt the voice again"):
        frozen.use_voice(voice)


def test_the_servers_voice_store_takes_an_adapted_voice_only_from_its_decoder(tmp_path, caplog):
    from myxtts.serving.voice_store import VoiceStore  # pylint: disable=import-outside-toplevel
    latents = np.zeros([4, 8], np.float32)
    Voice(latents, "ab" * 32, ("a.wav",), "runs/x/ckpt-1").save(str(tmp_path / "plain.npz"))
    Voice(latents, "ab" * 32, ("b.wav",), "runs/x/ckpt-1",
          postnet=(np.ones([5, 8, 8], np.float32), np.zeros([8], np.float32)),
          decoder_fingerprint="cd" * 32).save(str(tmp_path / "adapted.npz"))
    with caplog.at_level("WARNING"):
        store = VoiceStore(str(tmp_path), "ab" * 32, "runs/x/ckpt-1")
    assert [voice_id for voice_id, _ in store.list()] == ["plain"]
    assert re.search(r"Voice .*adapted\.npz skipped: The voice .*adapted\.npz was adapted to its "
                     r"recordings \(b\.wav\)", caplog.text), caplog.text
    # a model that speaks adapted voices (an export with postnet_window_adapted) takes it when
    # its decoder is the one the postnet was fitted to
    speaks = VoiceStore(str(tmp_path), "ab" * 32, "runs/x/ckpt-1", decoder_fingerprint="cd" * 32)
    assert [voice_id for voice_id, _ in speaks.list()] == ["adapted", "plain"]
    other = VoiceStore(str(tmp_path), "ab" * 32, "runs/x/ckpt-1", decoder_fingerprint="ef" * 32)
    assert [voice_id for voice_id, _ in other.list()] == ["plain"]


def _voice_arrays(**changes):
    arrays = {"format": np.array(FORMAT), "format_version": np.array(PLAIN_VERSION),
              "latents": np.zeros([4, 8], np.float32), "fingerprint": np.array("ab" * 32),
              "references": np.array(["a.wav"]), "checkpoint": np.array("runs/x/ckpt-1")}
    arrays.update(changes)
    return {k: v for k, v in arrays.items() if v is not None}


def test_files_that_are_not_voices_are_refused_in_one_paragraph(tmp_path):
    def write(name, content):
        path = str(tmp_path / name)
        if isinstance(content, bytes):
            with open(path, "wb") as f:
                f.write(content)
        elif isinstance(content, dict):
            np.savez(path, **content)
        else:
            np.save(path, content)
        return path

    good = write("good.npz", _voice_arrays())
    assert Voice.load(good).references == ("a.wav",)
    with open(good, "rb") as f:
        truncated = f.read()[:200]
    cases = [
        (write("garbage.npz", b"this is not a voice"), "is not a myxtts voice file"),
        (write("truncated.npz", truncated), "is damaged or incomplete"),
        (str(tmp_path / "missing.npz"), "Cannot read the voice file"),
        (write("mel.npy", np.zeros([3, 4], np.float32)), "is not a myxtts voice file"),
        (write("other.npz", {"mel": np.zeros(3)}), "is not a myxtts voice file"),
        (write("newer.npz", _voice_arrays(format_version=np.array(FORMAT_VERSION + 1))),
         f"has format version {FORMAT_VERSION + 1}, written by a newer myxtts"),
        (write("no_latents.npz", _voice_arrays(latents=None)), r"is damaged \(no latents\)"),
        (write("nan.npz", _voice_arrays(latents=np.full([4, 8], np.nan, np.float32))),
         r"is damaged \(latents float32 \(4, 8\), expected finite"),
        (write("pickled.npz", _voice_arrays(references=np.array(["a.wav", 1], object))),
         "is damaged or incomplete .*allow_pickle=False"),
        (write("adapted_no_postnet.npz", _voice_arrays(
            format_version=np.array(FORMAT_VERSION), decoder_fingerprint=np.array("cd" * 32))),
         r"is damaged \(an adapted voice without postnet_0\)"),
        (write("adapted_nan.npz", _voice_arrays(
            format_version=np.array(FORMAT_VERSION), decoder_fingerprint=np.array("cd" * 32),
            postnet_0=np.zeros([5, 8, 8], np.float32),
            postnet_1=np.full([8], np.inf, np.float32))),
         r"is damaged \(postnet_1 float32 \(8,\), expected finite float32\)"),
    ]
    for path, message in cases:
        with pytest.raises(VoiceFileError, match=message) as error:
            Voice.load(path)
        assert path in str(error.value) and "\n" not in str(error.value)


def _run(*args):
    stderr = io.StringIO()
    with contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        code = guarded_main([*args, "--max-decoder-steps", str(MAX_DECODER_STEPS),
                             "--griffin-lim-iters", str(GRIFFIN_LIM_ITERS)])
    return code, stderr.getvalue()


@pytest.mark.slow
def test_cli_saves_a_voice_of_two_recordings_and_speaks_with_it(runs, synth, tmp_path):
    # As a user types it from the repository root: relative paths, a new process.
    voice_file = os.path.relpath(str(tmp_path / "voices" / "anna.npz"), REPO)
    done = subprocess.run(
        [sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir",
         os.path.relpath(runs["a"], REPO), "--reference-audio",
         "samples/ljspeech_sample/wavs/S003.flac", "samples/ljspeech_sample/wavs/S005.wav",
         "--save-voice", voice_file],
        capture_output=True, text=True, cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"{voice_file}: the voice of S003.flac, S005.wav" in done.stdout
    voice = Voice.load(os.path.join(REPO, voice_file))
    np.testing.assert_array_equal(voice.latents,
                                  synth.voice([REFERENCE_AUDIO, OTHER_REFERENCE]).latents)
    output = str(tmp_path / "hello.wav")
    code, stderr = _run("--checkpoint-dir", runs["a"], "--voice", os.path.join(REPO, voice_file),
                        "--text", "Hello there.", "--output", output, "--save-mel")
    assert code == 0, stderr
    _, mel = synth.synthesize("Hello there.", "en", synth.latents_of(voice))
    np.testing.assert_array_equal(np.load(str(tmp_path / "hello.npy"), allow_pickle=False), mel)
    assert sf.read(output)[1] == synth.sample_rate


@pytest.mark.slow
def test_cli_refuses_wrong_voice_flags_in_one_paragraph(runs, tmp_path):
    other_voice = str(tmp_path / "ben.npz")
    _synthesizer(runs["b"]).voice(OTHER_REFERENCE).save(other_voice)
    garbage = str(tmp_path / "garbage.npz")
    with open(garbage, "wb") as f:
        f.write(b"not a voice")
    out = str(tmp_path / "out.wav")
    speak = ("--text", "Hello.", "--output", out)
    cases = [
        (("--voice", other_voice, *speak),
         f"The voice {re.escape(other_voice)} was made by .*ckpt-2 from S005.wav, and the "
         rf"speaker conditioning of .*ckpt-1 differs .*\(--voice {re.escape(other_voice)}, "
         "--checkpoint-dir "),
        (("--voice", garbage, *speak),
         rf"{re.escape(garbage)} is not a myxtts voice file.*\(--voice: "),
        (("--voice", other_voice, "--save-voice", str(tmp_path / "v.npz"), *speak),
         "--save-voice needs --reference-audio"),
        (("--voice", str(tmp_path / "none.npz"), *speak), "--voice .*none.npz does not exist"),
        (("--reference-audio", REFERENCE_AUDIO, "--save-voice", str(tmp_path)),
         "--save-voice .* is a folder"),
        (("--reference-audio", REFERENCE_AUDIO, "--output", out),
         "Pass --text or --text-file .*or --save-voice alone"),
    ]
    for args, message in cases:
        code, stderr = _run("--checkpoint-dir", runs["a"], *args)
        assert code == 2, (args, stderr)
        assert "Traceback" not in stderr
        errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
        assert len(errors) == 1 and re.search(message, errors[0]), stderr
    for args, message in ((("--voice", other_voice, "--reference-audio", REFERENCE_AUDIO),
                           "argument --reference-audio: not allowed with argument --voice"),
                          ((), "one of the arguments --reference-audio --voice is required")):
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr), pytest.raises(SystemExit) as exited:
            guarded_main(["--checkpoint-dir", runs["a"], *args, *speak])
        assert exited.value.code == 2 and message in stderr.getvalue()
    assert not os.path.exists(out)
