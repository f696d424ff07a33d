"""Cached features: log-mels written once to sharded TFRecords, rebuilt when anything changes.

A cache lives in `<cache_dir>/features-<split>-<fingerprint>/`: `shard-XXXXX-of-YYYYY.tfrecord`
files and `index.json` (written last, so a half-written cache is never used). The fingerprint is a
SHA-256 of the audio settings that shape a mel (rate, STFT, mel bank, floor, trimming, loudness)
and of the split's file list (id, path, size, mtime). Change either and a new fingerprint points
to a new folder: the cache is rebuilt (with a progress bar) and stale folders of that split are
removed. One record = one utterance: its id and its log10 mel [frames, n_mels] as float32 bytes.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from typing import List, Sequence

import numpy as np
import tensorflow as tf
import tqdm

from myxtts.data import audio as audio_lib

from myxtts.data import audio_io, audio_math, voice_shifts
from myxtts.data.validation import Item

logger = logging.getLogger("myxtts.data")

FORMAT_VERSION = 2
ITEMS_PER_SHARD = 256
AUDIO_KEYS = ("sample_rate", "n_fft", "hop_length", "win_length", "n_mels", "fmin", "fmax",
              "mel_floor", "trim_silence", "trim_top_db", "normalize_loudness", "target_rms_db")


def fingerprint(items: Sequence[Item], data_config) -> str:
    h = hashlib.sha256()
    settings = {k: getattr(data_config, k) for k in AUDIO_KEYS}
    h.update(json.dumps({"version": FORMAT_VERSION, "audio": settings}, sort_keys=True).encode())
    for item in items:
        st = os.stat(item.audio_path)
        h.update(f"\n{item.id}|{os.path.abspath(item.audio_path)}|{st.st_size}|"
                 f"{st.st_mtime_ns}|{item.voice_shift:g}".encode("utf-8"))
    return h.hexdigest()


def load_samples(item: Item, data_config) -> np.ndarray:
    """The training-time audio of an item: decoded, resampled, trimmed, its piece of the file,
    voice-shifted, loudness-normalised."""
    d = data_config
    samples = audio_io.decode(item.audio_path, d.sample_rate, d.trim_silence, d.trim_top_db)
    samples = samples.samples[item.offset:]
    if item.voice_shift != 1.0:
        samples = voice_shifts.shift_voice(samples[:round(item.num_samples * item.voice_shift)],
                                           item.voice_shift, item.num_samples)
    samples = samples[:item.num_samples]
    if d.normalize_loudness:
        samples = audio_math.normalize_loudness(samples, d.target_rms_db)
    return samples


def _example(uid: str, mel: np.ndarray) -> bytes:
    feature = {
        "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[uid.encode("utf-8")])),
        "frames": tf.train.Feature(int64_list=tf.train.Int64List(value=[mel.shape[0]])),
        "mel": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[np.ascontiguousarray(mel, np.float32).tobytes()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def ensure_cache(items: Sequence[Item], split: str, data_config, cache_dir: str,
                 data_device: str) -> List[str]:
    """Returns the shard paths of an up-to-date cache for `items`, building it if needed
    (mels computed with the same LogMel as raw mode, under `data_device`)."""
    fp = fingerprint(items, data_config)
    folder = os.path.join(cache_dir, f"features-{split}-{fp[:16]}")
    index_path = os.path.join(folder, "index.json")
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
        if index.get("fingerprint") == fp:
            logger.info("Using cached %s features in %s (%d utterances).", split, folder,
                        index["items"])
            return [os.path.join(folder, s) for s in index["shards"]]
    os.makedirs(cache_dir, exist_ok=True)
    for name in os.listdir(cache_dir):
        if name.startswith(f"features-{split}-"):
            shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)
    os.makedirs(folder)
    log_mel = audio_lib.LogMel.from_config(data_config)
    num_shards = max(1, -(-len(items) // ITEMS_PER_SHARD))
    shards = [f"shard-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    logger.info("Building the %s feature cache in %s (%d utterances, %d shard(s)).", split,
                folder, len(items), num_shards)
    progress = tqdm.tqdm(total=len(items), desc=f"caching {split} features", unit="utt")
    for shard_index, shard in enumerate(shards):
        with tf.io.TFRecordWriter(os.path.join(folder, shard)) as writer:
            for item in items[shard_index * ITEMS_PER_SHARD:(shard_index + 1) * ITEMS_PER_SHARD]:
                with tf.device(data_device):
                    mel = log_mel(load_samples(item, data_config)[None])[0].numpy()
                writer.write(_example(item.id, mel))
                progress.update(1)
    progress.close()
    with open(index_path, "w", encoding="utf-8") as f:
        json.dump({"fingerprint": fp, "items": len(items), "shards": shards,
                   "n_mels": data_config.n_mels}, f, indent=1)
    return [os.path.join(folder, s) for s in shards]


def parse_record(serialized: tf.Tensor, n_mels: int):
    """(id, mel [frames, n_mels]) of one record."""
    parsed = tf.io.parse_single_example(serialized, {
        "id": tf.io.FixedLenFeature([], tf.string),
        "frames": tf.io.FixedLenFeature([], tf.int64),
        "mel": tf.io.FixedLenFeature([], tf.string)})
    mel = tf.reshape(tf.io.decode_raw(parsed["mel"], tf.float32), [-1, n_mels])
    return parsed["id"], mel
