"""LiteSynthesizer: text + a voice → speech from an on-device export, without TensorFlow.

    synth = LiteSynthesizer("models/myxtts-lite")           # export root or a version folder
    latents = synth.latents_of(Voice.load("v.npz"))          # a voice of the same checkpoint
    latents = synth.speaker_latents("speaker.wav")           # or from a recording
    waveform, mel = synth.synthesize("Hello there.", "en", latents)
    for chunk in synth.stream("Hello there. How are you?", "en", latents):
        play(chunk)

The host runs the decode through the one chunk scheduler (myxtts.decoding.scheduler, batches of
up to the export's decode_rows sentences): decode_start once per batch, then decode_steps (K
steps a call, the state resident in the runtime: myxtts.lite.resident) until the stop head or
the length cap ends each row; the postnet and the vocoder run on windows of the
export's fixed window length (myxtts.inference.streaming.WindowedStage, so each output frame
gets its full context and the windows join to the whole-mel result). The text front end
(TextFrontEnd from the export's config.yaml and vocab.json), the sentence splitting, the
scheduler and the streaming driver are the TensorFlow-free modules the synthesizer and the
server use; the log-mel
of references and the Griffin-Lim of exports without a neural vocoder are numpy
(myxtts.lite.features).
"""

from __future__ import annotations

import os
import threading
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from myxtts.config import XTTSConfig
from myxtts.data.text import Tokenizer
from myxtts.decoding import scheduler
from myxtts.decoding.backend import DecodeBackend, step_frames, step_slice
from myxtts.inference import streaming
from myxtts.inference.text_front_end import TextFrontEnd
from myxtts.inference.voices import Voice
from myxtts.lite import features
from myxtts.lite.parts import load_parts, manifest_folder, read_manifest
from myxtts.lite.resident import resident_loop


class DecodeParts:
    """One pair of decode parts (decode_start<suffix>, decode_steps<suffix>) of `rows` rows,
    the state of its steps part resident in the runtime, and the decode whose state it is."""

    def __init__(self, parts: Dict, manifest: dict, suffix: str):
        self.start = parts["decode_start" + suffix]
        self.loop = resident_loop(parts["decode_steps" + suffix], manifest,
                                  "decode_steps" + suffix)
        self.rows = next(tensor["shape"][0] for tensor
                         in manifest["parts"]["decode_start" + suffix]["inputs"]
                         if tensor["name"] == "tokens")
        self.resident: Optional[LiteDecode] = None


class LiteDecode:
    """One decode of a pair of decode parts: its state parked on the host (`arrays`) or
    resident in the parts' runtime, which of the parts' rows are the caller's (`rows`, in the
    caller's order: rows that padded the batch, and rows that left it, are not), and the
    progress the driver asks about after each call."""

    def __init__(self, parts: DecodeParts, arrays: Dict[str, np.ndarray], rows: Sequence[int]):
        self.parts = parts
        self.arrays: Optional[Dict[str, np.ndarray]] = arrays
        self.rows = list(rows)
        self.read(arrays)

    def read(self, values) -> None:
        self.step = int(np.asarray(values["step"]))
        self.done = np.array(values["done"], bool)
        self.lengths = np.array(values["lengths"], np.int64)
        self.by_stop = np.array(values["by_stop"], bool)

    @property
    def ended(self) -> bool:
        return bool(self.done[self.rows].all())


class LiteDecoder(DecodeBackend):
    """The decode backend over the decode parts: decode_start / decode_steps of one row and,
    in an export made with --decode-rows B > 1, decode_start_batch / decode_steps_batch of B
    (`max_rows`; myxtts.exporters.edge.decode_part_rows). A batch takes the smallest parts
    that hold it; a batch of fewer rows than its parts' fills the rest with copies of its
    first row, and a row that leaves the batch stays in the parts' batch, unread (a static
    shape costs the same either way). The state of the decode being stepped stays inside the
    runtime (myxtts.lite.resident); stepping another decode of the same parts parks this one's
    state on the host first, so interleaved streams are correct, only slower."""

    def __init__(self, parts: Dict, manifest: dict):
        # One resident state per pair of parts: streams decoding in their own threads (each
        # stream's decode runs ahead of its vocoder) take turns, a whole call of `steps` at a
        # time.
        self._lock = threading.Lock()
        self.decode_parts = sorted((DecodeParts(parts, manifest, suffix)
                                    for suffix in ("", "_batch")
                                    if "decode_start" + suffix in parts),
                                   key=lambda one: one.rows)  # [one row, B rows]
        self._postnet = parts["postnet"]
        # model.reference_matching: the postnet part matches its output to the voice's frames
        self._postnet_reads_voice = any(tensor["name"] == "speaker_latents"
                                        for tensor in manifest["parts"]["postnet"]["inputs"])
        shapes, stream = manifest["shapes"], manifest["streaming"]
        self.max_rows = self.decode_parts[-1].rows
        self.text_positions = shapes["text_positions"]
        self.steps_per_call = shapes["steps_per_call"]
        self.window = shapes["window_frames"]
        self.reduction_factor = stream["reduction_factor"]
        self.n_mels = stream["n_mels"]
        self.postnet_context = stream["postnet_context"]
        self.token_padding = shapes["token_padding"]

    def start_batch(self, sentences: Sequence[Sequence[int]], language_ids: Sequence[int],
                    latents) -> LiteDecode:
        count = len(sentences)
        if not 1 <= count <= self.max_rows:
            raise ValueError(f"this on-device export decodes 1 to {self.max_rows} sentences "
                             f"at a time (its parts' batch; myxtts-export --decode-rows), not "
                             f"{count}")
        parts = next(one for one in self.decode_parts if one.rows >= count)
        latents = np.asarray(latents, np.float32).reshape((-1,) + np.shape(latents)[-2:])
        latents = np.broadcast_to(latents, (count,) + latents.shape[1:])
        source = list(range(count)) + [0] * (parts.rows - count)  # padding copies row 0
        tokens = np.zeros([parts.rows, self.text_positions], np.int32)
        for row, k in enumerate(source):
            tokens[row, : len(sentences[k])] = sentences[k]
        with self._lock:
            return LiteDecode(parts, parts.start(
                tokens=tokens,
                token_lengths=np.array([len(sentences[k]) for k in source], np.int32),
                language_ids=np.array([language_ids[k] for k in source], np.int32),
                speaker_latents=np.ascontiguousarray(latents[source])), range(count))

    @staticmethod
    def _make_resident(decode: LiteDecode) -> None:
        parts = decode.parts
        if parts.resident is decode:
            return
        if parts.resident is not None:
            parts.resident.arrays = parts.loop.state()
        parts.loop.load(decode.arrays)
        decode.arrays, parts.resident = None, decode

    def steps(self, decode: LiteDecode, steps: int) -> LiteDecode:
        """At least `steps` more decoder steps (whole calls of K), fewer once its rows have
        ended."""
        if decode.ended:
            return decode
        with self._lock:
            self._make_resident(decode)
            loop = decode.parts.loop
            for _ in range(-(-steps // self.steps_per_call)):
                loop.run(decode.step, self.steps_per_call)
                decode.step = int(loop.value("step"))
                if loop.value("done")[decode.rows].all():
                    break
            decode.read({name: loop.value(name)
                         for name in ("step", "done", "lengths", "by_stop")})
        return decode

    def batch_progress(self, decode: LiteDecode) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        rows = decode.rows
        done = decode.done[rows]
        frames = np.where(done, decode.lengths[rows], decode.step * self.reduction_factor)
        return done, frames, decode.by_stop[rows]

    def batch_frames(self, decode: LiteDecode, first: int, last: int) -> np.ndarray:
        with self._lock:
            buffer = decode.arrays["frames"] if decode.arrays is not None else \
                decode.parts.loop.value("frames")
            steps = buffer[step_slice(first, last, self.reduction_factor)][:, decode.rows]
            return step_frames(steps, first, last, self.reduction_factor, self.n_mels).copy()

    def select(self, decode: LiteDecode, rows: Sequence[int]) -> LiteDecode:
        decode.rows = [decode.rows[k] for k in rows]  # the same decode: it may be resident
        return decode

    def postnet_batch(self, mel_before: np.ndarray, first_frame: int, latents: np.ndarray,
                      postnet_weights=None) -> np.ndarray:
        """The postnet part over windows [B, T, n_mels] of decoded frames, one call each."""
        del first_frame  # the postnet does not depend on where a window starts
        if postnet_weights is not None:
            raise ValueError("an on-device export runs its own postnet")
        latents = np.asarray(latents, np.float32).reshape((-1,) + np.shape(latents)[-2:])
        outputs = []
        for k, window in enumerate(np.asarray(mel_before)):
            voice = ({"speaker_latents": latents[min(k, len(latents) - 1)][None]}
                     if self._postnet_reads_voice else {})
            with self._lock:
                outputs.append(run_padded(lambda mel, length, voice=voice: self._postnet(
                    mel_before=mel, lengths=np.array([length], np.int32), **voice)["mel"],
                    window, self.window, 0.0))
        return np.stack(outputs)


def run_padded(function, frames: np.ndarray, window: int, pad_value: float,
               per_frame: int = 1) -> np.ndarray:
    """`function(frames padded to [1, window, n], valid count)[0]` cut back to the valid
    frames' outputs (per_frame each); windows longer than the part's are an error of the
    caller (the streaming driver's windows fit by construction)."""
    count = len(frames)
    if count > window:
        raise ValueError(f"a window of {count} frames does not fit the export's {window}")
    padded = np.full([1, window, frames.shape[1]], pad_value, np.float32)
    padded[0, :count] = frames
    return np.asarray(function(padded, count))[0][: count * per_frame]


class LiteVocoder:
    """The vocoder interface of stream_decode: the export's vocoder part, or numpy Griffin-Lim."""

    def __init__(self, parts: Dict, manifest: dict, folder: str):
        audio = manifest["audio"]
        self.receptive_field = manifest["streaming"]["vocoder_context"]
        self.hop = audio["hop_length"]
        self.log_floor = float(np.log10(audio["mel_floor"]))
        # (window frames, part) of the vocoder parts, shortest first
        self._parts = sorted((info["inputs"][0]["shape"][1], parts[name])
                             for name, info in manifest["parts"].items()
                             if name.startswith("vocoder"))
        self.neural = bool(self._parts)
        self.filters = np.load(os.path.join(folder, "mel_filters.npy"))
        self.stft_window = np.load(os.path.join(folder, "stft_window.npy"))
        self.n_fft, self.win_length = audio["n_fft"], audio["win_length"]

    def window(self, mel: np.ndarray, first_frame: int = 0) -> np.ndarray:
        if self.neural:
            frames, part = next(((f, p) for f, p in self._parts if f >= len(mel)),
                                self._parts[-1])
            return run_padded(lambda m, _: part(mel=m)["waveform"], mel, frames,
                              self.log_floor, self.hop)
        return features.griffin_lim(mel, self.stft_window, self.filters, self.n_fft, self.hop,
                                    self.win_length, first_frame=first_frame)

    def window_batch(self, mel: np.ndarray, first_frame: int = 0) -> np.ndarray:
        """Waveforms [B, S] of mel windows [B, T, n_mels] (the parts take one window a call)."""
        return np.stack([self.window(window, first_frame) for window in mel])


def windowed(stage: streaming.WindowedStage, frames: np.ndarray, piece: int) -> np.ndarray:
    """A stage over a whole input, pushed `piece` frames at a time (so its windows fit)."""
    outputs = []
    for start in range(0, max(len(frames), 1), piece):
        out = stage.push(frames[start: start + piece], start + piece >= len(frames))
        if out is not None:
            outputs.append(out)
    return np.concatenate(outputs) if outputs else np.zeros((0,) + frames.shape[1:], np.float32)


class LiteSynthesizer:
    """An on-device export loaded for synthesis (see the module docstring)."""

    def __init__(self, path: str, threads: int = 1):
        self.folder = manifest_folder(path)
        self.manifest = read_manifest(self.folder)
        self.threads = threads
        self.parts = load_parts(self.folder, self.manifest, threads)
        self._latents_lock = threading.Lock()  # the speaker_latents part, one call at a time
        self.config = config = XTTSConfig.from_yaml(os.path.join(self.folder, "config.yaml"))
        self.languages = list(config.data.languages)
        self.default_language = config.data.default_language
        self.front_end = TextFrontEnd(Tokenizer.load(os.path.join(self.folder, "vocab.json")),
                                      self.languages, config.model,
                                      self.manifest["shapes"]["max_decoder_steps"])
        self.audio = self.manifest["audio"]
        self.sample_rate, self.hop_length = self.audio["sample_rate"], self.audio["hop_length"]
        self.decoder = LiteDecoder(self.parts, self.manifest)
        self.vocoder = LiteVocoder(self.parts, self.manifest, self.folder)
        # Whole-mel stages are pushed a streaming chunk at a time, so their windows fit.
        self.piece = scheduler.CHUNK_STEPS * self.decoder.reduction_factor

    def runtime(self) -> Tuple[LiteDecoder, LiteVocoder]:
        """A decoder and a vocoder over parts loaded again for them alone (an interpreter runs
        one call at a time): one pair for each thread that decodes, as the server's workers."""
        parts = load_parts(self.folder, self.manifest, self.threads,
                           only=set(self.manifest["parts"]) - {"speaker_latents"})
        return LiteDecoder(parts, self.manifest), LiteVocoder(parts, self.manifest, self.folder)

    # ---- voice -----------------------------------------------------------------------------
    def speaker_latents(self, path: str) -> np.ndarray:
        """Latents [1, L, d] of a reference recording (prepared as the synthesizer does)."""
        return self.latents_of_samples(features.prepare_reference(path, self.audio))

    def latents_of_samples(self, samples: np.ndarray) -> np.ndarray:
        """Latents [1, L, d] of a prepared reference's samples (features.prepare_reference)."""
        mel = features.log_mel(samples, self.vocoder.stft_window, self.vocoder.filters,
                               self.hop_length, self.audio["mel_floor"])
        frames = self.manifest["shapes"]["reference_frames"]
        padded = np.zeros([1, frames, mel.shape[1]], np.float32)
        count = min(len(mel), frames)
        padded[0, :count] = mel[:count]
        with self._latents_lock:
            return self.parts["speaker_latents"](
                reference_mel=padded, reference_lengths=np.array([count], np.int32))[
                "speaker_latents"]

    def latents_of(self, voice: Voice) -> np.ndarray:
        """[1, L, d] of a voice file made with this export's checkpoint (VoiceMismatchError for
        another model's)."""
        return voice.latents_for(self.manifest["voice_fingerprint"],
                                 self.manifest["checkpoint"])[None]

    # ---- speech ----------------------------------------------------------------------------
    def sentences(self, text: str, language: str) -> Tuple[List[List[int]], int]:
        return self.front_end.sentences(text, language), self.front_end.language_id(language)

    def decode(self, ids: Sequence[int], language_id: int, latents) -> Tuple[np.ndarray, bool]:
        """(the log10 mel [T, n_mels] after the postnet, ended by the stop head) of one
        sentence."""
        return self.decode_sentences([ids], language_id, latents)[0]

    def decode_sentences(self, sentences: Sequence[Sequence[int]], language_id: int,
                         latents) -> List[Tuple[np.ndarray, bool]]:
        """`decode` of each sentence, up to the export's decode_rows of similar length
        decoded together (scheduler.sentence_batches); each row's mel is what it would be
        alone."""
        decoder = self.decoder
        results: List[Tuple[np.ndarray, bool]] = [None] * len(sentences)  # type: ignore
        for rows in scheduler.sentence_batches([len(ids) for ids in sentences],
                                               decoder.max_rows):
            pieces: Dict[int, List[np.ndarray]] = {k: [] for k in rows}
            by_stop: Dict[int, bool] = {}
            state = decoder.start_batch([sentences[k] for k in rows], [language_id] * len(rows),
                                        latents)
            for chunk in scheduler.decoded_chunks(decoder, state, rows, decoder.steps_per_call):
                for row in chunk:
                    pieces[row.row].append(row.frames)
                    by_stop[row.row] = row.by_stop
            for k in rows:
                postnet = streaming.WindowedStage(
                    lambda mel, first: decoder.postnet(mel, first, latents),
                    decoder.postnet_context)
                results[k] = (windowed(postnet, np.concatenate(pieces[k]), self.piece),
                              by_stop[k])
        return results

    def vocode(self, mel: np.ndarray) -> np.ndarray:
        stage = streaming.WindowedStage(self.vocoder.window, self.vocoder.receptive_field,
                                        self.hop_length, scheduler.CROSSFADE_SAMPLES)
        return windowed(stage, mel, self.piece).astype(np.float32)

    def synthesize(self, text: str, language: Optional[str], latents
                   ) -> Tuple[np.ndarray, np.ndarray]:
        """(waveform float32, log10 mel [T, n_mels]) of `text`: each sentence decoded and
        vocoded, joined with a short pause (the mels end to end)."""
        sentences, language_id = self.sentences(text, language or self.default_language)
        waves, mels = [], []
        for index, (mel, _) in enumerate(self.decode_sentences(sentences, language_id, latents)):
            if index:
                waves.append(streaming.pause(self.sample_rate))
            waves.append(self.vocode(mel))
            mels.append(mel)
        return np.concatenate(waves), np.concatenate(mels)

    def stream(self, text: str, language: Optional[str], latents) -> Iterator[np.ndarray]:
        """Waveform chunks as the decoder makes them (streaming.stream_decode)."""
        sentences, language_id = self.sentences(text, language or self.default_language)
        yield from streaming.stream_decode(self.decoder, self.vocoder, self.sample_rate,
                                           self.hop_length, sentences, language_id, latents)
