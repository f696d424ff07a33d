"""Synthesizer: text + a speaker reference → log10 mel → waveform, from a checkpoint directory.

    synth = Synthesizer.from_checkpoint_dir("runs/tiny")            # latest ckpt-N
    latents = synth.speaker_latents("reference.flac")                # any soundfile format
    latents = synth.speaker_latents(["a.wav", "b.flac"])             # mean of their latents
    voice = synth.voice(["a.wav", "b.flac"]); voice.save("v.npz")    # voices.Voice, a file
    latents = synth.latents_of(Voice.load("v.npz"))                  # refuses another model's
    latents = synth.use_voice(Voice.load("v.npz"))   # also an adapted voice: its postnet goes in
    wav, mel = synth.synthesize("Hello there.", "en", latents)       # float32 [S], [T, n_mels]
    for chunk in synth.stream("Hello there. How are you?", "en", latents):   # float32 [s]
        play(chunk)                                  # as the decoder runs (inference.streaming)
    result = synth.synthesize_detailed(synth.encode("Hello.", "en"), synth.language_id("en"),
                                       latents)  # + .alignment, .ended_by_stop (Synthesis)

A text of several sentences is cut into sentences (TextFrontEnd.sentences) and spoken with the
same voice, joined with streaming.SENTENCE_PAUSE_SECONDS of silence, in `synthesize` and in
`stream` alike; `synthesize` decodes the sentences together as a batch (`synthesize_batch`),
`stream` one after another.

Decoding is the model's XLA-compiled autoregressive loop (XTTSModel.generate(jit_compile=True));
token sequences are padded to a multiple of TOKEN_PADDING so texts of similar length share one
compilation (padding is masked, the result does not depend on it). Inference is deterministic:
dropout is off and the prenet's inference dropout uses fixed position-keyed masks
(myxtts.models.decoder.Prenet).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from typing import Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import tensorflow as tf

from myxtts.data import audio as audio_lib
from myxtts.decoding import scheduler
from myxtts.inference import streaming
from myxtts.inference.checkpoint_loading import LoadedCheckpoint, load_checkpoint
from myxtts.inference.model_decoder import ModelDecoder
from myxtts.inference.reference_audio import (ReferenceAudioError, load_reference,
                                              reference_sample_count)
from myxtts.inference.text_front_end import TextFrontEnd
from myxtts.inference.vocoding import GRIFFIN_LIM_ITERATIONS, GriffinLimVocoder
from myxtts.inference.voice_adaptation import (ADAPT_LEARNING_RATE, ADAPT_STEPS,
                                               AdaptationRecording, AdaptedWeights, VoiceAdapter)
from myxtts.inference.voices import Voice, conditioning_fingerprint, decoder_fingerprint

logger = logging.getLogger("myxtts.inference")

TOKEN_PADDING = 16
BATCH_SENTENCES = 8  # the most sentences of one text decoded as one batch (synthesize_batch)


@dataclasses.dataclass(frozen=True)
class Synthesis:
    """One free-running synthesis (Synthesizer.synthesize_detailed)."""

    waveform: np.ndarray  # float32 [S] at data.sample_rate (Griffin-Lim)
    mel: np.ndarray  # log10 mel float32 [T, n_mels]
    alignment: np.ndarray  # text attention float32 [ceil(T / r) decoder steps, tokens]
    ended_by_stop: bool  # the stop head ended it (False: the length cap did)
    max_frames: int  # that cap for this text, in mel frames


class Synthesizer:
    """A restored model plus the text front end, the reference featurizer and the vocoder."""

    def __init__(self, loaded: LoadedCheckpoint, max_decoder_steps: Optional[int] = None,
                 griffin_lim_iterations: int = GRIFFIN_LIM_ITERATIONS, vocoder=None):
        """`vocoder`: a myxtts.inference.vocoding.NeuralVocoder (load_vocoder); None =
        Griffin-Lim."""
        self.loaded = loaded
        self.config = loaded.config
        self.model = loaded.model
        self.tokenizer = loaded.tokenizer
        self.languages = list(self.config.data.languages)
        self.sample_rate = self.config.data.sample_rate
        self.max_decoder_steps = int(max_decoder_steps or self.config.model.max_decoder_steps)
        self.log_mel = audio_lib.LogMel.from_config(self.config.data)
        self.vocoder = vocoder or GriffinLimVocoder(self.config.data, griffin_lim_iterations)
        self.front_end = TextFrontEnd(self.tokenizer, self.languages, self.config.model,
                                      self.max_decoder_steps)
        self.reference_samples = reference_sample_count(self.config.data)
        logger.info("%s", self.vocoder.describe())

    @classmethod
    def from_checkpoint_dir(cls, directory: str, checkpoint: Optional[str] = None,
                            **kwargs) -> "Synthesizer":
        """`checkpoint`: None/"latest", "best", or a prefix such as ckpt-200."""
        return cls(load_checkpoint(directory, checkpoint), **kwargs)

    # ---- speaker ---------------------------------------------------------------------------
    def reference_mel(self, path: str) -> np.ndarray:
        """The log10 mel [T, n_mels] the model sees for reference audio `path`
        (reference_audio.load_reference: decoded and resampled like training data, the first
        data.ref_max_seconds seconds)."""
        return self.reference_mel_of(load_reference(path, self.config.data))

    def reference_mel_of(self, samples: np.ndarray) -> np.ndarray:
        """The log10 mel of the first data.ref_max_seconds seconds of samples decoded like
        training data (myxtts.data.cache.load_samples)."""
        return self.log_mel(samples[: self.reference_samples][None])[0].numpy()

    def speaker_latents(self, reference_audio: Union[str, Sequence[str]]) -> tf.Tensor:
        """float32 [1, speaker_latent_rows, d_model] for the speaker of a recording (a path), or
        the mean of each recording's latents for several (a sequence of paths; with
        model.reference_matching their frames pooled: XTTSModel.pooled_latents)."""
        paths = _paths(reference_audio)
        latents = [self.speaker_latents_from_mel(self.reference_mel(p)) for p in paths]
        return self.model.pooled_latents(tf.concat(latents, axis=0))

    def speaker_latents_from_mel(self, reference_mel) -> tf.Tensor:
        mel = tf.convert_to_tensor(reference_mel, tf.float32)[None]
        return self.model.speaker_latents(mel, tf.shape(mel)[1:2])

    @functools.cached_property
    def fingerprint(self) -> str:
        """The conditioning fingerprint of this model (voices.conditioning_fingerprint): equal
        for every model that makes the same latents from the same recordings."""
        return conditioning_fingerprint(self.model, self.config)

    @functools.cached_property
    def decoder_fingerprint(self) -> str:
        """voices.decoder_fingerprint of this model: what an adapted voice's postnet was fitted
        to (the same whichever postnet is in use)."""
        return decoder_fingerprint(self.model, self.config)

    def voice(self, reference_audio: Union[str, Sequence[str]],
              adapted: Optional[AdaptedWeights] = None) -> Voice:
        """The voice of one or several recordings (speaker_latents), to save and reuse; with
        `adapted` (`adapt` of part "postnet" on the same recordings), the voice holds its
        adapted postnet."""
        paths = _paths(reference_audio)
        if adapted is not None and adapted.part != "postnet":
            raise ValueError(f"a voice holds an adapted postnet, not weights adapted with part "
                             f"{adapted.part!r}")
        return Voice(self.speaker_latents(paths)[0].numpy(), self.fingerprint,
                     tuple(os.path.basename(p) for p in paths), self.loaded.checkpoint_path,
                     postnet=adapted.values if adapted else None,
                     decoder_fingerprint=self.decoder_fingerprint if adapted else None)

    def latents_of(self, voice: Voice) -> tf.Tensor:
        """float32 [1, speaker_latent_rows, d_model] of a plain `voice`;
        voices.VoiceMismatchError when another model made it, or for an adapted voice
        (`use_voice` speaks those)."""
        return tf.constant(voice.latents_for(self.fingerprint, self.loaded.checkpoint_path)[None])

    def use_voice(self, voice: Voice) -> tf.Tensor:
        """`latents_of` `voice`, also an adapted one, and the model speaks as the voice says
        from now on: with its adapted postnet, or with the checkpoint's weights for a plain
        voice; voices.VoiceMismatchError when another model made it."""
        checkpoint = self.loaded.checkpoint_path
        latents = voice.latents_for(self.fingerprint, checkpoint, speaks_adapted=True)
        postnet = voice.postnet_for(self.decoder_fingerprint, checkpoint)
        if postnet is not None or "adapter" in self.__dict__:  # cached_property: built once
            self.adapter.use_values("postnet", postnet)
        return tf.constant(latents[None])

    # ---- adapting to a voice (inference.voice_adaptation) -----------------------------------
    @functools.cached_property
    def adapter(self) -> VoiceAdapter:
        # Every weight change goes through the adapter: the fingerprint of the decoder is taken
        # now, while the model holds the checkpoint's weights.
        _ = self.decoder_fingerprint
        return VoiceAdapter(self.model)

    def adaptation_recording(self, samples: np.ndarray, ids: Sequence[int],
                             language_id: int) -> AdaptationRecording:
        """A recording (samples decoded like training data, whole) and its transcript's token
        ids, as adaptation reads them."""
        return AdaptationRecording(tuple(ids), language_id,
                                   self.log_mel(samples[None])[0].numpy())

    def adapt(self, latents, recordings: Sequence[AdaptationRecording],
              steps: int = ADAPT_STEPS, learning_rate: float = ADAPT_LEARNING_RATE,
              part: str = "all") -> AdaptedWeights:
        """The weights of `part` fine-tuned on a voice's `recordings` with its `latents`
        (VoiceAdapter.adapt); the model speaks as before: `use_weights` puts them in."""
        return self.adapter.adapt(latents, recordings, steps, learning_rate, part)

    def adapt_to_references(self, latents, reference_audio: Sequence[str],
                            transcripts: Sequence[str], language: str,
                            steps: int = ADAPT_STEPS,
                            learning_rate: float = ADAPT_LEARNING_RATE,
                            part: str = "all") -> AdaptedWeights:
        """`adapt` on reference recordings (paths, each read whole) and what each says."""
        language_id = self.language_id(language)
        recordings = []
        for path, text in zip(reference_audio, transcripts):
            samples = load_reference(path, self.config.data, whole=True)
            seconds = samples.size / self.sample_rate
            if seconds > self.config.data.max_audio_seconds:
                raise ReferenceAudioError(
                    f"The reference audio {path} holds {seconds:.1f} s of sound; adapting to "
                    f"a voice reads each reference whole, with its transcript, and this model "
                    f"trained on utterances of at most data.max_audio_seconds = "
                    f"{self.config.data.max_audio_seconds:g} s. Pass a shorter recording (and "
                    f"the words it says).")
            recordings.append(self.adaptation_recording(samples, self.encode(text, language),
                                                        language_id))
        return self.adapt(latents, recordings, steps, learning_rate, part)

    def use_weights(self, adapted: Optional[AdaptedWeights]) -> None:
        """Speak with `adapted`'s weights from now on; None: with the checkpoint's again."""
        if adapted is not None or "adapter" in self.__dict__:  # cached_property: built once
            self.adapter.use(adapted)

    # ---- text ------------------------------------------------------------------------------
    def language_id(self, language: str) -> int:
        return self.front_end.language_id(language)

    def encode(self, text: str, language: str) -> List[int]:
        """Token ids of `text` (text_front_end.TextFrontEnd.encode)."""
        return self.front_end.encode(text, language)

    def sentences(self, text: str, language: str) -> List[List[int]]:
        """Token ids of each sentence of `text` (text_front_end.TextFrontEnd.sentences)."""
        return self.front_end.sentences(text, language)

    # ---- synthesis -------------------------------------------------------------------------
    def synthesize(self, text: str, language: str, latents) -> Tuple[np.ndarray, np.ndarray]:
        """(waveform float32 [S] at data.sample_rate, log10 mel float32 [T, n_mels]) of every
        sentence of `text`, joined with pauses (`join_sentences`)."""
        return self.join_sentences(self.synthesize_batch(self.sentences(text, language),
                                                         self.language_id(language), latents))

    def join_sentences(self, results: Sequence[Synthesis]) -> Tuple[np.ndarray, np.ndarray]:
        """(waveform, mel) of several sentences' syntheses, a pause of silence
        (mel frames at log10(mel_floor)) between them."""
        pause = self.pause()
        hop = self.config.data.hop_length
        pause_mel = np.full([len(pause) // hop, self.config.data.n_mels],
                            np.log10(self.config.data.mel_floor), np.float32)
        waveforms, mels = [], []
        for i, result in enumerate(results):
            if i:
                waveforms.append(pause)
                mels.append(pause_mel)
            waveforms.append(result.waveform)
            mels.append(result.mel)
        return np.concatenate(waveforms), np.concatenate(mels)

    def pause(self) -> np.ndarray:
        """The silence between two sentences, float32 samples (streaming.pause)."""
        return streaming.pause(self.sample_rate)

    def stream(self, text: str, language: str, latents, *,
               first_chunk_steps: Optional[int] = None,
               chunk_steps: int = scheduler.CHUNK_STEPS) -> Iterator[np.ndarray]:
        """Float32 waveform chunks of every sentence of `text` as the decoder produces its
        frames (myxtts.inference.streaming), pauses between sentences; joined, they equal
        `synthesize` (up to float rounding with a neural vocoder). The first chunk of each
        sentence is `first_chunk_steps` decoder steps (default: just enough for the first
        frames of audio), each later one twice the one before, up to `chunk_steps`."""
        yield from self.stream_sentences(self.sentences(text, language),
                                         self.language_id(language), latents,
                                         first_chunk_steps=first_chunk_steps,
                                         chunk_steps=chunk_steps)

    def stream_sentences(self, sentences: Sequence[List[int]], language_id: int, latents, *,
                         first_chunk_steps: Optional[int] = None,
                         chunk_steps: int = scheduler.CHUNK_STEPS,
                         ends: Optional[List[streaming.StreamEnd]] = None
                         ) -> Iterator[np.ndarray]:
        """`stream` of token sequences (`sentences`), pauses between them; `ends` (optional)
        gets how each sentence ended (streaming.StreamEnd). A sentence the length cap ended is
        logged."""
        ends = [] if ends is None else ends
        yield from streaming.stream_decode(
            self._stream_decoder, self.vocoder, self.sample_rate, self.config.data.hop_length,
            sentences, language_id, latents, first_chunk_steps=first_chunk_steps,
            chunk_steps=chunk_steps, ends=ends)
        for ids, end in zip(sentences, ends):
            if not end.ended_by_stop:
                warn_length_cap("a streamed sentence", self.max_frames(len(ids)),
                                self.sample_rate, self.config.data.hop_length,
                                self.max_decoder_steps)

    @functools.cached_property
    def _stream_decoder(self) -> ModelDecoder:
        return ModelDecoder(self.model, self.max_decoder_steps, TOKEN_PADDING)

    def synthesize_tokens(self, ids: List[int], language_id: int,
                          latents) -> Tuple[np.ndarray, np.ndarray]:
        result = self.synthesize_detailed(ids, language_id, latents)
        return result.waveform, result.mel

    def synthesize_detailed(self, ids: List[int], language_id: int, latents,
                            padded_length: Optional[int] = None) -> Synthesis:
        """Waveform, mel, text alignment and how decoding ended, for one token sequence.
        `padded_length` (>= len(ids)): pad the tokens to exactly this many instead of the next
        multiple of TOKEN_PADDING (the result does not depend on it)."""
        return self.synthesize_batch([ids], language_id, latents, padded_length)[0]

    def synthesize_batch(self, sentences: Sequence[List[int]], language_id: int, latents,
                         padded_length: Optional[int] = None) -> List[Synthesis]:
        """`synthesize_detailed` of every token sequence of `sentences`, in order, with one
        voice: the sentences decode together, up to BATCH_SENTENCES of similar length in one
        batch, each then vocoded on its own. One compilation serves the batch (not one per
        padded sentence length); once compiled, a batch step costs about its rows' steps
        alone on a CPU (docs/serving.md, "Batched sentences"). Each result equals the sentence
        decoded alone up to float rounding (tests/test_synthesize.py)."""
        results: List[Optional[Synthesis]] = [None] * len(sentences)
        for rows in scheduler.sentence_batches([len(ids) for ids in sentences],
                                               BATCH_SENTENCES):
            for row, result in zip(rows, self._decode_batch(
                    [sentences[k] for k in rows], language_id, latents, padded_length)):
                results[row] = result
        return results

    def _decode_batch(self, sentences: Sequence[List[int]], language_id: int, latents,
                      padded_length: Optional[int]) -> List[Synthesis]:
        longest = max(len(ids) for ids in sentences)
        padded = padded_length or -(-longest // TOKEN_PADDING) * TOKEN_PADDING
        if padded < longest:
            raise ValueError(f"padded_length {padded} < {longest} tokens")
        tokens = np.zeros([len(sentences), padded], np.int32)
        for row, ids in enumerate(sentences):
            tokens[row, : len(ids)] = ids
        latents = tf.convert_to_tensor(latents, tf.float32)
        out = self.model.generate(
            tf.constant(tokens), tf.constant([len(ids) for ids in sentences], tf.int32),
            tf.fill([len(sentences)], tf.constant(language_id, tf.int32)),
            tf.tile(latents, [len(sentences), 1, 1]),
            max_steps=self.max_decoder_steps, jit_compile=True)
        r = self.config.model.reduction_factor
        lengths = out["mel_lengths"].numpy()
        mel, alignments, stopped = out["mel"].numpy(), out["alignments"], out["stopped"].numpy()
        results = []
        for row, ids in enumerate(sentences):
            frames = int(lengths[row])
            # Vocoded alone: a batch's padding would reach into Griffin-Lim's last frames.
            waveform, waveform_lengths = self.vocoder(mel[row: row + 1, :frames],
                                                      lengths[row: row + 1])
            results.append(Synthesis(
                waveform[0, : int(waveform_lengths[0])].numpy(), mel[row, :frames],
                alignments[row, : -(-frames // r), : len(ids)].numpy(),
                ended_by_stop=bool(stopped[row]), max_frames=self.max_frames(len(ids))))
        return results

    def teacher_forced_mel(self, ids: List[int], language_id: int, reference_mel,
                           recorded_mel) -> np.ndarray:
        """The postnet mel [T, n_mels] the model gives for token sequence `ids` when it is fed
        the recording's own frames (recorded_mel [T, n_mels]) as in training, with the speaker
        of reference_mel [T_ref, n_mels]: what it says with the recording's timing."""
        r = self.config.model.reduction_factor
        frames = len(recorded_mel)
        mel = np.zeros([1, -(-frames // r) * r, recorded_mel.shape[1]], np.float32)
        mel[0, :frames] = recorded_mel
        reference = np.asarray(reference_mel, np.float32)[None]
        out = self.model({"tokens": tf.constant([ids], tf.int32),
                          "token_lengths": tf.constant([len(ids)], tf.int32),
                          "language_ids": tf.constant([language_id], tf.int32),
                          "ref_mel": tf.constant(reference),
                          "ref_lengths": tf.constant([reference.shape[1]], tf.int32),
                          "mel": tf.constant(mel), "mel_lengths": tf.constant([frames], tf.int32)},
                         training=False)
        return out["mel_after"][0, :frames].numpy()

    def max_frames(self, num_tokens: int) -> int:
        return self.front_end.max_frames(num_tokens)


def warn_length_cap(what: str, max_frames: int, sample_rate: int, hop_length: int,
                    max_decoder_steps: int) -> None:
    """Logs that the length cap, not the stop head, ended the decode of `what`."""
    logger.warning("%s: decoding stopped at its cap of %d mel frames (%.2f s) because the model "
                   "predicted no end of speech; the audio is probably too long and ends in "
                   "noise or repetition. A model trained longer predicts the end; the cap is "
                   "--max-decoder-steps (now %d decoder steps) or model.max_frames_per_token "
                   "per input token.", what, max_frames, max_frames * hop_length / sample_rate,
                   max_decoder_steps)


def _paths(reference_audio: Union[str, Sequence[str]]) -> List[str]:
    """One path or several as a list; ReferenceAudioError for none."""
    paths = [reference_audio] if isinstance(reference_audio, (str, os.PathLike)) else \
        list(reference_audio)
    if not paths:
        raise ReferenceAudioError("No reference audio given: pass one or more recordings of the "
                                  "target speaker.")
    return [os.fspath(p) for p in paths]
