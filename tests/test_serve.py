"""myxtts-serve as people use it: a real server process on 127.0.0.1 (tests/serve_process.py),
started from its folder with relative paths, driven with httpx: every endpoint, every bad input,
16 concurrent requests, slow and vanished clients, the API key, kill -9 and a restart keeping
the voices, SIGTERM finishing a request in flight, a voice adapted by myxtts-synthesize spoken
with its postnet."""

import io
import os
import subprocess
import sys
import threading

import httpx
import numpy as np
import pytest
import soundfile as sf

from myxtts.inference.voices import Voice
from tests.inference_helpers import REFERENCE_AUDIO, REFERENCE_TEXT
from tests.serve_process import EXPORT, ServerProcess, tiny_export, upload_reference

pytestmark = pytest.mark.slow

UPLOAD_LIMIT_MB = 1.0
TEXTS = ["Hello there. How are you today?", "A second text.", "The third one is longer, with a "
         "clause or two.", "Four.", "Numbers like five and six.", "Sixth text here.",
         "Seventh, please.", "Eight is great.", "Nine lives.", "Ten to go.", "Eleven.",
         "Twelve of them.", "Thirteen.", "Fourteen and more.", "Fifteen.", "The last, sixteen."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("serve"))
    tiny_export(path)
    return path


@pytest.fixture(scope="module")
def server(folder):
    with ServerProcess(folder, "--max-upload-mb", str(UPLOAD_LIMIT_MB), "--max-wait-ms",
                       "500") as running:
        with httpx.Client(base_url=running.url, timeout=120) as client:
            assert upload_reference(client, "anna").status_code == 201
        yield running


@pytest.fixture()
def client(server):
    with httpx.Client(base_url=server.url, timeout=120) as c:
        yield c


def speech(client, text="Hello there.", **fields):
    return client.post("/v1/audio/speech", json={"input": text, "voice": "anna", **fields})


def snr_db(signal: np.ndarray, reference: np.ndarray) -> float:
    noise = float(np.sum((signal - reference) ** 2)) + 1e-12
    return 10 * np.log10(float(np.sum(reference ** 2)) / noise)


def pcm_samples(content: bytes) -> np.ndarray:
    return np.frombuffer(content, "<i2").astype(np.float32) / 32767.0


# ---- endpoints --------------------------------------------------------------------------------

def test_health_models_docs_and_page(client):
    assert client.get("/health").json()["status"] == "ok"
    model = client.get("/v1/models").json()["data"][0]
    assert model["id"] == "myxtts" and model["sample_rate"] == 16000
    assert model["languages"] == ["en", "de", "es"]
    assert set(model["response_formats"]) >= {"wav", "pcm", "flac"}
    docs = client.get("/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()
    assert "cdn" not in docs.text.lower() and "http" not in docs.text.split("<body>")[-1]
    assert client.get("/static-offline-docs/swagger-ui-bundle.js").status_code == 200
    assert "/v1/audio/speech" in client.get("/openapi.json").json()["paths"]
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_voices_are_made_listed_and_deleted(client, folder):
    made = upload_reference(client, "bert")
    assert made.status_code == 201, made.text
    assert made.json()["id"] == "bert" and made.json()["references"] == ["S003.flac"]
    assert os.path.isfile(os.path.join(folder, "voices", "bert.npz"))
    assert "bert" in [v["id"] for v in client.get("/v1/voices").json()["data"]]
    assert upload_reference(client, "bert").status_code == 409
    with open(REFERENCE_AUDIO, "rb") as f:  # no name: the id comes from the file name
        unnamed = client.post("/v1/voices", files={"file": ("My Voice!.flac", f)})
    assert unnamed.status_code == 201 and unnamed.json()["id"] == "My-Voice"
    assert client.delete("/v1/voices/bert").json()["deleted"] is True
    assert client.delete("/v1/voices/My-Voice").status_code == 200
    assert not os.path.exists(os.path.join(folder, "voices", "bert.npz"))
    assert client.delete("/v1/voices/bert").status_code == 404
    assert [v["id"] for v in client.get("/v1/voices").json()["data"]] == ["anna"]


def test_every_format_is_audio_of_the_same_length(client):
    wav = speech(client, response_format="wav")
    assert wav.status_code == 200 and wav.headers["content-type"] == "audio/wav"
    samples, rate = sf.read(io.BytesIO(wav.content), dtype="float32")
    assert rate == 16000 and len(samples) > 1000 and np.abs(samples).max() > 0.001
    pcm = speech(client, response_format="pcm")
    assert pcm.headers["x-sample-rate"] == "16000"
    np.testing.assert_allclose(pcm_samples(pcm.content), samples, atol=2e-3)
    for name in ("flac", "mp3", "opus"):
        response = speech(client, response_format=name)
        assert response.status_code == 200, (name, response.text)
        decoded, decoded_rate = sf.read(io.BytesIO(response.content), dtype="float32")
        assert abs(len(decoded) / decoded_rate - len(samples) / rate) < 0.1, name
    default = speech(client)  # OpenAI's default format: mp3
    assert default.headers["content-type"] == "audio/mpeg"


def test_streams_are_the_whole_audio_in_chunks(client):
    whole = pcm_samples(speech(client, TEXTS[0], response_format="pcm").content)
    chunks = []
    with client.stream("POST", "/v1/audio/speech", json={
            "input": TEXTS[0], "voice": "anna", "response_format": "pcm", "stream": True}) as r:
        assert r.status_code == 200 and r.headers.get("transfer-encoding") == "chunked"
        chunks = list(r.iter_raw())
    streamed = pcm_samples(b"".join(chunks))
    assert len(chunks) >= 2
    np.testing.assert_allclose(streamed, whole, atol=2e-3)
    with client.stream("POST", "/v1/audio/speech", json={
            "input": TEXTS[0], "voice": "anna", "response_format": "wav", "stream": True}) as r:
        body = r.read()
    assert body[:4] == b"RIFF" and body.count(b"RIFF") == 1 and body[36:40] == b"data"
    np.testing.assert_allclose(pcm_samples(body[44:]), whole, atol=2e-3)


def test_speed_changes_the_duration(client):
    lengths = {speed: len(speech(client, TEXTS[2], response_format="pcm",
                                 speed=speed).content) for speed in (0.5, 1.0, 2.0)}
    assert lengths[0.5] / lengths[1.0] == pytest.approx(2.0, rel=0.15)
    assert lengths[2.0] / lengths[1.0] == pytest.approx(0.5, rel=0.15)


def test_metrics_count_requests_batches_and_audio(client):
    speech(client, response_format="wav")
    text = client.get("/metrics").text
    values = {line.split(" ")[0]: float(line.split(" ")[1]) for line in text.splitlines()
              if line and not line.startswith("#")}
    assert values['myxtts_requests_total{endpoint="/v1/audio/speech",method="POST",'
                  'status="200"}'] >= 1
    assert values["myxtts_audio_seconds_total"] > 0
    assert values["myxtts_batch_size_count"] >= 1
    assert values["myxtts_speech_time_to_first_byte_seconds_count"] >= 1
    assert "myxtts_queue_depth" in values


# ---- bad input --------------------------------------------------------------------------------

def short_tone(path: str, seconds: float) -> str:
    t = np.arange(int(16000 * seconds)) / 16000
    sf.write(path, 0.3 * np.sin(2 * np.pi * 220 * t), 16000)
    return path


def test_a_too_short_reference_is_refused_alike_by_server_api_and_cli(client, folder,
                                                                       tmp_path):
    # pylint: disable=import-outside-toplevel  (TensorFlow in the test process only here)
    from myxtts.config import XTTSConfig
    from myxtts.inference.reference_audio import ReferenceTooShortError
    from myxtts.inference.synthesizer import Synthesizer
    run = os.path.join(folder, "runs", "tiny")
    shortest = XTTSConfig.from_yaml(os.path.join(run, "config.yaml")).data.ref_min_seconds
    path = short_tone(str(tmp_path / "short.wav"), shortest * 0.6)
    served = upload_reference(client, "short", path)
    assert served.status_code == 400
    messages = [served.json()["error"]["message"]]
    with pytest.raises(ReferenceTooShortError) as refused:
        Synthesizer.from_checkpoint_dir(run).speaker_latents(path)
    messages.append(str(refused.value).replace(path, "short.wav"))
    cli = subprocess.run([sys.executable, "-m", "myxtts.synthesize", "--checkpoint-dir", run,
                          "--reference-audio", path, "--text", "Hello.", "--output",
                          str(tmp_path / "out.wav")], capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode == 2, cli.stderr[-2000:]
    said = [line for line in cli.stderr.splitlines() if line.startswith("error: ")]
    messages.append(said[0][len("error: "):].replace(path, "short.wav"))
    assert len(set(messages)) == 1, messages
    assert f"{shortest * 0.6:.2f} s of sound" in messages[0]
    assert f"less than the {shortest:g} s this model's voices are made from" in messages[0]


def test_bad_input_gets_a_4xx_naming_the_field(client, folder, tmp_path):
    cases = [  # (name, request, status, param, code)
        ("empty input", lambda: speech(client, "  "), 400, "input", "empty_input"),
        ("long input", lambda: speech(client, "a" * 4097), 400, "input", "input_too_long"),
        ("unknown voice", lambda: speech(client, voice="nobody"), 400, "voice",
         "voice_not_found"),
        ("traversal voice", lambda: speech(client, voice="../../etc/passwd"), 400, "voice",
         "invalid_voice"),
        ("malformed JSON", lambda: client.post("/v1/audio/speech", content=b'{"input": "hi",',
                                               headers={"content-type": "application/json"}),
         400, "body", "invalid_json"),
        ("no input", lambda: client.post("/v1/audio/speech", json={"voice": "anna"}), 400,
         "input", "invalid_value"),
        ("unknown language", lambda: speech(client, language="xx"), 400, "language",
         "unknown_language"),
        ("characters outside the vocabulary", lambda: speech(client, "Price: 5 €"), 400,
         "input", "unknown_characters"),
        ("speed too low", lambda: speech(client, speed=0.1), 400, "speed", "invalid_speed"),
        ("speed too high", lambda: speech(client, speed=4.5), 400, "speed", "invalid_speed"),
        ("unknown format", lambda: speech(client, response_format="aac"), 400,
         "response_format", "unsupported_format"),
        ("streamed mp3", lambda: speech(client, response_format="mp3", stream=True), 400,
         "stream", "unsupported_stream_format"),
        ("traversal voice name", lambda: upload_reference(client, "../evil"), 400, "name",
         "invalid_voice_id"),
        ("non-audio upload", lambda: client.post(
            "/v1/voices", files={"file": ("notes.wav", b"not audio at all" * 100)}), 400,
         "file", "invalid_audio"),
        ("oversize upload", lambda: client.post(
            "/v1/voices", files={"file": ("big.wav", os.urandom(int(1.5 * 2 ** 20)))}), 413,
         "file", "upload_too_large"),
        ("too short reference", lambda: upload_reference(
            client, "short", short_tone(str(tmp_path / "short.wav"), 0.8)), 400, "file",
         "audio_too_short"),
        ("silent reference", lambda: client.post("/v1/voices", files={"file": (
            "silence.wav", _wav_bytes(np.zeros(48000, np.float32)))}), 400, "file",
         "invalid_audio"),
        ("bad voice id to delete", lambda: client.delete("/v1/voices/a..b"), 400, "voice_id",
         "invalid_voice_id"),
        ("unknown voice to delete", lambda: client.delete("/v1/voices/nobody"), 404,
         "voice_id", "voice_not_found"),
    ]
    for name, send, status, param, code in cases:
        response = send()
        assert response.status_code == status, (name, response.status_code, response.text)
        error = response.json()["error"]
        assert (error["param"], error["code"]) == (param, code), (name, error)
        assert error["message"] and "Traceback" not in error["message"], name
    assert client.get("/health").status_code == 200
    assert [v["id"] for v in client.get("/v1/voices").json()["data"]] == ["anna"]
    assert sorted(os.listdir(os.path.join(folder, "voices"))) == ["anna.npz"]
    assert not os.path.exists(os.path.join(folder, "evil.npz"))


def _wav_bytes(samples: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    sf.write(buffer, samples, 16000, format="WAV")
    return buffer.getvalue()


# ---- concurrency ------------------------------------------------------------------------------

def test_sixteen_concurrent_requests_each_get_their_own_audio(client, server):
    alone = [pcm_samples(speech(client, text, response_format="pcm").content) for text in TEXTS]
    before = _metric(client, "myxtts_batch_size_count")
    results = [None] * len(TEXTS)

    def ask(index):
        with httpx.Client(base_url=server.url, timeout=300) as own:
            results[index] = speech(own, TEXTS[index], response_format="pcm")

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(TEXTS))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for text, response, solo in zip(TEXTS, results, alone):
        assert response.status_code == 200, (text, response.text)
        together = pcm_samples(response.content)
        assert len(together) == len(solo), text  # its own text, not another request's
        # A batch's float sums round differently from a lone decode's, and Griffin-Lim's
        # phases amplify that a little: the same audio, to 30 dB.
        assert snr_db(together, solo) > 30, (text, snr_db(together, solo))
    batches = _metric(client, "myxtts_batch_size_count") - before
    assert batches < len(TEXTS), "concurrent requests were not decoded together"


def _metric(client, name: str) -> float:
    for line in client.get("/metrics").text.splitlines():
        if line.startswith(name + " "):
            return float(line.split(" ")[1])
    raise AssertionError(f"{name} not in /metrics")


def test_slow_and_vanished_clients_do_not_block_others(client, server):
    long_text = " ".join(TEXTS)
    with httpx.Client(base_url=server.url, timeout=120) as slow:
        with slow.stream("POST", "/v1/audio/speech", json={
                "input": long_text, "voice": "anna", "response_format": "pcm",
                "stream": True}) as stalled:
            assert stalled.status_code == 200
            # This client reads nothing while others are answered.
            for text in TEXTS[:3]:
                assert speech(client, text, response_format="wav").status_code == 200
            vanished = httpx.Client(base_url=server.url, timeout=120)
            with vanished.stream("POST", "/v1/audio/speech", json={
                    "input": long_text, "voice": "anna", "response_format": "pcm",
                    "stream": True}) as gone:
                next(gone.iter_raw())
            vanished.close()  # went away mid-stream
            assert speech(client, TEXTS[1], response_format="wav").status_code == 200
            total = sum(len(chunk) for chunk in stalled.iter_raw())
    assert total > 0
    assert client.get("/health").json()["status"] == "ok"


# ---- the API key, kill -9 and restart, SIGTERM ------------------------------------------------

def test_api_key_restart_after_kill_and_graceful_stop(folder):
    key = "s3cret-key-for-test"
    voices = "voices-keyed"
    flags = ("--voices-dir", voices, "--api-key", key)
    auth = {"Authorization": f"Bearer {key}"}
    first = ServerProcess(folder, *flags).start()
    try:
        with httpx.Client(base_url=first.url, timeout=120) as c:
            assert c.get("/health").status_code == 200  # no key needed
            for method, path in (("GET", "/v1/voices"), ("GET", "/v1/models"),
                                 ("GET", "/metrics"), ("POST", "/v1/audio/speech"),
                                 ("DELETE", "/v1/voices/anna")):
                for headers in ({}, {"Authorization": "Bearer wrong"},
                                {"Authorization": key}):
                    answer = c.request(method, path, headers=headers, json={})
                    assert answer.status_code == 401, (method, path, headers)
                    assert answer.json()["error"]["code"] == "invalid_api_key"
            assert upload_reference(c, "kept", **auth).status_code == 201
            before = c.post("/v1/audio/speech", headers=auth, json={
                "input": TEXTS[0], "voice": "kept", "response_format": "pcm"}).content
    finally:
        first.kill()  # kill -9
    assert key not in first.log()
    names = os.listdir(os.path.join(folder, voices))
    assert names == ["kept.npz"], names  # nothing half-written left behind

    second = ServerProcess(folder, *flags).start()
    try:
        with httpx.Client(base_url=second.url, timeout=120, headers=auth) as c:
            assert [v["id"] for v in c.get("/v1/voices").json()["data"]] == ["kept"]
            after = c.post("/v1/audio/speech", json={
                "input": TEXTS[0], "voice": "kept", "response_format": "pcm"}).content
            np.testing.assert_allclose(pcm_samples(after), pcm_samples(before), atol=2e-3)
            # SIGTERM while a long request streams: it still gets all its audio.
            whole = len(c.post("/v1/audio/speech", json={
                "input": " ".join(TEXTS), "voice": "kept", "response_format": "pcm"}).content)
            with c.stream("POST", "/v1/audio/speech", json={
                    "input": " ".join(TEXTS), "voice": "kept", "response_format": "pcm",
                    "stream": True}) as r:
                chunks = r.iter_raw()
                received = len(next(chunks))
                status = {}
                stopper = threading.Thread(
                    target=lambda: status.setdefault("code", second.terminate(120)))
                stopper.start()
                received += sum(len(chunk) for chunk in chunks)
            stopper.join()
        assert received == whole
        assert status["code"] == 0  # a requested stop
    finally:
        second.kill()
    assert "Waiting for application shutdown." in second.log()
    assert "Finished server process" in second.log()
    assert key not in second.log()


def test_ctrl_c_in_a_terminal_stops_it_without_a_traceback(folder):
    with ServerProcess(folder, terminal=True) as running:
        with httpx.Client(base_url=running.url, timeout=120) as c:
            assert c.get("/health").status_code == 200
        status = running.interrupt()
    log = running.log()
    assert status == 130, log  # the shell's status for an interrupted command
    assert "Finished server process" in log, log
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log


def test_an_adapted_voice_file_is_spoken_with_its_postnet(folder):
    # pylint: disable=import-outside-toplevel  (TensorFlow in the test process only here)
    from myxtts.inference.exported_model import ExportedModel
    from myxtts.inference.synthesizer import Synthesizer
    synth = Synthesizer.from_checkpoint_dir(os.path.join(folder, "runs", "tiny"))
    latents = synth.speaker_latents(REFERENCE_AUDIO)
    adapted = synth.adapt_to_references(latents, [REFERENCE_AUDIO], [REFERENCE_TEXT], "en",
                                        steps=5, learning_rate=1e-2, part="postnet")
    voices = os.path.join(folder, "voices-adapted")
    synth.voice(REFERENCE_AUDIO, adapted).save(os.path.join(voices, "adapted.npz"))
    synth.voice(REFERENCE_AUDIO).save(os.path.join(voices, "plain.npz"))
    # the export's postnet_window_adapted runs the voice's postnet as the Synthesizer does
    model = ExportedModel(os.path.join(folder, EXPORT))
    frames = np.random.default_rng(0).normal(
        -2.0, 1.0, [1, 30, synth.config.data.n_mels]).astype(np.float32)
    voice = Voice.load(os.path.join(voices, "adapted.npz"))
    inputs = model.voice_inputs(voice)
    assert model.voice_inputs(voice)[1] is inputs[1]  # one array a voice: its requests batch
    synth.use_weights(adapted)
    try:
        expected = synth.model.postnet(frames, np.ones([1, 30], bool)).numpy()
    finally:
        synth.use_weights(None)
    np.testing.assert_allclose(model.decoder.postnet_batch(frames, 0, inputs[0][None],
                                                          inputs[1]), expected, atol=1e-5)
    with ServerProcess(folder, "--voices-dir", "voices-adapted") as running:
        with httpx.Client(base_url=running.url, timeout=120) as c:
            assert [v["id"] for v in c.get("/v1/voices").json()["data"]] == ["adapted", "plain"]
            audio = {name: pcm_samples(c.post("/v1/audio/speech", json={
                "input": TEXTS[0], "voice": name, "response_format": "pcm"}).content)
                for name in ("adapted", "plain")}
            again = pcm_samples(c.post("/v1/audio/speech", json={
                "input": TEXTS[0], "voice": "adapted", "response_format": "pcm"}).content)
    # the same decode (as long), another postnet: other audio; the same again
    assert audio["adapted"].size == audio["plain"].size
    assert snr_db(audio["adapted"], audio["plain"]) < 20
    np.testing.assert_allclose(again, audio["adapted"], atol=2e-3)


def test_cli_refuses_a_missing_model(tmp_path):
    result = subprocess.run([sys.executable, "-m", "myxtts.serve", "--model", "models/none"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "--model models/none does not exist" in result.stderr
    assert "Traceback" not in result.stderr
