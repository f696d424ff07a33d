"""The web page of myxtts-serve (myxtts/serving/static) in headless Chromium, driven by Playwright,
against a real server over the tiny export (tests/serve_process.py): the page lists the voices,
streams speech into WebAudio and then into the <audio> player and the download link, adds a voice
from a file and from the microphone (Chromium's fake capture device playing the sample
recording), deletes one, shows the server's error messages and asks for an API key.

Debian's chromium (/usr/bin/chromium) is used: Playwright's own browser download needs the
network. Without chromium or the playwright package every test here is skipped, loudly.
"""

import base64
import io
import math
import shutil
import struct
import sys
import warnings

import httpx
import numpy as np
import pytest
import soundfile as sf

from tests.inference_helpers import REFERENCE_AUDIO
from tests.serve_process import ServerProcess, tiny_export, upload_reference

pytestmark = pytest.mark.slow

TIMEOUT_MS = 30_000  # any one wait on the page (a decode of the tiny model takes < 1 s)
VOICE = "sample"  # uploaded with httpx before the page opens
TEXT = "Hello there. This is a second sentence."
RECORD_SECONDS = 3.0

# Resolves with the <audio> element's duration once it has read the WAV's header.
PLAYER_DURATION = """() => new Promise((resolve, reject) => {
  const player = document.getElementById("player");
  if (player.readyState >= 1) { resolve(player.duration); return; }
  player.addEventListener("loadedmetadata", () => resolve(player.duration), { once: true });
  player.addEventListener("error", () => reject(new Error(
    `the player cannot load its source: ${player.error && player.error.message}`)), { once: true });
})"""

# Keeps the files the page uploads (FormData `file`) in window.uploadedFiles, for the test to read.
KEEP_UPLOADS = """
window.uploadedFiles = [];
const pageFetch = window.fetch;
window.fetch = function (resource, options) {
  if (options && options.body instanceof FormData)
    window.uploadedFiles.push(options.body.get("file"));
  return pageFetch.apply(this, arguments);
};"""

# The bytes behind a blob: URL, base64.
BLOB_BYTES = """async (url) => {
  const bytes = new Uint8Array(await (await fetch(url)).arrayBuffer());
  let text = "";
  for (let i = 0; i < bytes.length; i += 8192)
    text += String.fromCharCode(...bytes.subarray(i, i + 8192));
  return btoa(text);
}"""


def _skip_loudly(reason: str):
    message = f"SKIPPED: the web page tests (tests/test_serve_page.py) did not run: {reason}"
    bar = "!" * 100
    print(f"\n{bar}\n{message}\n{bar}", file=sys.stderr)
    warnings.warn(message)  # also in pytest's warnings summary, which -q shows
    pytest.skip(message)


@pytest.fixture(scope="module")
def chromium() -> str:
    try:
        # pylint: disable-next=import-outside-toplevel,unused-import
        import playwright.sync_api  # noqa: F401
    except ImportError as e:
        _skip_loudly(f"the Python package playwright is not installed ({e}); "
                     f"pip install playwright")
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        _skip_loudly("no chromium on PATH (Debian/Ubuntu: apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, chromium):  # pylint: disable=redefined-outer-name,unused-argument
    folder = str(tmp_path_factory.mktemp("serve_page"))
    tiny_export(folder)
    with ServerProcess(folder) as process:
        with httpx.Client(base_url=process.url, timeout=60) as client:
            response = upload_reference(client, VOICE)
            assert response.status_code == 201, response.text
        yield process


@pytest.fixture(scope="module")
def browser(chromium, tmp_path_factory):  # pylint: disable=redefined-outer-name
    # pylint: disable=import-outside-toplevel
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import sync_playwright
    # The fake microphone plays the sample recording (Chromium reads 16-bit WAV only).
    microphone = str(tmp_path_factory.mktemp("microphone") / "speech.wav")
    samples, rate = sf.read(REFERENCE_AUDIO, dtype="int16")
    sf.write(microphone, samples, rate, subtype="PCM_16")
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(executable_path=chromium, args=[
                "--no-sandbox", "--autoplay-policy=no-user-gesture-required",
                "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
                f"--use-file-for-fake-audio-capture={microphone}"])
        except PlaywrightError as e:
            _skip_loudly(f"{chromium} does not start under Playwright: {e}")
        yield launched
        launched.close()


@pytest.fixture
def page(browser, server):  # pylint: disable=redefined-outer-name
    """A new page (its own storage) on the server, not yet navigated; after the test, no script
    error happened in it and it asked nothing of another origin (no CDN)."""
    context = browser.new_context(base_url=server.url)
    context.set_default_timeout(TIMEOUT_MS)
    context.grant_permissions(["microphone"], origin=server.url)
    context.add_init_script(KEEP_UPLOADS)
    tab = context.new_page()
    script_errors, elsewhere = [], []
    tab.on("pageerror", lambda error: script_errors.append(str(error)))
    tab.on("request", lambda request: None if request.url.startswith(
        (server.url + "/", "blob:", "data:")) else elsewhere.append(request.url))
    yield tab
    context.close()
    assert not script_errors, f"script errors on the page: {script_errors}"
    assert not elsewhere, f"the page asked other origins: {elsewhere}"


def _open(tab, voice: str = VOICE):
    tab.goto("/")
    tab.wait_for_selector(f"#voice option[value='{voice}']", state="attached")
    tab.select_option("#voice", voice)


def _speak(tab, text: str) -> dict:
    tab.fill("#text", text)
    tab.click("#speak")
    tab.wait_for_selector("#status:is([data-state='done'], [data-state='error'])")
    status = tab.locator("#status")
    assert status.get_attribute("data-state") == "done", tab.text_content("#error")
    return {name: float(status.get_attribute(f"data-{name}"))
            for name in ("chunks", "seconds", "live")}


def _pcm(server, text: str, **fields) -> np.ndarray:  # pylint: disable=redefined-outer-name
    """What the page was sent: the same request with httpx, as int16 samples."""
    response = httpx.post(server.url + "/v1/audio/speech", timeout=60, json=dict(
        input=text, voice=VOICE, response_format="pcm", stream=True, **fields))
    assert response.status_code == 200, response.text
    return np.frombuffer(response.content, "<i2")


def _sample_rate(server) -> int:  # pylint: disable=redefined-outer-name
    return int(httpx.get(server.url + "/v1/models").json()["data"][0]["sample_rate"])


def _error_text(tab) -> str:
    tab.wait_for_selector("#error[role='alert']", state="visible")
    return tab.text_content("#error")


def test_speech_streams_into_live_playback_the_player_and_the_download(page, server):
    _open(page)
    assert page.input_value("#voice") == VOICE
    assert page.input_value("#language") == "en"  # the model's default_language
    assert page.input_value("#speed") == "1"
    assert page.is_hidden("#error")

    progress = _speak(page, TEXT)

    expected = _pcm(server, TEXT)
    rate = _sample_rate(server)
    assert len(expected) > 0
    assert progress["chunks"] >= 1
    assert progress["seconds"] == pytest.approx(len(expected) / rate, abs=1e-3)
    assert progress["live"] == pytest.approx(progress["seconds"], abs=1e-3), \
        "not every piece of the stream was scheduled on the AudioContext"
    src = page.get_attribute("#player", "src")
    assert src.startswith("blob:")
    duration = page.evaluate(PLAYER_DURATION)
    assert isinstance(duration, (int, float)) and math.isfinite(duration) and duration > 0
    assert duration == pytest.approx(len(expected) / rate, abs=1e-3)
    assert page.is_visible("#download")
    assert page.get_attribute("#download", "download") == "speech.wav"
    href = page.get_attribute("#download", "href")
    assert href.startswith("blob:")
    # The WAV holds the whole stream, samples in order (decoding is deterministic on CPU).
    wav = base64.b64decode(page.evaluate(BLOB_BYTES, href))
    samples, wav_rate = sf.read(io.BytesIO(wav), dtype="int16")
    assert wav_rate == rate and samples.shape == expected.shape
    assert np.abs(samples.astype(np.int32) - expected).max() <= 4
    assert page.is_hidden("#error")


def test_the_page_sends_language_and_speed(page, server):
    _open(page)
    page.select_option("#language", "de")
    page.fill("#speed", "2")
    with page.expect_request("**/v1/audio/speech") as request:
        progress = _speak(page, TEXT)
    assert request.value.post_data_json == {
        "input": TEXT, "voice": VOICE, "language": "de", "speed": 2, "response_format": "pcm",
        "stream": True}
    assert progress["seconds"] == pytest.approx(
        len(_pcm(server, TEXT, language="de", speed=2)) / _sample_rate(server), abs=1e-3)


def test_a_voice_from_a_file_is_added_selected_and_deleted(page, server):
    _open(page)
    page.click("#add-voice summary")
    page.fill("#voice-name", "from-file")
    page.set_input_files("#voice-file", REFERENCE_AUDIO)
    page.wait_for_selector("#voice option[value='from-file']", state="attached")
    assert page.input_value("#voice") == "from-file"
    assert "from-file" in page.text_content("#voice-status")
    voices = httpx.get(server.url + "/v1/voices").json()["data"]
    assert [v["references"] for v in voices if v["id"] == "from-file"] == [["S003.flac"]]
    _speak(page, "It speaks in the new voice.")

    page.once("dialog", lambda dialog: dialog.accept())
    page.click("#voice-delete")
    page.wait_for_selector("#voice option[value='from-file']", state="detached")
    assert "from-file" not in [v["id"] for v in httpx.get(server.url + "/v1/voices").json()["data"]]
    assert page.is_hidden("#error")


def test_a_recording_from_the_microphone_becomes_a_voice(page, server):
    _open(page)
    page.click("#add-voice summary")
    page.fill("#voice-name", "recorded")
    page.click("#record")
    page.wait_for_function(
        f"Number(document.getElementById('record').dataset.seconds) >= {RECORD_SECONDS}")
    page.click("#record")
    page.wait_for_selector("#voice option[value='recorded']", state="attached")
    assert page.input_value("#voice") == "recorded"
    assert page.is_hidden("#error"), page.text_content("#error")

    # The upload is a 16-bit mono WAV made in the page, of sound (not silence).
    name, wav = page.evaluate(f"""async () => {{
      const file = window.uploadedFiles.at(-1);
      return [file.name, await ({BLOB_BYTES})(URL.createObjectURL(file))];
    }}""")
    wav = base64.b64decode(wav)
    assert name == "recording.wav" and wav[:4] == b"RIFF" and wav[8:16] == b"WAVEfmt "
    channels, rate, _, _, bits = struct.unpack("<HIIHH", wav[22:36])
    assert (channels, bits, wav[36:40]) == (1, 16, b"data")
    frames = struct.unpack("<I", wav[40:44])[0] // 2
    assert len(wav) == 44 + 2 * frames
    assert frames >= RECORD_SECONDS * rate
    samples = np.frombuffer(wav[44:], "<i2").astype(np.float64)
    assert np.sqrt(np.mean(samples ** 2)) > 100
    assert "recorded" in [v["id"] for v in httpx.get(server.url + "/v1/voices").json()["data"]]
    httpx.delete(server.url + "/v1/voices/recorded")


def test_the_server_error_messages_are_shown(page):
    _open(page)
    # Empty text: the page sends it; the server's answer (400, empty_input) is shown.
    with page.expect_response("**/v1/audio/speech") as answer:
        page.fill("#text", "")
        page.click("#speak")
    assert answer.value.status == 400
    assert answer.value.json()["error"]["code"] == "empty_input"
    assert "input is empty" in _error_text(page)
    assert page.get_attribute("#status", "data-state") == "error"
    assert page.get_attribute("#player", "src") is None

    # A character outside the model's vocabulary.
    page.fill("#text", "It costs 5 €.")
    page.click("#speak")
    page.wait_for_function("document.getElementById('error').textContent.includes('vocabulary')")
    assert "€" in _error_text(page)
    assert page.get_attribute("#status", "data-state") == "error"

    # A file that is no recording.
    page.click("#add-voice summary")
    page.set_input_files("#voice-file", files=[{
        "name": "notes.txt", "mimeType": "text/plain", "buffer": b"not a recording\n" * 100}])
    page.wait_for_function("document.getElementById('error').textContent.includes('notes.txt')")
    assert "Cannot read the reference audio" in _error_text(page)

    # A successful request clears the error.
    _speak(page, "Fine again.")
    assert page.is_hidden("#error")


def test_the_page_asks_for_an_api_key_and_sends_it(page, server):
    """The server's key check is stood in for by a route (the 401 body is the server's), so
    this module needs one server; the server's own key check is a test of the API, not of the
    page."""
    key = "sesame-123"
    unauthorized = []

    def require_key(route):
        if route.request.headers.get("authorization") == f"Bearer {key}":
            route.continue_()
            return
        unauthorized.append(route.request.url)
        route.fulfill(status=401, json={"error": {
            "message": "This server needs an API key: send the header 'Authorization: Bearer "
                       "<key>'.", "type": "authentication_error", "param": "authorization",
            "code": "invalid_api_key"}})

    page.route(f"{server.url}/v1/**", require_key)
    page.goto("/")
    page.wait_for_selector("#api-key", state="visible")
    assert "needs an API key" in _error_text(page)
    assert unauthorized

    page.fill("#api-key", key)
    page.press("#api-key", "Enter")
    page.wait_for_selector(f"#voice option[value='{VOICE}']", state="attached")
    assert page.is_hidden("#error")
    unauthorized.clear()
    progress = _speak(page, "With a key.")
    assert progress["chunks"] >= 1 and not unauthorized

    # Remembered: a reload needs no typing.
    page.reload()
    page.wait_for_selector(f"#voice option[value='{VOICE}']", state="attached")
    assert page.evaluate("localStorage.getItem('myxtts-api-key')") == key
    assert page.input_value("#api-key") == key
    assert not unauthorized
