"""SavedModel export for TF Serving: <export_dir>/<version>/ with text-in, waveform-out signatures.

    result = export_saved_model("runs/tiny", "models/myxtts")   # → models/myxtts/<N+1>/

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
(serving_default is then synthesize_tokens). The decode loop is the model's `decode` body in a
plain graph: TF Serving refuses XLA-compiled functions on CPU unless started with
--xla_cpu_compilation_enabled, so the export does not mark it jit_compile (the synthesizer's XLA
decode and this graph agree to ~1e-6). The vocoder runs in the graph, so serving returns audio:
the HiFi-GAN generator of `vocoder_dir` when one is given (myxtts.inference.vocoding), else
Griffin-Lim.

A version is written to a temporary directory beside the versions and renamed into place, so TF
Serving (which ignores non-numeric names) never sees a half-written version, and an existing
version is never overwritten: the rename only happens onto a version number nobody holds.
vocab.json, config.yaml and model_info.json (plus an "export" entry) are SavedModel assets.
`models.config` (TF Serving's model_config_list) is written/updated in the PARENT of the export
directory, so one file lists every model under e.g. models/.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Dict, List, Optional

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from myxtts.atomic_write import atomic_write
from myxtts.data.audio import LogMel
from myxtts.inference.checkpoint_loading import LoadedCheckpoint, load_checkpoint
from myxtts.inference.text_graph import InGraphTokenizer
from myxtts.inference.vocoding import (GRIFFIN_LIM_ITERATIONS, GriffinLimVocoder, load_vocoder,
                                       trim_to_longest)
from myxtts.run_directory import CONFIG_FILE, MODEL_INFO_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts.inference")

MODELS_CONFIG = "models.config"


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


@dataclasses.dataclass
class ExportResult:
    version: int
    path: str
    signatures: List[str]
    models_config: str
    seconds: float


def existing_versions(export_dir: str) -> List[int]:
    if not os.path.isdir(export_dir):
        return []
    return sorted(int(n) for n in os.listdir(export_dir) if n.isdigit())


def _publish(staged: str, export_dir: str) -> int:
    """Renames the staged SavedModel to the next free version number (max existing + 1)."""
    while True:
        version = max(existing_versions(export_dir), default=0) + 1
        target = os.path.join(export_dir, str(version))
        if os.path.lexists(target):  # a concurrent export took it after we listed
            continue
        try:
            os.rename(staged, target)
        except OSError:
            if os.path.lexists(target):
                continue
            raise
        return version


def update_models_config(export_dir: str, model_name: str, base_path: str) -> str:
    """Adds or updates `model_name` in <parent of export_dir>/models.config (text proto)."""
    path = os.path.join(os.path.dirname(os.path.abspath(export_dir)), MODELS_CONFIG)
    config = model_server_config_pb2.ModelServerConfig()
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            text_format.Parse(f.read(), config)
    entries = config.model_config_list.config
    entry = next((e for e in entries if e.name == model_name), None) or entries.add()
    entry.name = model_name
    entry.base_path = base_path
    entry.model_platform = "tensorflow"
    atomic_write(path, text_format.MessageToString(config))
    return path


def _stage_assets(loaded: LoadedCheckpoint, folder: str, export_info: dict) -> Dict[str, str]:
    paths = {}
    for name in (VOCAB_FILE, CONFIG_FILE):
        paths[name] = shutil.copy(os.path.join(loaded.directory, name), folder)
    paths[MODEL_INFO_FILE] = os.path.join(folder, MODEL_INFO_FILE)
    with open(paths[MODEL_INFO_FILE], "w", encoding="utf-8") as f:
        json.dump({**loaded.model_info, "export": export_info}, f, indent=2, ensure_ascii=False,
                  sort_keys=True)
    return {name.split(".")[0]: path for name, path in paths.items()}


def export_saved_model(checkpoint_dir: str, export_dir: str, *, checkpoint: Optional[str] = None,
                       max_decoder_steps: Optional[int] = None,
                       griffin_lim_iterations: int = GRIFFIN_LIM_ITERATIONS,
                       vocoder_dir: Optional[str] = None,
                       vocoder_checkpoint: Optional[str] = None,
                       model_name: Optional[str] = None,
                       serving_base_path: str = "/models") -> ExportResult:
    """Exports a checkpoint as <export_dir>/<next version>/ and updates models.config.
    `serving_base_path` is where TF Serving sees the models' parent folder (in the container);
    `vocoder_dir` puts that HiFi-GAN vocoder in the graph instead of Griffin-Lim."""
    started = time.monotonic()
    loaded = load_checkpoint(checkpoint_dir, checkpoint)
    vocoder = (load_vocoder(vocoder_dir, loaded.config.data, vocoder_checkpoint)
               if vocoder_dir else None)
    steps = int(max_decoder_steps or loaded.config.model.max_decoder_steps)
    model_name = model_name or os.path.basename(os.path.normpath(export_dir))
    os.makedirs(export_dir, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".tmp-export-", dir=export_dir)
    try:
        with tempfile.TemporaryDirectory() as asset_dir:
            info = {"checkpoint": os.path.abspath(loaded.checkpoint_path),
                    "max_decoder_steps": steps, "griffin_lim_iterations": griffin_lim_iterations,
                    "vocoder": vocoder.checkpoint_path if vocoder else "griffin-lim",
                    "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            module = ServingModule(loaded, steps, griffin_lim_iterations,
                                   _stage_assets(loaded, asset_dir, info), vocoder)
            logger.info("%s", module.vocoder.describe())
            signatures = module.signatures()
            tf.saved_model.save(module, staged, signatures=signatures)
        version = _publish(staged, export_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    config_path = update_models_config(export_dir, model_name,
                                       f"{serving_base_path.rstrip('/')}/{model_name}")
    path = os.path.join(export_dir, str(version))
    seconds = time.monotonic() - started
    logger.info("Exported %s as %s (version %d, signatures %s) in %.1f s; %s lists it.",
                loaded.checkpoint_path, path, version, ", ".join(sorted(signatures)), seconds,
                config_path)
    return ExportResult(version, path, sorted(signatures), config_path, seconds)
