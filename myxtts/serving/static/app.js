// The page of myxtts-serve: pick or add a voice, type text, hear it while it streams.
// Plain JavaScript, no dependencies (the page works offline). The API is in /docs.
//
// Speech is asked for as streamed raw PCM (16-bit little-endian mono at the X-Sample-Rate
// header's rate): each piece is played as soon as it arrives (AudioBufferSourceNodes scheduled
// back to back), and when the stream ends the whole of it becomes a WAV for the player and the
// download link. Recording a voice captures PCM with WebAudio and encodes a WAV here, so the
// server needs no ffmpeg for it.

const KEY_STORAGE = "myxtts-api-key";
const VOICE_STORAGE = "myxtts-voice";
const LEAD_SECONDS = 0.1; // how far ahead of "now" the first piece of a stream is scheduled
const MAX_RECORD_SECONDS = 30; // the model reads only the first seconds of a reference anyway

const $ = (id) => document.getElementById(id);
const el = {
  modelInfo: $("model-info"), keyBox: $("key-box"), keyForm: $("key-form"), key: $("api-key"),
  keyForget: $("key-forget"), voice: $("voice"), voiceDelete: $("voice-delete"),
  addVoice: $("add-voice"), voiceName: $("voice-name"), voiceFile: $("voice-file"),
  record: $("record"), voiceStatus: $("voice-status"), text: $("text"), textCount: $("text-count"),
  language: $("language"), speed: $("speed"), speak: $("speak"), stop: $("stop"),
  status: $("status"), error: $("error"), player: $("player"), download: $("download"),
};

let model = null; // data[0] of GET /v1/models
let apiKey = storageGet(KEY_STORAGE) || "";
let audioContext = null; // made on the first Speak click (browsers want a user gesture)
let speaking = null; // the request in flight: {controller, stopped}
const liveSources = new Set(); // AudioBufferSourceNodes scheduled and not yet ended
let audioUrl = null; // the object URL of the last WAV
let recording = null; // {stop} while the microphone records

// ---- small helpers ---------------------------------------------------------------------------

function storageGet(key) {
  try { return localStorage.getItem(key); } catch { return null; }
}

function storageSet(key, value) {
  try {
    if (value) localStorage.setItem(key, value); else localStorage.removeItem(key);
  } catch { /* storage disabled: the value lasts until the page is reloaded */ }
}

function showError(error) {
  el.error.textContent = (error && error.message) || String(error);
  el.error.hidden = false;
}

function clearError() {
  el.error.hidden = true;
  el.error.textContent = "";
}

/** The status line, and for scripts and tests: data-state (idle, streaming, done, error),
 * data-chunks (pieces of PCM received), data-seconds (of audio received), data-live (seconds
 * of it scheduled for live playback). */
function setStatus(state, text, { chunks = 0, seconds = 0, live = 0 } = {}) {
  el.status.dataset.state = state;
  el.status.dataset.chunks = String(chunks);
  el.status.dataset.seconds = seconds.toFixed(3);
  el.status.dataset.live = live.toFixed(3);
  el.status.textContent = text;
}

function setVoiceStatus(text) {
  el.voiceStatus.textContent = text;
}

function languageName(code) {
  try {
    const name = new Intl.DisplayNames([navigator.language || "en"], { type: "language" }).of(code);
    return name && name !== code ? `${name} (${code})` : code;
  } catch {
    return code;
  }
}

/** A WAV file (16-bit mono) of `parts`, Uint8Arrays of little-endian PCM. */
function wavBlob(parts, byteLength, rate) {
  const header = new DataView(new ArrayBuffer(44));
  const text = (offset, s) => {
    for (let i = 0; i < s.length; i++) header.setUint8(offset + i, s.charCodeAt(i));
  };
  text(0, "RIFF");
  header.setUint32(4, 36 + byteLength, true);
  text(8, "WAVE");
  text(12, "fmt ");
  header.setUint32(16, 16, true); // fmt chunk size
  header.setUint16(20, 1, true); // PCM
  header.setUint16(22, 1, true); // mono
  header.setUint32(24, rate, true);
  header.setUint32(28, rate * 2, true); // bytes per second
  header.setUint16(32, 2, true); // bytes per frame
  header.setUint16(34, 16, true); // bits per sample
  text(36, "data");
  header.setUint32(40, byteLength, true);
  return new Blob([header.buffer, ...parts], { type: "audio/wav" });
}

// ---- the API ---------------------------------------------------------------------------------

/** fetch() with the API key; any answer but 2xx throws an Error with the server's message. */
async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  if (apiKey) headers.set("Authorization", `Bearer ${apiKey}`);
  let response;
  try {
    response = await fetch(path, { ...options, headers });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new Error(`Could not reach the server (${e.message}). Is myxtts-serve still running?`);
  }
  if (response.ok) return response;
  let message = `The server answered ${response.status} ${response.statusText}.`;
  try {
    const body = await response.json();
    if (body && body.error && body.error.message) message = body.error.message;
  } catch { /* not JSON: keep the status line */ }
  if (response.status === 401) {
    showKeyBox();
    message = apiKey ? `The API key was not accepted: ${message}` : message;
  }
  const error = new Error(message);
  error.status = response.status;
  throw error;
}

function showKeyBox() {
  el.keyBox.hidden = false;
  el.key.value = apiKey;
  if (!apiKey) el.key.focus();
}

async function loadModel() {
  const body = await (await api("/v1/models")).json();
  model = body.data[0];
  el.language.replaceChildren(...model.languages.map((code) => {
    const option = new Option(languageName(code), code);
    option.selected = code === model.default_language;
    return option;
  }));
  el.language.disabled = model.languages.length < 2;
  el.modelInfo.textContent = `Model “${model.id}” · ${model.sample_rate} Hz · vocoder ` +
    `${model.vocoder} · ${model.languages.length} language(s)`;
  updateCount();
}

/** Fills the voice list; selects `wanted` (else the current or remembered voice). */
async function loadVoices(wanted) {
  const body = await (await api("/v1/voices")).json();
  const voices = body.data;
  wanted = wanted || el.voice.value || storageGet(VOICE_STORAGE);
  if (!voices.length) {
    el.voice.replaceChildren(new Option("No voices yet: add one below", ""));
    el.addVoice.open = true;
  } else {
    el.voice.replaceChildren(...voices.map((voice) => {
      const from = voice.references && voice.references.length
        ? ` (from ${voice.references.join(", ")})` : "";
      return new Option(voice.id + from, voice.id);
    }));
    if (voices.some((voice) => voice.id === wanted)) el.voice.value = wanted;
  }
  el.voiceDelete.disabled = !voices.length;
}

async function loadAll() {
  clearError();
  try {
    await Promise.all([loadModel(), loadVoices()]);
  } catch (e) {
    if (!model) el.modelInfo.textContent = "The server did not describe its model: see below.";
    showError(e);
  }
}

// ---- speaking --------------------------------------------------------------------------------

function stopLive() {
  for (const source of liveSources) {
    try { source.stop(); } catch { /* not started */ }
  }
  liveSources.clear();
}

/** Plays `block` (even-length little-endian PCM) at `playhead` or as soon as possible;
 * returns where the next block starts. */
function schedule(context, block, rate, playhead) {
  const view = new DataView(block.buffer, block.byteOffset, block.byteLength);
  const frames = block.byteLength >> 1;
  const buffer = context.createBuffer(1, frames, rate);
  const samples = buffer.getChannelData(0);
  for (let i = 0; i < frames; i++) samples[i] = view.getInt16(2 * i, true) / 32768;
  const source = context.createBufferSource();
  source.buffer = buffer;
  source.connect(context.destination);
  const start = Math.max(playhead, context.currentTime + LEAD_SECONDS);
  source.onended = () => liveSources.delete(source);
  source.start(start);
  liveSources.add(source);
  return start + buffer.duration;
}

function keepAudio(parts, bytes, rate) {
  if (audioUrl) URL.revokeObjectURL(audioUrl);
  audioUrl = URL.createObjectURL(wavBlob(parts, bytes, rate));
  el.player.src = audioUrl;
  el.download.href = audioUrl;
  el.download.hidden = false;
}

async function speak() {
  if (speaking) return;
  clearError();
  const voice = el.voice.value;
  if (!voice) {
    showError(new Error("Add a voice first (under 1. Voice): the model speaks in the voice of " +
                        "a recording."));
    el.addVoice.open = true;
    return;
  }
  // The AudioContext is made and resumed here, in the click, where browsers allow sound.
  let context = null;
  let noLive = "";
  try {
    audioContext = audioContext || new AudioContext();
    context = audioContext;
    context.resume().catch(() => {});
  } catch (e) {
    noLive = ` (no live playback here: ${e.message}; press play below)`;
  }
  stopLive();
  const run = { controller: new AbortController(), stopped: false };
  speaking = run;
  el.speak.disabled = true;
  el.stop.disabled = false;
  setStatus("streaming", "Asking the server…");
  const started = performance.now();
  const parts = []; // even-length Uint8Arrays of PCM
  let bytes = 0;
  let chunks = 0;
  let carry = null; // an odd byte left over from the previous chunk
  let firstAudio = null;
  let playhead = 0;
  let live = 0; // seconds scheduled for playback
  let rate = model ? model.sample_rate : 0;
  const seconds = () => (rate ? bytes / 2 / rate : 0);
  const progress = () => ({ chunks, seconds: seconds(), live });
  try {
    const response = await api("/v1/audio/speech", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({
        input: el.text.value, voice, language: el.language.value || undefined,
        speed: Number(el.speed.value) || 1, response_format: "pcm", stream: true,
      }),
      signal: run.controller.signal,
    });
    rate = Number(response.headers.get("X-Sample-Rate")) || rate;
    if (!rate) throw new Error("The server did not say the sample rate (X-Sample-Rate).");
    const reader = response.body.getReader();
    for (;;) {
      let { done, value } = await reader.read();
      if (done) break;
      if (!value || !value.byteLength) continue;
      chunks += 1;
      if (firstAudio === null) firstAudio = (performance.now() - started) / 1000;
      if (carry) {
        const joined = new Uint8Array(carry.byteLength + value.byteLength);
        joined.set(carry);
        joined.set(value, carry.byteLength);
        value = joined;
        carry = null;
      }
      const even = value.byteLength & ~1;
      if (even < value.byteLength) carry = value.slice(even);
      if (!even) continue;
      const block = value.slice(0, even); // a copy: its own buffer, 2-byte aligned
      parts.push(block);
      bytes += even;
      if (context) {
        try {
          playhead = schedule(context, block, rate, playhead);
          live += even / 2 / rate;
        } catch (e) {
          context = null;
          noLive = ` (no live playback here: ${e.message}; press play below)`;
        }
      }
      setStatus("streaming", `Streaming… first audio after ${firstAudio.toFixed(2)} s · ` +
                `${seconds().toFixed(1)} s of audio received${noLive}`, progress());
    }
    const took = (performance.now() - started) / 1000;
    keepAudio(parts, bytes, rate);
    if (!bytes) {
      setStatus("done", "The server sent no audio for this text.", progress());
    } else {
      setStatus("done", `Done: ${seconds().toFixed(1)} s of audio in ${took.toFixed(1)} s ` +
                `(first audio after ${firstAudio.toFixed(2)} s)${noLive}.`, progress());
    }
  } catch (e) {
    if (bytes) keepAudio(parts, bytes, rate); // what arrived stays playable
    if (run.stopped) {
      setStatus("idle", `Stopped after ${seconds().toFixed(1)} s of audio.`, progress());
    } else {
      if (bytes) {
        e = new Error(`The stream broke off after ${seconds().toFixed(1)} s of audio ` +
                      `(${e.message}); the server's log says why.`);
      }
      showError(e);
      setStatus("error", "No speech: the reason is below.", progress());
    }
  } finally {
    speaking = null;
    el.speak.disabled = false;
    el.stop.disabled = true;
  }
}

function stop() {
  stopLive();
  if (speaking) {
    speaking.stopped = true;
    speaking.controller.abort();
  }
}

function updateCount() {
  const max = model ? model.max_input_characters : null;
  el.textCount.textContent = `${el.text.value.length}${max ? ` / ${max}` : ""} characters`;
}

// ---- voices ----------------------------------------------------------------------------------

async function uploadVoice(file, filename) {
  clearError();
  const form = new FormData();
  form.append("file", file, filename);
  const name = el.voiceName.value.trim();
  if (name) form.append("name", name);
  setVoiceStatus(`Uploading ${filename}…`);
  el.voiceFile.disabled = el.record.disabled = true;
  try {
    const voice = await (await api("/v1/voices", { method: "POST", body: form })).json();
    storageSet(VOICE_STORAGE, voice.id);
    await loadVoices(voice.id);
    el.voiceName.value = "";
    setVoiceStatus(`Added the voice “${voice.id}”; it is selected above.`);
  } catch (e) {
    setVoiceStatus("");
    showError(e);
  } finally {
    el.voiceFile.disabled = el.record.disabled = false;
    el.voiceFile.value = "";
  }
}

async function deleteVoice() {
  const id = el.voice.value;
  if (!id || !confirm(`Delete the voice “${id}” from the server?`)) return;
  clearError();
  try {
    await api(`/v1/voices/${encodeURIComponent(id)}`, { method: "DELETE" });
    await loadVoices();
    setVoiceStatus(`Deleted the voice “${id}”.`);
  } catch (e) {
    showError(e);
  }
}

// The recorder's AudioWorklet: passes each 128-frame block (channels mixed to mono) to the page.
const CAPTURE_WORKLET = `
class MyxttsCapture extends AudioWorkletProcessor {
  process(inputs) {
    const channels = inputs[0];
    if (channels && channels.length) {
      const mono = new Float32Array(channels[0].length);
      for (const channel of channels)
        for (let i = 0; i < mono.length; i++) mono[i] += channel[i] / channels.length;
      this.port.postMessage(mono, [mono.buffer]);
    }
    return true;
  }
}
registerProcessor("myxtts-capture", MyxttsCapture);
`;

/** A 16-bit WAV of Float32Array blocks. */
function floatWav(blocks, frames, rate) {
  const pcm = new Uint8Array(frames * 2);
  const view = new DataView(pcm.buffer);
  let offset = 0;
  for (const block of blocks) {
    for (let i = 0; i < block.length; i++, offset += 2) {
      const x = Math.max(-1, Math.min(1, block[i]));
      view.setInt16(offset, x < 0 ? x * 32768 : x * 32767, true);
    }
  }
  return wavBlob([pcm], pcm.byteLength, rate);
}

async function toggleRecording() {
  if (recording) {
    await recording.stop();
    return;
  }
  clearError();
  if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
    showError(new Error("This browser gives the microphone only to secure pages: open the page " +
                        "as http://localhost:PORT/ (or over https), or upload a recording file."));
    return;
  }
  let stream;
  try {
    stream = await navigator.mediaDevices.getUserMedia({
      audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false,
               autoGainControl: false },
    });
  } catch (e) {
    showError(new Error(e.name === "NotAllowedError"
      ? "The browser did not allow the microphone: allow it for this page and try again."
      : e.name === "NotFoundError" ? "No microphone found." : `No microphone: ${e.message}`));
    return;
  }
  const context = new AudioContext();
  const blocks = [];
  let frames = 0;
  const take = (block) => { blocks.push(block); frames += block.length; };
  let node;
  try {
    const source = context.createMediaStreamSource(stream);
    if (context.audioWorklet && typeof AudioWorkletNode === "function") {
      const url = URL.createObjectURL(new Blob([CAPTURE_WORKLET], { type: "text/javascript" }));
      try { await context.audioWorklet.addModule(url); } finally { URL.revokeObjectURL(url); }
      node = new AudioWorkletNode(context, "myxtts-capture");
      node.port.onmessage = (event) => take(event.data);
    } else {
      node = context.createScriptProcessor(4096, 1, 1);
      node.onaudioprocess = (event) => take(event.inputBuffer.getChannelData(0).slice());
    }
    const mute = context.createGain(); // the graph must reach the output to run; silently
    mute.gain.value = 0;
    source.connect(node);
    node.connect(mute);
    mute.connect(context.destination);
    await context.resume();
  } catch (e) {
    stream.getTracks().forEach((track) => track.stop());
    context.close();
    showError(new Error(`Cannot record here: ${e.message}`));
    return;
  }
  const timer = setInterval(() => {
    const seconds = frames / context.sampleRate;
    el.record.dataset.seconds = seconds.toFixed(1);
    setVoiceStatus(`Recording… ${seconds.toFixed(1)} s. Speak for a few seconds, then press ` +
                   `Stop recording.`);
    if (seconds >= MAX_RECORD_SECONDS && recording) recording.stop();
  }, 200);
  el.record.dataset.seconds = "0";
  el.record.textContent = "■ Stop recording";
  el.record.classList.add("recording");
  el.voiceFile.disabled = true;
  recording = {
    async stop() {
      recording = null;
      clearInterval(timer);
      stream.getTracks().forEach((track) => track.stop());
      node.disconnect();
      const rate = context.sampleRate;
      await context.close();
      el.record.textContent = "● Record";
      el.record.classList.remove("recording");
      el.voiceFile.disabled = false;
      if (!frames) {
        showError(new Error("Nothing was recorded: is the microphone muted?"));
        return;
      }
      setVoiceStatus(`Recorded ${(frames / rate).toFixed(1)} s.`);
      await uploadVoice(floatWav(blocks, frames, rate), "recording.wav");
    },
  };
}

// ---- wiring ----------------------------------------------------------------------------------

el.speak.addEventListener("click", speak);
el.stop.addEventListener("click", stop);
el.text.addEventListener("input", updateCount);
el.text.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) {
    event.preventDefault();
    speak();
  }
});
el.voice.addEventListener("change", () => storageSet(VOICE_STORAGE, el.voice.value));
el.voiceDelete.addEventListener("click", deleteVoice);
el.voiceFile.addEventListener("change", () => {
  const file = el.voiceFile.files[0];
  if (file) uploadVoice(file, file.name);
});
el.record.addEventListener("click", toggleRecording);
el.keyForm.addEventListener("submit", (event) => {
  event.preventDefault();
  apiKey = el.key.value.trim();
  storageSet(KEY_STORAGE, apiKey);
  loadAll();
});
el.keyForget.addEventListener("click", () => {
  apiKey = "";
  el.key.value = "";
  storageSet(KEY_STORAGE, "");
  loadAll();
});
window.addEventListener("unhandledrejection", (event) => showError(event.reason));

if (apiKey) showKeyBox();
updateCount();
loadAll();
