"""The serving graph: a restored model with its in-graph text front end, log-mel and vocoder
as batched signatures (every exporter saves this module in its own format).

Every signature is batched (leading dimension B) and named by its inputs (docs/serving.md):

  serving_default     text [B] string, language [B] string, reference_mel [B, T, n_mels] float32,
                      reference_lengths [B] int32  → waveform, waveform_lengths, mel, mel_lengths
  synthesize_latents  text, language, speaker_latents [B, L, d] float32          → same outputs
  synthesize_tokens   tokens [B, T] int32, token_lengths [B] int32, language_ids [B] int32,
                      speaker_latents                                              → same outputs
  speaker_latents     reference_mel, reference_lengths                 → speaker_latents [B, L, d]
  tokenize            text, language                      → tokens, token_lengths, language_ids
  reference_mel       audio [B, S] float32 at data.sample_rate, audio_lengths [B] int32
                                                            → reference_mel, reference_lengths
  vocode              mel [B, T, n_mels] float32 log10, mel_lengths [B] int32
                                             → waveform, waveform_lengths   (with a vocoder only)

The streamed decode (myxtts.inference.streaming drives it; exported_model.ExportedModel is that
driver over these signatures), with the decode state as explicit tensors
(XTTSModel.DecodeState.to_tensors: step, frames, caches_<block>_<k>, ...):

  decode_start        tokens, token_lengths, language_ids, speaker_latents        → the state
  decode_steps        the state + steps [] int32 (up to that many more decoder steps) → the state
  postnet_window      mel_before [B, T, n_mels] (decoded frames, all valid), and with
                      model.reference_matching the decode's speaker_latents (the output is
                      matched to the voice's frames, as the whole decode's)        → mel
  postnet_window_adapted  the same + postnet_weights [P] float32 (an adapted voice's postnet:
                      its weights flattened and joined in model.postnet.trainable_variables'
                      order; myxtts.inference.voices)                              → mel
  vocode_window       mel [B, T, n_mels], first_frame [] int32 (where the window starts in its
                      utterance; Griffin-Lim's starting phases depend on it)       → waveform
  streaming_info      (no inputs) → postnet_context, vocoder_context (receptive fields in mel
                      frames), reduction_factor, hop_length, sample_rate, n_mels,
                      max_decoder_steps, token_padding, max_text_positions,
                      max_frames_per_token_x1000 (int32 scalars)

Text is cleaned and tokenized inside the graph (myxtts.inference.text_graph documents which
cleaner steps are in the graph); phoneme models export only the token-id and speaker signatures
(serving_default is then synthesize_tokens). The decode is the model's `decode` (start_decode +
decode_steps) in a plain graph: TF Serving refuses XLA-compiled functions on CPU unless started
with --xla_cpu_compilation_enabled, so the export does not mark it jit_compile (the
synthesizer's XLA decode and this graph agree to ~1e-6). The vocoder runs in the graph, so
serving returns audio: the generator of a trained vocoder when one is given
(myxtts.inference.vocoding), else Griffin-Lim.
"""

from __future__ import annotations

from typing import Dict

import tensorflow as tf

from myxtts.data.audio import LogMel
from myxtts.inference.checkpoint_loading import LoadedCheckpoint
from myxtts.inference.text_graph import InGraphTokenizer
from myxtts.inference.vocoding import GriffinLimVocoder, trim_to_longest
from myxtts.inference.synthesizer import TOKEN_PADDING
from myxtts.models.xtts import DecodeState


class ServingModule(tf.Module):
    """The restored model + in-graph text front end + log-mel + Griffin-Lim, as signatures."""

    def __init__(self, loaded: LoadedCheckpoint, max_decoder_steps: int,
                 griffin_lim_iterations: int, assets: Dict[str, str], vocoder=None):
        super().__init__(name="myxtts")
        config = loaded.config
        self.model = loaded.model
        self.max_decoder_steps = max_decoder_steps
        self.stop_threshold = config.model.stop_threshold
        self.has_vocoder_model = vocoder is not None
        self.vocoder = vocoder or GriffinLimVocoder(config.data, griffin_lim_iterations)
        # The generator's weights become the SavedModel's (a tracked attribute).
        self.generator = getattr(vocoder, "generator", None)
        self.featurizer = LogMel.from_config(config.data)
        self.data_config, self.model_config = config.data, config.model
        self.text_front_end = (None if loaded.tokenizer.use_phonemes else InGraphTokenizer(
            loaded.tokenizer, config.data.languages, config.model.max_text_positions))
        self.assets = {name: tf.saved_model.Asset(path) for name, path in assets.items()}
        n, m = config.data.n_mels, config.model
        self._specs = {
            "text": tf.TensorSpec([None], tf.string, "text"),
            "language": tf.TensorSpec([None], tf.string, "language"),
            "reference_mel": tf.TensorSpec([None, None, n], tf.float32, "reference_mel"),
            "reference_lengths": tf.TensorSpec([None], tf.int32, "reference_lengths"),
            "speaker_latents": tf.TensorSpec([None, m.speaker_latent_rows, m.d_model],
                                             tf.float32, "speaker_latents"),
            "tokens": tf.TensorSpec([None, None], tf.int32, "tokens"),
            "token_lengths": tf.TensorSpec([None], tf.int32, "token_lengths"),
            "language_ids": tf.TensorSpec([None], tf.int32, "language_ids"),
            "audio": tf.TensorSpec([None, None], tf.float32, "audio"),
            "audio_lengths": tf.TensorSpec([None], tf.int32, "audio_lengths"),
            "mel": tf.TensorSpec([None, None, n], tf.float32, "mel"),
            "mel_lengths": tf.TensorSpec([None], tf.int32, "mel_lengths"),
            "mel_before": tf.TensorSpec([None, None, n], tf.float32, "mel_before"),
            "first_frame": tf.TensorSpec([], tf.int32, "first_frame"),
            "steps": tf.TensorSpec([], tf.int32, "steps"),
            "postnet_weights": tf.TensorSpec([None], tf.float32, "postnet_weights"),
        }
        self._state_specs = self._decode_state_specs()

    def _decode_state_specs(self) -> Dict[str, tf.TensorSpec]:
        """Specs of DecodeState.to_tensors for any batch and text length: the dimensions that
        differ between two small decodes are left open."""
        m = self.model_config
        shapes = []
        for batch, tokens in ((1, 1), (2, 3)):
            state = self.model.start_decode(
                tf.ones([batch, tokens], tf.int32), tf.fill([batch], tokens),
                tf.zeros([batch], tf.int32),
                tf.zeros([batch, m.speaker_latent_rows, m.d_model]), self.max_decoder_steps)
            shapes.append(state.to_tensors())
        return {name: tf.TensorSpec([a if a == b else None for a, b in
                                     zip(value.shape, shapes[1][name].shape)],
                                    value.dtype, name)
                for name, value in shapes[0].items()}

    # ---- graph bodies ------------------------------------------------------------------------
    def _synthesize(self, tokens, token_lengths, language_ids, speaker_latents):
        out = self.model.decode(tokens, token_lengths, language_ids, speaker_latents,
                                max_steps=self.max_decoder_steps,
                                stop_threshold=self.stop_threshold)
        mel = trim_to_longest(out["mel"], out["mel_lengths"])
        waveform, waveform_lengths = self.vocoder(mel, out["mel_lengths"])
        return {"waveform": waveform, "waveform_lengths": waveform_lengths, "mel": mel,
                "mel_lengths": out["mel_lengths"]}

    def _speaker_latents(self, reference_mel, reference_lengths):
        return self.model.speaker_latents(reference_mel, reference_lengths)

    def serving_default(self, text, language, reference_mel, reference_lengths):
        tokens, token_lengths, language_ids = self.text_front_end(text, language)
        return self._synthesize(tokens, token_lengths, language_ids,
                                self._speaker_latents(reference_mel, reference_lengths))

    def synthesize_latents(self, text, language, speaker_latents):
        tokens, token_lengths, language_ids = self.text_front_end(text, language)
        return self._synthesize(tokens, token_lengths, language_ids, speaker_latents)

    def synthesize_tokens(self, tokens, token_lengths, language_ids, speaker_latents):
        return self._synthesize(tokens, token_lengths, language_ids, speaker_latents)

    def speaker_latents(self, reference_mel, reference_lengths):
        return {"speaker_latents": self._speaker_latents(reference_mel, reference_lengths)}

    def tokenize(self, text, language):
        tokens, token_lengths, language_ids = self.text_front_end(text, language)
        return {"tokens": tokens, "token_lengths": token_lengths, "language_ids": language_ids}

    def reference_mel(self, audio, audio_lengths):
        mel, lengths = self.featurizer.masked(audio, audio_lengths)
        return {"reference_mel": mel, "reference_lengths": lengths}

    def vocode(self, mel, mel_lengths):
        waveform, waveform_lengths = self.vocoder(mel, mel_lengths)
        return {"waveform": waveform, "waveform_lengths": waveform_lengths}

    # ---- the streamed decode -------------------------------------------------------------------
    def decode_start(self, tokens, token_lengths, language_ids, speaker_latents):
        return self.model.start_decode(tokens, token_lengths, language_ids, speaker_latents,
                                       self.max_decoder_steps).to_tensors()

    def decode_steps(self, state, steps):
        return self.model.decode_steps(DecodeState.from_tensors(state), steps,
                                       self.stop_threshold).to_tensors()

    def postnet_window(self, mel_before, speaker_latents=None):
        mel = self.model.postnet(mel_before, tf.ones(tf.shape(mel_before)[:2], tf.bool))
        return {"mel": self._matched(mel, speaker_latents)}

    def postnet_window_adapted(self, mel_before, postnet_weights, speaker_latents=None):
        postnet = self.model.postnet
        shapes = [v.shape for v in postnet.trainable_variables]
        weights = [tf.reshape(w, shape) for w, shape in
                   zip(tf.split(postnet_weights, [s.num_elements() for s in shapes]), shapes)]
        mel, _ = postnet.stateless_call(weights, [], mel_before,
                                        tf.ones(tf.shape(mel_before)[:2], tf.bool))
        return {"mel": self._matched(mel, speaker_latents)}

    def _matched(self, mel, speaker_latents):
        """A postnet window's output as the whole decode outputs it."""
        if speaker_latents is None:
            return mel
        return self.model.reference_matched(mel, speaker_latents)

    def vocode_window(self, mel, first_frame):
        return {"waveform": self.vocoder.windows(mel, first_frame)}

    def streaming_info(self):
        d, m = self.data_config, self.model_config
        values = {"postnet_context": self.model.postnet.receptive_field,
                  "vocoder_context": self.vocoder.receptive_field,
                  "reduction_factor": m.reduction_factor, "hop_length": d.hop_length,
                  "sample_rate": d.sample_rate, "n_mels": d.n_mels,
                  "max_decoder_steps": self.max_decoder_steps, "token_padding": TOKEN_PADDING,
                  "max_text_positions": m.max_text_positions,
                  "max_frames_per_token_x1000": round(m.max_frames_per_token * 1000)}
        return {name: tf.constant(value, tf.int32) for name, value in values.items()}

    # ---- signatures --------------------------------------------------------------------------
    def signatures(self) -> Dict[str, tf.types.experimental.ConcreteFunction]:
        # model.reference_matching: the postnet's windows are matched to the decode's voice
        voice = ("speaker_latents",) if self.model_config.reference_matching else ()
        inputs = {
            "synthesize_tokens": ("tokens", "token_lengths", "language_ids", "speaker_latents"),
            "speaker_latents": ("reference_mel", "reference_lengths"),
            "reference_mel": ("audio", "audio_lengths"),
            "decode_start": ("tokens", "token_lengths", "language_ids", "speaker_latents"),
            "postnet_window": ("mel_before",) + voice,
            "postnet_window_adapted": ("mel_before", "postnet_weights") + voice,
            "vocode_window": ("mel", "first_frame"),
            "streaming_info": (),
        }
        if self.has_vocoder_model:
            inputs["vocode"] = ("mel", "mel_lengths")
        if self.text_front_end is not None:
            inputs.update({
                "serving_default": ("text", "language", "reference_mel", "reference_lengths"),
                "synthesize_latents": ("text", "language", "speaker_latents"),
                "tokenize": ("text", "language"),
            })
        signatures = {}
        for name, names in inputs.items():
            function = tf.function(getattr(self, name),
                                   input_signature=[self._specs[k] for k in names])
            signatures[name] = function.get_concrete_function()
        signatures["decode_steps"] = tf.function(
            self.decode_steps, input_signature=[dict(self._state_specs), self._specs["steps"]]
        ).get_concrete_function()
        if self.text_front_end is None:
            signatures["serving_default"] = signatures["synthesize_tokens"]
        return signatures
