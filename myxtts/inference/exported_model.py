"""Streaming from an exported SavedModel (`myxtts-export`), without the checkpoint.

    model = ExportedModel("models/myxtts")             # the export root (newest version) or
                                                       # one version folder
    latents = model.speaker_latents(samples)           # float32 audio at model.sample_rate
    for chunk in model.stream("Hello there. How are you?", "en", latents):
        play(chunk)
    voice = model.voice("speaker.wav"); voice.save("v.npz")   # voices.Voice, as the CLI's

The same driver as the checkpoint path (myxtts.inference.streaming.stream_decode) runs over the
SavedModel's streaming signatures (decode_start, decode_steps, postnet_window, vocode_window,
streaming_info; myxtts.exporters.serving_graph), so a serving process streams what
Synthesizer.stream streams. Text goes through the checkpoint's own text front end
(TextFrontEnd, rebuilt from the export's assets), so it is cut into sentences and checked like
the Synthesizer does; voices made here and by `myxtts-synthesize --save-voice` with the same
checkpoint are interchangeable (the export records the conditioning fingerprint).
"""

from __future__ import annotations

import functools
import json
import os
import weakref
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.data.text import Tokenizer
from myxtts.decoding import scheduler
from myxtts.decoding.backend import (DecodeBackend, padded_length, padded_tokens, step_frames,
                                     step_slice)
from myxtts.errors import MyXTTSError
from myxtts.inference import streaming
from myxtts.inference.reference_audio import load_reference
from myxtts.inference.text_front_end import TextFrontEnd
from myxtts.inference.voices import Voice
from myxtts.run_directory import CONFIG_FILE, MODEL_INFO_FILE, VOCAB_FILE, shown_path, step_of


class ExportedModelError(MyXTTSError, ValueError):
    """A folder that is not a myxtts export with the streaming signatures."""


def version_folder(path: str) -> str:
    """`path` itself when it holds a saved_model.pb, else its highest numeric version folder."""
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        return path
    versions = [int(name) for name in (os.listdir(path) if os.path.isdir(path) else ())
                if name.isdigit() and os.path.isfile(os.path.join(path, name, "saved_model.pb"))]
    if not versions:
        raise ExportedModelError(f"{path} is neither a SavedModel version folder nor an export "
                                 f"folder with numbered versions; pass what myxtts-export wrote.")
    return os.path.join(path, str(max(versions)))


class ExportedDecoder(DecodeBackend):
    """The decode backend over the streaming signatures; the state is the dict of tensors
    decode_start and decode_steps pass around."""

    def __init__(self, signatures, info):
        self._start = signatures["decode_start"]
        self._steps = signatures["decode_steps"]
        self._postnet = signatures["postnet_window"]
        # exports from before adapted voices lack it (ExportedModel.speaks_adapted)
        self._postnet_adapted = signatures.get("postnet_window_adapted")
        self.adapts_postnet = self._postnet_adapted is not None
        # model.reference_matching: the postnet's windows are matched to the decode's voice
        self._postnet_reads_voice = "speaker_latents" in \
            self._postnet.structured_input_signature[1]
        self.reduction_factor = info["reduction_factor"]
        self.n_mels = info["n_mels"]
        self.postnet_context = info["postnet_context"]
        self.token_padding = info["token_padding"]

    def start_batch(self, sentences: Sequence[Sequence[int]], language_ids: Sequence[int],
                    latents):
        tokens = padded_tokens(sentences, padded_length(sentences, self.token_padding))
        return self._start(tokens=tf.constant(tokens),
                           token_lengths=tf.constant([len(ids) for ids in sentences], tf.int32),
                           language_ids=tf.constant(list(language_ids), tf.int32),
                           speaker_latents=tf.convert_to_tensor(latents, tf.float32))

    def steps(self, state, steps: int):
        return self._steps(steps=tf.constant(steps, tf.int32), **state)

    def batch_progress(self, state) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        done = state["done"].numpy()
        frames = np.where(done, state["lengths"].numpy(),
                          int(state["step"]) * self.reduction_factor)
        return done, frames, state["by_stop"].numpy()

    def batch_frames(self, state, first: int, last: int) -> np.ndarray:
        r = self.reduction_factor
        steps = state["frames"][step_slice(first, last, r)].numpy()
        return step_frames(steps, first, last, r, self.n_mels)

    @functools.cached_property
    def _batch_axes(self) -> Dict[str, Optional[int]]:
        """Each state tensor's item axis (None: shared by all, the step), from the shapes of a
        one-item and a two-item decode_start."""
        one, two = (self._start(tokens=tf.ones([b, 1], tf.int32),
                                token_lengths=tf.ones([b], tf.int32),
                                language_ids=tf.zeros([b], tf.int32),
                                speaker_latents=tf.zeros([b] + self._latent_shape))
                    for b in (1, 2))
        return {name: next((axis for axis, (a, b) in enumerate(zip(value.shape, two[name].shape))
                            if a == 1 and b == 2), None)
                for name, value in one.items()}

    @functools.cached_property
    def _latent_shape(self) -> List[int]:
        return self._start.structured_input_signature[1]["speaker_latents"].shape[1:].as_list()

    def select(self, state, rows: Sequence[int]):
        rows = tf.constant(list(rows), tf.int32)
        return {name: value if self._batch_axes[name] is None else
                tf.gather(value, rows, axis=self._batch_axes[name])
                for name, value in state.items()}

    def postnet_batch(self, mel_before: np.ndarray, first_frame: int, latents: np.ndarray,
                      postnet_weights: Optional[np.ndarray] = None) -> np.ndarray:
        """The postnet over windows [B, T, n_mels] of decoded frames, all valid, of decodes
        with the speaker latents [B, L, d]; with `postnet_weights` (ExportedModel.voice_inputs),
        an adapted voice's postnet."""
        del first_frame  # the postnet does not depend on where a window starts
        inputs = {"mel_before": tf.constant(mel_before, tf.float32)}
        if self._postnet_reads_voice:
            inputs["speaker_latents"] = tf.constant(latents, tf.float32)
        if postnet_weights is None:
            return self._postnet(**inputs)["mel"].numpy()
        return self._postnet_adapted(
            postnet_weights=tf.constant(postnet_weights, tf.float32), **inputs)["mel"].numpy()


class ExportedVocoder:
    """The vocoder interface of stream_decode over the vocode_window signature."""

    def __init__(self, signatures, info):
        self._window = signatures["vocode_window"]
        self.receptive_field = info["vocoder_context"]

    def window(self, mel, first_frame: int = 0) -> np.ndarray:
        return self.window_batch(np.asarray(mel)[None], first_frame)[0]

    def window_batch(self, mel: np.ndarray, first_frame: int = 0) -> np.ndarray:
        """Waveforms [B, S] of mel windows [B, T, n_mels] that start at `first_frame` of their
        utterances."""
        return self._window(mel=tf.constant(mel, tf.float32),
                            first_frame=tf.constant(first_frame, tf.int32))["waveform"].numpy()


class ExportedModel:
    """An exported model's signatures and assets (config.yaml, vocab.json, model_info.json),
    and streaming over them."""

    def __init__(self, path: str):
        self.path = version_folder(path)
        assets = os.path.join(self.path, "assets")
        try:
            self.config = XTTSConfig.from_yaml(os.path.join(assets, CONFIG_FILE))
            tokenizer = Tokenizer.load(os.path.join(assets, VOCAB_FILE))
            with open(os.path.join(assets, MODEL_INFO_FILE), encoding="utf-8") as f:
                self.model_info = json.load(f)
        except (OSError, ValueError) as e:
            raise ExportedModelError(f"{self.path} lacks the assets myxtts-export writes "
                                     f"(config.yaml, vocab.json, model_info.json): {e}. "
                                     f"Export the checkpoint again.") from None
        self.saved_model = tf.saved_model.load(self.path)
        signatures = self.saved_model.signatures
        if "decode_steps" not in signatures:
            raise ExportedModelError(f"{self.path} has no streaming signatures (decode_start, "
                                     f"decode_steps, ...): export the checkpoint again with "
                                     f"this version of myxtts-export.")
        self.signatures = signatures
        self.info = {name: int(value) for name, value in signatures["streaming_info"]().items()}
        self.sample_rate = self.info["sample_rate"]
        self.hop_length = self.info["hop_length"]
        self.decoder = ExportedDecoder(signatures, self.info)
        self.vocoder = ExportedVocoder(signatures, self.info)
        self.front_end = TextFrontEnd(tokenizer, self.config.data.languages, self.config.model,
                                      self.info["max_decoder_steps"])
        export = self.model_info.get("export", {})
        self.checkpoint = export.get("checkpoint", self.path)
        # Older exports lack it: their voices cannot be checked against the model.
        self.fingerprint: Optional[str] = export.get("voice_fingerprint")
        # Exports from before adapted voices lack it and the postnet_window_adapted signature.
        self.decoder_fingerprint: Optional[str] = export.get("decoder_fingerprint")
        self._postnet_weights: "weakref.WeakKeyDictionary[Voice, np.ndarray]" = (
            weakref.WeakKeyDictionary())

    def describe(self) -> str:
        """Which version is served, from which checkpoint, through which vocoder and how long
        that vocoder trained, e.g. "version 2 of models/myxtts: runs/tiny/ckpt-200 (step 200),
        vocoder Vocos runs/vocoder/ckpt-20 (trained 20 steps)"."""
        export = self.model_info.get("export", {})
        vocoder = export.get("vocoder", "griffin-lim")
        if vocoder == "griffin-lim":
            spoken = (f"vocoder Griffin-Lim ({export.get('griffin_lim_iterations', '?')} "
                      f"iterations)")
        else:
            steps = step_of(vocoder)
            trained = f"trained {steps:,} steps" if steps is not None else "steps unknown"
            spoken = (f"vocoder {export.get('vocoder_kind', 'neural')} {shown_path(vocoder)} "
                      f"({trained})")
        step = step_of(self.checkpoint)
        trained = f" (step {step:,})" if step is not None else ""
        return (f"version {os.path.basename(self.path)} of {os.path.dirname(self.path)}: "
                f"{shown_path(self.checkpoint)}{trained}, {spoken}")

    @property
    def vocoder_name(self) -> str:
        """The vocoder checkpoint the export holds, or "griffin-lim"."""
        return self.model_info.get("export", {}).get("vocoder", "griffin-lim")

    def runtime(self) -> Tuple[ExportedDecoder, ExportedVocoder]:
        """(decoder, vocoder) for a thread that decodes: the same signatures for every thread
        (TensorFlow runs calls from several threads at once)."""
        return self.decoder, self.vocoder

    # ---- text and voice --------------------------------------------------------------------
    def sentences(self, text: str, language: str) -> Tuple[List[List[int]], int]:
        """(token ids of each sentence, language id): the text front end of the checkpoint
        (TextFrontEnd, from the export's vocab.json and config.yaml), so the errors are the
        synthesizer's (unknown language, characters outside the vocabulary)."""
        return self.front_end.sentences(text, language), self.front_end.language_id(language)

    def speaker_latents(self, samples: np.ndarray) -> tf.Tensor:
        """Latents [1, L, d] of mono float32 audio at sample_rate, prepared as
        reference_audio.load_reference prepares it (the reference_mel and speaker_latents
        signatures)."""
        samples = np.asarray(samples, np.float32)[None]
        mel = self.signatures["reference_mel"](
            audio=tf.constant(samples), audio_lengths=tf.constant([samples.shape[1]], tf.int32))
        return self.signatures["speaker_latents"](**mel)["speaker_latents"]

    def require_fingerprint(self) -> str:
        if self.fingerprint is None:
            raise ExportedModelError(
                f"{self.path} was exported without a voice fingerprint (an older myxtts-export), "
                f"so voice files cannot be checked against it: export the checkpoint again.")
        return self.fingerprint

    def voice(self, path: str, name: Optional[str] = None) -> Voice:
        """The voice of the reference recording `path` (named `name`), a voices.Voice whose
        latents this model computed; ReferenceAudioError for an unusable recording."""
        samples = load_reference(path, self.config.data, name)
        return Voice(self.speaker_latents(samples)[0].numpy(), self.require_fingerprint(),
                     (os.path.basename(name or path),), self.checkpoint)

    def latents_of(self, voice: Voice) -> np.ndarray:
        """[speaker_latent_rows, d_model] of a plain `voice`; VoiceMismatchError for another
        model's, or for an adapted voice (voice_inputs)."""
        return voice.latents_for(self.require_fingerprint(), self.checkpoint)

    @property
    def speaks_adapted(self) -> bool:
        """Whether the export can put an adapted voice's postnet in (postnet_window_adapted)."""
        return self.decoder_fingerprint is not None and self.decoder.adapts_postnet

    def voice_inputs(self, voice: Voice) -> Tuple[np.ndarray, Optional[np.ndarray]]:
        """(latents [speaker_latent_rows, d_model], the adapted postnet's weights flattened
        and joined [P] or None for a plain voice) of `voice`, for the postnet_window_adapted
        signature; VoiceMismatchError for another model's voice, or an adapted voice this
        export cannot speak adapted (exported before adapted voices: export again)."""
        if voice.postnet is None or not self.speaks_adapted:
            return self.latents_of(voice), None
        postnet = voice.postnet_for(self.decoder_fingerprint, self.checkpoint)
        latents = voice.latents_for(self.require_fingerprint(), self.checkpoint,
                                    speaks_adapted=True)
        if voice not in self._postnet_weights:  # one array per voice: its requests share it
            self._postnet_weights[voice] = np.concatenate(
                [np.ravel(w) for w in postnet]).astype(np.float32)
        return latents, self._postnet_weights[voice]

    # ---- streaming -------------------------------------------------------------------------
    def stream(self, text: str, language: str, latents, *,
               first_chunk_steps: Optional[int] = None,
               chunk_steps: int = scheduler.CHUNK_STEPS) -> Iterator[np.ndarray]:
        """Synthesizer.stream over the SavedModel: chunks of every sentence, pauses between."""
        sentences, language_id = self.sentences(text, language)
        yield from self.stream_sentences(sentences, language_id, latents,
                                         first_chunk_steps=first_chunk_steps,
                                         chunk_steps=chunk_steps)

    def stream_sentences(self, sentences, language_id: int, latents, *,
                         first_chunk_steps: Optional[int] = None,
                         chunk_steps: int = scheduler.CHUNK_STEPS,
                         ends: Optional[List[streaming.StreamEnd]] = None
                         ) -> Iterator[np.ndarray]:
        """Synthesizer.stream_sentences over the SavedModel."""
        yield from streaming.stream_decode(self.decoder, self.vocoder, self.sample_rate,
                                           self.hop_length, sentences, language_id, latents,
                                           first_chunk_steps=first_chunk_steps,
                                           chunk_steps=chunk_steps, ends=ends)
