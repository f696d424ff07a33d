"""On-device export (myxtts-export --format tflite|onnx) and its TensorFlow-free runtime
(python -m myxtts.lite): the parts hold builtin ops only, the runtime runs in a process where
importing TensorFlow, Keras or librosa fails, and its mel equals the checkpoint's synthesis."""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import soundfile as sf

from tests.inference_helpers import REFERENCE_AUDIO, make_checkpoint, shared_vocoder_checkpoint

pytestmark = pytest.mark.slow

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TEXTS = ["Hello there.", "In the beginning God created the heaven and the earth.",
         "A second sentence follows. And a third one, with a clause."]
# Runs `python -m myxtts.lite ARGS` with tensorflow, keras and librosa unimportable.
WITHOUT_TENSORFLOW = """
import runpy, sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('tensorflow', 'keras', 'librosa', 'tf_keras'):
            raise ImportError('blocked: ' + name)
sys.meta_path.insert(0, Block())
sys.argv = ['myxtts.lite'] + sys.argv[1:]
runpy.run_module('myxtts.lite', run_name='__main__')
"""


@pytest.fixture(scope="module")
def exported():
    """{name: export folder} of one tiny checkpoint (tflite-vocos and onnx-hifigan with decode
    parts of two rows besides those of one), its SavedModel (ExportedModel) and a voice file
    the SavedModel made."""
    # pylint: disable=import-outside-toplevel
    from myxtts.exporters.registry import exporter
    from myxtts.inference.exported_model import ExportedModel
    root = tempfile.mkdtemp(prefix="myxtts-lite-")
    checkpoint = os.path.join(root, "runs", "tiny")
    make_checkpoint(checkpoint)
    vocos, _ = shared_vocoder_checkpoint("vocos")
    hifigan, _ = shared_vocoder_checkpoint("hifigan")
    folders = {}
    for name, fmt, extra in (("tflite", "tflite", {}),
                             ("tflite-vocos", "tflite", {"vocoder_dir": vocos, "decode_rows": 2}),
                             ("tflite-fp16", "tflite", {"vocoder_dir": vocos, "quantize": "fp16"}),
                             ("tflite-int8", "tflite", {"vocoder_dir": vocos, "quantize": "int8"}),
                             ("onnx-hifigan", "onnx", {"vocoder_dir": hifigan,
                                                       "decode_rows": 2})):
        folders[name] = exporter(fmt)(checkpoint, os.path.join(root, "models", name),
                                      **extra).path
    saved_model = ExportedModel(exporter("tf_serving")(
        checkpoint, os.path.join(root, "models", "savedmodel"), vocoder_dir=vocos).path)
    voice_path = os.path.join(root, "voice.npz")
    saved_model.voice(REFERENCE_AUDIO).save(voice_path)
    yield {"root": root, "folders": folders, "saved_model": saved_model, "voice": voice_path,
           "checkpoint": checkpoint}
    shutil.rmtree(root, ignore_errors=True)


def run_lite(args, cwd):
    return subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW, *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def saved_model_mel(model, voice_path, text):
    """The SavedModel path's mel of `text`: each sentence through synthesize_tokens."""
    # pylint: disable=import-outside-toplevel
    import tensorflow as tf
    from myxtts.inference.voices import Voice
    latents = model.latents_of(Voice.load(voice_path))[None]
    sentences, language_id = model.sentences(text, "en")
    mels = []
    for ids in sentences:
        out = model.signatures["synthesize_tokens"](
            tokens=tf.constant([ids], tf.int32), token_lengths=tf.constant([len(ids)], tf.int32),
            language_ids=tf.constant([language_id], tf.int32),
            speaker_latents=tf.constant(latents))
        mels.append(out["mel"][0, : int(out["mel_lengths"][0])].numpy())
    return np.concatenate(mels)


@pytest.mark.parametrize("name", ["tflite", "tflite-vocos", "onnx-hifigan"])
def test_runtime_without_tensorflow_gives_the_saved_models_mel(exported, name):
    folder = exported["folders"][name]
    for index, text in enumerate(TEXTS):
        output = os.path.join(exported["root"], f"{name}-{index}.wav")
        result = run_lite(["--model", os.path.dirname(folder), "--voice", exported["voice"],
                           "--text", text, "--output", output, "--save-mel"], exported["root"])
        assert result.returncode == 0, result.stderr[-3000:]
        assert "XNNPACK" not in result.stderr, result.stderr  # LiteRT's notice is kept quiet
        mel = np.load(output[:-4] + ".npy")
        expected = saved_model_mel(exported["saved_model"], exported["voice"], text)
        assert abs(len(mel) - len(expected)) <= 2  # within one decode step (r = 2)
        frames = min(len(mel), len(expected))
        np.testing.assert_allclose(mel[:frames], expected[:frames], atol=1e-3, err_msg=text)
        audio, rate = sf.read(output)
        assert rate == 16000 and len(audio) > 0 and np.all(np.isfinite(audio))


def _folder_megabytes(folder):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder)
               for f in files) / 1e6


def test_the_runtime_installs_with_one_pip_command_without_tensorflow_and_speaks(exported):
    # As a user on a small machine does it: a fresh virtual environment, the one command of
    # docs/edge.md (pip resolves the dependencies from its configured index), then the
    # myxtts-lite command from a folder outside the repository.
    # pylint: disable=import-outside-toplevel
    import time
    venv = os.path.join(exported["root"], "venv")
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, timeout=300)
    bare = _folder_megabytes(venv)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    python = os.path.join(venv, "bin", "python")
    started = time.monotonic()
    install = subprocess.run(
        [python, "-m", "pip", "install", "-q", os.path.join(REPO, "packaging", "myxtts-lite")],
        capture_output=True, text=True, timeout=900, env=env, cwd=exported["root"])
    seconds = time.monotonic() - started
    assert install.returncode == 0, install.stdout[-2000:] + install.stderr[-3000:]
    print(f"myxtts-lite installed in {seconds:.1f} s, {_folder_megabytes(venv) - bare:.0f} MB")
    probe = subprocess.run(
        [python, "-c", "import importlib.util as u, myxtts.lite; "
                       "print(myxtts.lite.__file__, u.find_spec('tensorflow'), "
                       "u.find_spec('myxtts.training'))"],
        capture_output=True, text=True, timeout=120, env=env, cwd=exported["root"])
    assert probe.returncode == 0, probe.stderr
    location, tensorflow, trainer = probe.stdout.split()
    assert location.startswith(venv) and tensorflow == "None" and trainer == "None"
    output = os.path.join(exported["root"], "installed.wav")
    spoken = subprocess.run(
        [os.path.join(venv, "bin", "myxtts-lite"), "--model",
         os.path.dirname(exported["folders"]["tflite-vocos"]), "--voice", exported["voice"],
         "--text", TEXTS[1], "--output", output, "--save-mel"],
        capture_output=True, text=True, timeout=300, env=env, cwd=exported["root"])
    assert spoken.returncode == 0, spoken.stderr[-3000:]
    mel = np.load(output[:-4] + ".npy")
    expected = saved_model_mel(exported["saved_model"], exported["voice"], TEXTS[1])
    frames = min(len(mel), len(expected))
    assert abs(len(mel) - len(expected)) <= 2
    np.testing.assert_allclose(mel[:frames], expected[:frames], atol=1e-3)
    audio, rate = sf.read(output)
    assert rate == 16000 and len(audio) > 0 and np.all(np.isfinite(audio))


def test_stream_joins_to_the_whole_synthesis(exported):
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    lite = LiteSynthesizer(exported["folders"]["tflite-vocos"])
    latents = lite.latents_of(Voice.load(exported["voice"]))
    whole, _ = lite.synthesize(TEXTS[2], "en", latents)
    chunks = list(lite.stream(TEXTS[2], "en", latents))
    assert len(chunks) >= 3
    np.testing.assert_allclose(np.concatenate(chunks), whole, atol=1e-4)


@pytest.mark.parametrize("name", ["tflite-vocos", "onnx-hifigan"])
def test_interleaved_streams_of_one_synthesizer_equal_each_alone(exported, name):
    # The decode state lives inside the runtime between steps (myxtts.lite.resident); a second
    # stream stepped in between parks the first one's state on the host and brings it back.
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    lite = LiteSynthesizer(exported["folders"][name])
    latents = lite.latents_of(Voice.load(exported["voice"]))
    alone = [list(lite.stream(text, "en", latents)) for text in TEXTS[1:]]
    streams = [lite.stream(text, "en", latents) for text in TEXTS[1:]]
    interleaved = [[], []]
    while streams[0] is not None or streams[1] is not None:
        for index, stream in enumerate(streams):
            chunk = next(stream, None) if stream is not None else None
            if chunk is None:
                streams[index] = None
            else:
                interleaved[index].append(chunk)
    for own, mixed in zip(alone, interleaved):
        assert len(own) == len(mixed) >= 2
        np.testing.assert_array_equal(np.concatenate(mixed), np.concatenate(own))


@pytest.mark.parametrize("name", ["tflite-vocos", "onnx-hifigan"])
def test_sentences_decoded_together_equal_each_alone_and_a_row_leaves(exported, name):
    """The decode contract on the on-device backend: sentences in one batch of the two-row
    parts each decode as alone on the one-row parts (a lone sentence's batch), and a row that
    leaves the batch after the first chunk leaves the other's frames unchanged."""
    # pylint: disable=import-outside-toplevel
    from myxtts.decoding import scheduler
    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    lite = LiteSynthesizer(exported["folders"][name])
    decoder = lite.decoder
    assert decoder.max_rows == 2 and [p.rows for p in decoder.decode_parts] == [1, 2]
    latents = lite.latents_of(Voice.load(exported["voice"]))
    sentences, language_id = lite.sentences(TEXTS[1] + " " + TEXTS[2], "en")
    assert len(sentences) >= 3  # two batches of the two-row parts
    together = lite.decode_sentences(sentences, language_id, latents)
    for ids, (mel, by_stop) in zip(sentences, together):
        alone, alone_by_stop = lite.decode(ids, language_id, latents)
        assert by_stop == alone_by_stop and mel.shape == alone.shape
        np.testing.assert_allclose(mel, alone, atol=1e-5)

    def frames(rows, leaving=()):
        state = decoder.start_batch([sentences[k] for k in rows], [language_id] * len(rows),
                                    latents)
        got = {k: [] for k in rows}
        for chunk in scheduler.decoded_chunks(decoder, state, rows, 2,
                                              leaves=lambda k: k in leaving):
            for row in chunk:
                got[row.row].append(row.frames)
        return {k: np.concatenate(pieces) for k, pieces in got.items()}

    both = frames([0, 2])
    one_left = frames([0, 2], leaving=(0,))
    assert len(one_left[0]) < len(both[0])  # it left after its first chunk
    np.testing.assert_allclose(one_left[2], both[2], atol=1e-5)
    np.testing.assert_allclose(both[2], frames([2])[2], atol=1e-5)


class _WatchedLoop:
    """The decoder's resident loop, counting the threads inside it. A thread running a call
    waits (up to a second) for another one to come in, so a decoder that let two threads into
    the loop at once would be caught every time, not only under load."""

    def __init__(self, loop):
        import threading  # pylint: disable=import-outside-toplevel
        self._loop, self._guard = loop, threading.Lock()
        self._second = threading.Event()
        self.inside = self.most = 0

    def _enter(self):
        with self._guard:
            self.inside += 1
            self.most = max(self.most, self.inside)
            if self.inside > 1:
                self._second.set()

    def _leave(self):
        with self._guard:
            self.inside -= 1

    def run(self, *args):
        self._enter()
        try:
            self._second.wait(1.0)
            return self._loop.run(*args)
        finally:
            self._leave()

    def __getattr__(self, name):  # load, state, value: counted as well
        method = getattr(self._loop, name)

        def counted(*args):
            self._enter()
            try:
                return method(*args)
            finally:
                self._leave()
        return counted


def test_two_threads_stepping_two_decodes_take_turns_in_the_runtime(exported):
    """Streams decode ahead in their own threads (streaming.ahead): two decodes of one
    synthesizer, stepped from two threads at once, never share the resident loop and each
    gives the frames it gives alone."""
    # pylint: disable=import-outside-toplevel
    import threading
    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    lite = LiteSynthesizer(exported["folders"]["tflite-vocos"])
    latents = lite.latents_of(Voice.load(exported["voice"]))
    decoder = lite.decoder
    inputs = [(lite.sentences(text, "en")[0][0], lite.sentences(text, "en")[1])
              for text in TEXTS[1:]]

    def decode(ids, language_id):
        state = decoder.start_batch([ids], [language_id], latents)
        while not state.ended:
            state = decoder.steps(state, decoder.steps_per_call)
        return decoder.batch_frames(state, 0, int(decoder.batch_progress(state)[1][0]))[0]

    alone = [decode(*item) for item in inputs]
    parts = decoder.decode_parts[0]
    watched = parts.loop = _WatchedLoop(parts.loop)
    together = [None, None]

    def worker(index):
        together[index] = decode(*inputs[index])

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert watched.most == 1
    for own, mixed in zip(alone, together):
        np.testing.assert_array_equal(mixed, own)


def test_the_server_serves_an_on_device_export_without_tensorflow(exported):
    # myxtts-serve --model models/tflite-vocos in a process where importing TensorFlow or Keras
    # fails (and is recorded): the same API, a voice file the SavedModel made and an uploaded
    # recording speak as the on-device synthesizer does, and concurrent requests (two sentences
    # per batch, the two workers each with parts of their own) each get their own audio.
    # pylint: disable=import-outside-toplevel
    import concurrent.futures
    import io

    import httpx

    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    from tests.serve_process import ServerProcess, upload_reference
    folder = tempfile.mkdtemp(dir=exported["root"])
    os.makedirs(os.path.join(folder, "voices"))
    shutil.copy(exported["voice"], os.path.join(folder, "voices", "saved.npz"))
    lite = LiteSynthesizer(exported["folders"]["tflite-vocos"])
    latents = {"saved": lite.latents_of(Voice.load(exported["voice"])),
               "uploaded": lite.speaker_latents(REFERENCE_AUDIO)}
    expected = {(voice, text): lite.synthesize(text, "en", latents[voice])[0]
                for voice in latents for text in TEXTS[1:]}
    model = os.path.relpath(os.path.join(exported["root"], "models", "tflite-vocos"), folder)
    with ServerProcess(folder, "--model", model,
                       blocked=("tensorflow", "keras", "tf_keras")) as server:
        client = httpx.Client(base_url=server.url, timeout=300)
        assert "(tflite, none)" in server.log() and "batches of up to 2 sentences" in \
            server.log()
        assert client.get("/v1/models").json()["data"][0]["vocoder"] == \
            lite.manifest["vocoder"]
        assert upload_reference(client, "uploaded").status_code == 201
        assert sorted(v["id"] for v in client.get("/v1/voices").json()["data"]) == \
            ["saved", "uploaded"]

        def speak(key):
            voice, text = key
            response = client.post("/v1/audio/speech", json={
                "model": "tflite-vocos", "input": text, "voice": voice,
                "response_format": "wav"})
            assert response.status_code == 200, response.text
            return sf.read(io.BytesIO(response.content), dtype="float32")[0]

        keys = list(expected) * 2
        with concurrent.futures.ThreadPoolExecutor(len(keys)) as pool:
            heard = list(pool.map(speak, keys))
    assert server.blocked_imports() == []
    for key, audio in zip(keys, heard):
        assert audio.shape == expected[key].shape, key
        # 16-bit PCM of the streamed windows against the whole synthesis
        np.testing.assert_allclose(audio, expected[key], atol=2e-4, err_msg=str(key))
    # The SavedModel server, from the same voices folder (the voice the on-device server made
    # from the upload included), speaks as the SavedModel's own streaming does: the two backends'
    # mels agree (test_runtime_without_tensorflow_gives_the_saved_models_mel); their vocoders'
    # last windows do not, as the part's is padded with the mel floor.
    saved = exported["saved_model"]
    voices = {voice: saved.latents_of(Voice.load(os.path.join(folder, "voices", f"{voice}.npz")))
              for voice in latents}
    with ServerProcess(folder, "--model", os.path.join(os.path.dirname(model), "savedmodel")) \
            as server:
        client = httpx.Client(base_url=server.url, timeout=300)
        for key in expected:
            voice, text = key
            alone = np.concatenate(list(saved.stream(text, "en", voices[voice][None])))
            np.testing.assert_allclose(speak(key), alone, atol=2e-4, err_msg=str(key))


def test_parts_hold_builtin_ops_only_and_quantized_weights_are_smaller(exported):
    from ai_edge_litert.interpreter import Interpreter  # pylint: disable=import-outside-toplevel
    sizes = {}
    names = ("tflite-vocos", "tflite-fp16", "tflite-int8")
    shared = set.intersection(*(set(os.listdir(exported["folders"][name])) for name in names))
    for name in names:
        folder = exported["folders"][name]
        sizes[name] = sum(os.path.getsize(os.path.join(folder, f)) for f in shared
                          if f.endswith(".tflite"))
        for part in (f for f in os.listdir(folder) if f.endswith(".tflite")):
            ops = {op["op_name"] for op in Interpreter(
                model_path=os.path.join(folder, part))._get_ops_details()}
            assert not [op for op in ops if op.startswith("Flex") or op == "CUSTOM"], (part, ops)
    assert sizes["tflite-fp16"] < 0.7 * sizes["tflite-vocos"]
    assert sizes["tflite-int8"] < 0.5 * sizes["tflite-vocos"]


def test_quantized_exports_stay_close_to_fp32(exported):
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.voices import Voice
    from myxtts.lite.synthesizer import LiteSynthesizer
    mels = {}
    for name in ("tflite-vocos", "tflite-fp16", "tflite-int8"):
        lite = LiteSynthesizer(exported["folders"][name])
        _, mels[name] = lite.synthesize(TEXTS[1], "en", lite.latents_of(
            Voice.load(exported["voice"])))
    for name in ("tflite-fp16", "tflite-int8"):
        assert mels[name].shape == mels["tflite-vocos"].shape
        assert np.abs(mels[name] - mels["tflite-vocos"]).mean() < 0.1, name


def test_reference_audio_and_bad_input_from_the_command_line(exported):
    folder = os.path.dirname(exported["folders"]["tflite"])
    out = os.path.join(exported["root"], "ref.wav")
    result = run_lite(["--model", folder, "--reference-audio", REFERENCE_AUDIO, "--text",
                       TEXTS[0], "--output", out], exported["root"])
    assert result.returncode == 0, result.stderr[-3000:]
    assert sf.info(out).duration > 0
    # pylint: disable=import-outside-toplevel
    from myxtts.inference.voices import Voice
    other = Voice(np.zeros((4, 8), np.float32), "0" * 64, ("x.wav",), "elsewhere/ckpt-1")
    other_path = os.path.join(exported["root"], "other.npz")
    other.save(other_path)
    for args, message in (
            (["--voice", other_path, "--text", "Hello."], "speaker conditioning"),
            (["--voice", exported["voice"], "--text", "Price: 5 €"], "outside the model's"),
            (["--voice", exported["voice"], "--text", "Hola.", "--language", "xx"],
             "Unknown language"),
            (["--reference-audio", os.path.join(folder, "1", "manifest.json"), "--text", "Hi."],
             "manifest.json")):
        result = run_lite(["--model", folder, *args, "--output", out], exported["root"])
        assert result.returncode == 2, (args, result.stderr[-2000:])
        assert message in result.stderr and "Traceback" not in result.stderr, result.stderr
    result = run_lite(["--model", exported["root"], "--voice", exported["voice"], "--text",
                       "Hi.", "--output", out], exported["root"])
    assert result.returncode == 2 and "manifest.json" in result.stderr


def test_a_damaged_export_is_refused_with_what_is_wrong(exported, tmp_path):
    source = exported["folders"]["tflite"]
    cases = {"newer": ("format version 2", lambda folder: _edit_manifest(
                 folder, lambda m: m.update(format_version=2))),
             "missing": ("lacks decode_steps.tflite", lambda folder: os.remove(
                 os.path.join(folder, "decode_steps.tflite"))),
             "not ours": ("not a myxtts on-device export manifest", lambda folder:
                          _edit_manifest(folder, lambda m: m.update(format="something")))}
    for name, (message, damage) in cases.items():
        folder = str(tmp_path / name)
        shutil.copytree(source, folder)
        damage(folder)
        result = run_lite(["--model", folder, "--voice", exported["voice"], "--text", "Hi.",
                           "--output", str(tmp_path / "x.wav")], exported["root"])
        assert result.returncode == 2 and message in result.stderr, (name, result.stderr)
        assert "Traceback" not in result.stderr


def _edit_manifest(folder, change):
    path = os.path.join(folder, "manifest.json")
    with open(path, encoding="utf-8") as f:
        manifest = json.load(f)
    change(manifest)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f)


def test_a_reference_matching_export_matches_in_its_postnet_part(tmp_path):
    """model.reference_matching: the postnet part takes the speaker latents and matches its
    windows' output as the checkpoint's whole decode does."""
    # pylint: disable=import-outside-toplevel
    from myxtts.config import REFERENCE_MATCHING_FRAMES
    from myxtts.exporters.registry import exporter
    from myxtts.inference.checkpoint_loading import load_checkpoint
    from myxtts.inference.synthesizer import Synthesizer
    from myxtts.lite.synthesizer import LiteSynthesizer
    checkpoint = str(tmp_path / "runs" / "matching")
    make_checkpoint(checkpoint, overrides={"model.reference_spectrum": True, "model.d_model": 48,
                                           "model.reference_matching": 0.5})
    lite = LiteSynthesizer(exporter("tflite")(checkpoint, str(tmp_path / "models")).path)
    assert "speaker_latents" in [tensor["name"] for tensor in
                                 lite.manifest["parts"]["postnet"]["inputs"]]
    synth = Synthesizer.from_checkpoint_dir(checkpoint)
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    ids, language_id = synth.sentences(TEXTS[1], "en")[0], synth.language_id("en")
    expected = synth.synthesize_detailed(ids, language_id, latents).mel
    mel, _ = lite.decode(ids, language_id, latents.numpy())
    assert abs(len(mel) - len(expected)) <= 2  # within one decode step (r = 2)
    frames = min(len(mel), len(expected))
    np.testing.assert_allclose(mel[:frames], expected[:frames], atol=1e-3)
    # the same weights decoding without it: the same frames, another mel
    plain = Synthesizer(load_checkpoint(checkpoint, decoding={"model.reference_matching": 0.0}))
    unmatched = plain.synthesize_detailed(ids, language_id,
                                          latents[:, :-REFERENCE_MATCHING_FRAMES]).mel
    assert len(unmatched) == len(expected)
    assert np.abs(unmatched - expected).max() > 1e-2
