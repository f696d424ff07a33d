"""Teacher-forced ("ground-truth aligned", GTA) mels for vocoder training (--gta-from DIR).

The acoustic model's teacher-forced mel of an utterance is frame-aligned with its recording, so
the vocoder can learn to turn the mels the acoustic model really predicts (slightly blurred)
into that recording. `teacher_forced_mels` runs the acoustic checkpoint over the training items
once and stores one float32 .npy per item in <vocoder checkpoint dir>/gta/, reused while the
acoustic checkpoint stays the same (gta/manifest.json names it).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Dict

import numpy as np
import tensorflow as tf

from myxtts.atomic_write import atomic_write
from myxtts.config import ConfigError
from myxtts.data import audio as audio_lib
from myxtts.data import audio_math
from myxtts.data import cache as cache_lib
from myxtts.errors import MyXTTSError
from myxtts.inference.checkpoint_loading import load_checkpoint
from myxtts.inference.vocoding import FEATURE_FIELDS

logger = logging.getLogger("myxtts.vocoder")

TEXT_FIELDS = ("text_cleaners", "use_phonemes")
MANIFEST = "manifest.json"


def teacher_forced_mels(acoustic_dir: str, items, config, out_dir: str,
                        device: str) -> Dict[str, str]:
    """{item id: .npy path} of the teacher-forced log10 mels [frames, n_mels] of `items`."""
    loaded = load_checkpoint(acoustic_dir)
    mismatch = {f: (getattr(loaded.config.data, f), getattr(config.data, f))
                for f in FEATURE_FIELDS + TEXT_FIELDS
                if getattr(loaded.config.data, f) != getattr(config.data, f)}
    if mismatch:
        raise ConfigError(
            f"--gta-from {acoustic_dir}: its config.yaml has different audio/text settings than "
            f"--config: {', '.join(f'data.{k} {a!r} vs {b!r}' for k, (a, b) in mismatch.items())}"
            f". The vocoder must be trained on the acoustic model's features: use the same data "
            f"section (copy it from {acoustic_dir}/config.yaml).")
    os.makedirs(out_dir, exist_ok=True)
    manifest_path = os.path.join(out_dir, MANIFEST)
    checkpoint = os.path.abspath(loaded.checkpoint_path)
    paths = {it.id: os.path.join(out_dir, re.sub(r"[^\w.-]", "_", it.id) + ".npy")
             for it in items}
    previous = {}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            previous = json.load(f)
    todo = [it for it in items if previous.get("checkpoint") != checkpoint
            or not os.path.exists(paths[it.id])]
    if not todo:
        logger.info("Reusing %d teacher-forced mels in %s (from %s).", len(items), out_dir,
                    checkpoint)
        return paths
    d = config.data
    r = loaded.config.model.reduction_factor
    log_mel = audio_lib.LogMel.from_config(d)
    ref_frames = audio_math.num_frames(int(d.ref_max_seconds * d.sample_rate), d.hop_length)
    model = loaded.model
    forward = tf.function(lambda batch: model(batch, training=False)["mel_after"],
                          reduce_retracing=True)
    logger.info("Computing teacher-forced mels of %d training utterances with %s on %s.",
                len(todo), checkpoint, device)
    for n, item in enumerate(todo, 1):
        unknown = loaded.tokenizer.unknown_characters(item.text)
        if unknown:
            raise MyXTTSError(
                f"--gta-from {acoustic_dir}: utterance {item.id} ({item.audio_path}) has "
                f"characters the acoustic model's vocabulary lacks: {' '.join(map(repr, unknown))}"
                f". Train the vocoder with --gta-from on the acoustic model's own training data.")
        samples = cache_lib.load_samples(item, d)
        mel = log_mel(samples[None])[0]
        frames = int(mel.shape[0])
        padded = -(-frames // r) * r
        mel = tf.pad(mel, [[0, padded - frames], [0, 0]], constant_values=np.log10(d.mel_floor))
        tokens = loaded.tokenizer.encode(item.text)
        with tf.device(device):
            out = forward({"tokens": tf.constant([tokens], tf.int32),
                           "token_lengths": tf.constant([len(tokens)], tf.int32),
                           "language_ids": tf.constant([item.language_id], tf.int32),
                           "mel": mel[None], "mel_lengths": tf.constant([frames], tf.int32),
                           "ref_mel": mel[None, :ref_frames],
                           "ref_lengths": tf.constant([min(ref_frames, frames)], tf.int32)})
        np.save(paths[item.id], out[0, :frames].numpy().astype(np.float32), allow_pickle=False)
        if n % 100 == 0:
            logger.info("  %d/%d teacher-forced mels", n, len(todo))
    atomic_write(manifest_path, json.dumps({"checkpoint": checkpoint, "items": len(items)},
                                           indent=2))
    logger.info("Wrote %d teacher-forced mels to %s.", len(todo), out_dir)
    return paths
