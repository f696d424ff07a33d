"""The TF Serving exporter: a checkpoint → <export_dir>/<version>/ (a SavedModel of
myxtts.exporters.serving_graph.ServingModule) and the models.config that lists it.

    result = export_tf_serving("runs/tiny", "models/myxtts")   # → models/myxtts/<N+1>/

A version is written to a temporary directory beside the versions and renamed into place, so TF
Serving (which ignores non-numeric names) never sees a half-written version, and an existing
version is never overwritten: the rename only happens onto a version number nobody holds.
vocab.json, config.yaml and model_info.json (plus an "export" entry) are SavedModel assets.
`models.config` (TF Serving's model_config_list) is written/updated in the PARENT of the export
directory, so one file lists every model under e.g. models/. TF Serving's protos are imported
here only.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from myxtts.atomic_write import atomic_write
from myxtts.exporters.registry import register
from myxtts.exporters.serving_graph import ServingModule
from myxtts.exporters.versions import publish_version
from myxtts.inference.checkpoint_loading import LoadedCheckpoint, load_checkpoint
from myxtts.inference.vocoding import GRIFFIN_LIM_ITERATIONS, load_vocoder
from myxtts.inference.voices import conditioning_fingerprint, decoder_fingerprint
from myxtts.run_directory import CONFIG_FILE, MODEL_INFO_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts.export")

MODELS_CONFIG = "models.config"


@dataclasses.dataclass
class ExportResult:
    version: int
    path: str
    signatures: List[str]
    models_config: str
    seconds: float


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


@register("tf_serving")
def export_tf_serving(checkpoint_dir: str, export_dir: str, *, checkpoint: Optional[str] = None,
                       max_decoder_steps: Optional[int] = None,
                       griffin_lim_iterations: int = GRIFFIN_LIM_ITERATIONS,
                       vocoder_dir: Optional[str] = None,
                       vocoder_checkpoint: Optional[str] = None,
                       decoding: Optional[Mapping[str, Any]] = None,
                       model_name: Optional[str] = None,
                       serving_base_path: str = "/models") -> ExportResult:
    """Exports a checkpoint as <export_dir>/<next version>/ and updates models.config.
    `serving_base_path` is where TF Serving sees the models' parent folder (in the container);
    `vocoder_dir` puts that HiFi-GAN vocoder in the graph instead of Griffin-Lim;
    `decoding` replaces the run's decoding settings in the exported decode
    (checkpoint_loading.load_checkpoint)."""
    started = time.monotonic()
    loaded = load_checkpoint(checkpoint_dir, checkpoint, decoding)
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
                    "vocoder_kind": vocoder.generator.vocoder_name if vocoder else "Griffin-Lim",
                    # Voice files made with this model carry it (myxtts.inference.voices).
                    "voice_fingerprint": conditioning_fingerprint(loaded.model, loaded.config),
                    # and adapted voices the decoder fingerprint (their postnet's frames)
                    "decoder_fingerprint": decoder_fingerprint(loaded.model, loaded.config),
                    "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
            module = ServingModule(loaded, steps, griffin_lim_iterations,
                                   _stage_assets(loaded, asset_dir, info), vocoder)
            logger.info("%s", module.vocoder.describe())
            signatures = module.signatures()
            tf.saved_model.save(module, staged, signatures=signatures)
        version = publish_version(staged, export_dir)
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
