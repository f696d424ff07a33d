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
        self.text_front_end = (None if loaded.tokenizer.use_phonemes else InGraphTokenizer(
            loaded.tokenizer, config.data.languages, config.model.max_text_positions))
        self.assets = {name: tf.saved_model.Asset(path) for name, path in assets.items()}
        n, m = config.data.n_mels, config.model
        self._specs = {
            "text": tf.TensorSpec([None], tf.string, "text"),
            "language": tf.TensorSpec([None], tf.string, "language"),
            "reference_mel": tf.TensorSpec([None, None, n], tf.float32, "reference_mel"),
            "reference_lengths": tf.TensorSpec([None], tf.int32, "reference_lengths"),
            "speaker_latents": tf.TensorSpec([None, m.num_speaker_latents, m.d_model],
                                             tf.float32, "speaker_latents"),
            "tokens": tf.TensorSpec([None, None], tf.int32, "tokens"),
            "token_lengths": tf.TensorSpec([None], tf.int32, "token_lengths"),
            "language_ids": tf.TensorSpec([None], tf.int32, "language_ids"),
            "audio": tf.TensorSpec([None, None], tf.float32, "audio"),
            "audio_lengths": tf.TensorSpec([None], tf.int32, "audio_lengths"),
            "mel": tf.TensorSpec([None, None, n], tf.float32, "mel"),
            "mel_lengths": tf.TensorSpec([None], tf.int32, "mel_lengths"),
        }

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

    # ---- signatures --------------------------------------------------------------------------
    def signatures(self) -> Dict[str, tf.types.experimental.ConcreteFunction]:
        inputs = {
            "synthesize_tokens": ("tokens", "token_lengths", "language_ids", "speaker_latents"),
            "speaker_latents": ("reference_mel", "reference_lengths"),
            "reference_mel": ("audio", "audio_lengths"),
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
        if self.text_front_end is None:
            signatures["serving_default"] = signatures["synthesize_tokens"]
        return signatures
