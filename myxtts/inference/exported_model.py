"""Streaming from an exported SavedModel (`myxtts-export`), without the checkpoint.

    model = ExportedModel("models/myxtts")             # the export root (newest version) or
                                                       # one version folder
    latents = model.speaker_latents(samples)           # float32 audio at model.sample_rate
    for chunk in model.stream("Hello there. How are you?", "en", latents):
        play(chunk)

The same driver as the checkpoint path (myxtts.inference.streaming.stream_decode) runs over the
SavedModel's streaming signatures (decode_start, decode_steps, postnet_window, vocode_window,
streaming_info; myxtts.exporters.serving_graph), so a serving process streams what
Synthesizer.stream streams. Text is cut into sentences like Synthesizer does
(myxtts.inference.sentences; pieces measured with the in-graph `tokenize` signature).
"""

from __future__ import annotations

import os
from typing import Iterator, List, Optional, Tuple

import numpy as np
import tensorflow as tf

from myxtts.errors import MyXTTSError
from myxtts.inference import streaming
from myxtts.inference.sentences import split_sentences
from myxtts.inference.text_front_end import sentence_token_budget


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


class ExportedDecoder:
    """The decoder interface of stream_decode over the streaming signatures; the state is the
    dict of tensors decode_start and decode_steps pass around."""

    def __init__(self, signatures, info):
        self._start = signatures["decode_start"]
        self._steps = signatures["decode_steps"]
        self._postnet = signatures["postnet_window"]
        self.reduction_factor = info["reduction_factor"]
        self.n_mels = info["n_mels"]
        self.postnet_context = info["postnet_context"]
        self.token_padding = info["token_padding"]

    def start(self, ids, language_id: int, latents):
        padded = -(-len(ids) // self.token_padding) * self.token_padding
        tokens = np.zeros([1, padded], np.int32)
        tokens[0, : len(ids)] = ids
        return self._start(tokens=tf.constant(tokens),
                           token_lengths=tf.constant([len(ids)], tf.int32),
                           language_ids=tf.constant([language_id], tf.int32),
                           speaker_latents=tf.convert_to_tensor(latents, tf.float32))

    def steps(self, state, steps: int):
        return self._steps(steps=tf.constant(steps, tf.int32), **state)

    def progress(self, state) -> Tuple[bool, int, bool]:
        done = bool(state["done"][0])
        frames = int(state["lengths"][0]) if done else \
            int(state["step"]) * self.reduction_factor
        return done, frames, bool(state["by_stop"][0])

    def frames(self, state, first: int, last: int) -> np.ndarray:
        return tf.reshape(state["frames"][:, 0], [-1, self.n_mels])[first:last].numpy()

    def postnet(self, mel_before: np.ndarray, first_frame: int = 0) -> np.ndarray:
        del first_frame
        return self._postnet(mel_before=tf.constant(mel_before[None], tf.float32))["mel"][0]


class ExportedVocoder:
    """The vocoder interface of stream_decode over the vocode_window signature."""

    def __init__(self, signatures, info):
        self._window = signatures["vocode_window"]
        self.receptive_field = info["vocoder_context"]

    def window(self, mel, first_frame: int = 0) -> np.ndarray:
        return self._window(mel=tf.constant(np.asarray(mel)[None], tf.float32),
                            first_frame=tf.constant(first_frame, tf.int32))["waveform"][0]


class ExportedModel:
    """An exported model's signatures, and streaming over them."""

    def __init__(self, path: str):
        self.path = version_folder(path)
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

    # ---- text and voice --------------------------------------------------------------------
    def tokenize(self, text: str, language: str) -> Tuple[List[int], int]:
        """(token ids, language id) of one text, by the in-graph front end."""
        out = self.signatures["tokenize"](text=tf.constant([text]),
                                         language=tf.constant([language]))
        length = int(out["token_lengths"][0])
        return out["tokens"][0, :length].numpy().tolist(), int(out["language_ids"][0])

    def sentences(self, text: str, language: str) -> Tuple[List[List[int]], int]:
        """(token ids of each sentence, language id), cut like TextFrontEnd.sentences."""
        info = self.info
        budget = sentence_token_budget(info["max_text_positions"], info["max_decoder_steps"],
                                       info["reduction_factor"],
                                       info["max_frames_per_token_x1000"] / 1000.0)
        pieces = split_sentences(text, language, budget,
                                 length=lambda piece: len(self.tokenize(piece, language)[0]))
        encoded = [self.tokenize(piece, language) for piece in pieces]
        if not encoded:
            raise ExportedModelError(f"The text {text!r} is empty.")
        return [ids for ids, _ in encoded], encoded[0][1]

    def speaker_latents(self, samples: np.ndarray) -> tf.Tensor:
        """Latents [1, L, d] of mono float32 audio at sample_rate (the reference_mel and
        speaker_latents signatures)."""
        samples = np.asarray(samples, np.float32)[None]
        mel = self.signatures["reference_mel"](
            audio=tf.constant(samples), audio_lengths=tf.constant([samples.shape[1]], tf.int32))
        return self.signatures["speaker_latents"](**mel)["speaker_latents"]

    # ---- streaming -------------------------------------------------------------------------
    def stream(self, text: str, language: str, latents, *,
               first_chunk_steps: Optional[int] = None,
               chunk_steps: int = streaming.CHUNK_STEPS) -> Iterator[np.ndarray]:
        """Synthesizer.stream over the SavedModel: chunks of every sentence, pauses between."""
        sentences, language_id = self.sentences(text, language)
        yield from self.stream_sentences(sentences, language_id, latents,
                                         first_chunk_steps=first_chunk_steps,
                                         chunk_steps=chunk_steps)

    def stream_sentences(self, sentences, language_id: int, latents, *,
                         first_chunk_steps: Optional[int] = None,
                         chunk_steps: int = streaming.CHUNK_STEPS,
                         ends: Optional[List[streaming.StreamEnd]] = None
                         ) -> Iterator[np.ndarray]:
        """Synthesizer.stream_sentences over the SavedModel."""
        yield from streaming.stream_decode(self.decoder, self.vocoder, self.sample_rate,
                                           self.hop_length, sentences, language_id, latents,
                                           first_chunk_steps=first_chunk_steps,
                                           chunk_steps=chunk_steps, ends=ends)
