"""Cached features: log-mels written once to sharded TFRecords, resumable, checked before use.

A cache lives in `<cache_dir>/features-<split>-<fingerprint>/`: `shard-XXXXX-of-YYYYY.tfrecord`
files, each with a `.json` sidecar written after it (its utterances, bytes, mtime and CRC-32),
and `index.json` (written last). The fingerprint is a SHA-256 of the audio settings that shape a
mel (rate, STFT, mel bank, floor, trimming, loudness) and of the split's file list (id, path,
size, mtime). Change either and a new fingerprint points to a new folder: the cache is built
again and stale folders of that split are removed. Shard i holds items [i * 256, (i + 1) * 256)
of the split, in order; one record = one utterance: its id, its position in the split and its
log10 mel [frames, n_mels] as float32 bytes.

Resuming and damage: a build that is killed keeps every shard whose sidecar was written; the next
start builds only the rest. Before a cache is used, every shard is checked against its sidecar:
a shard whose size or mtime differs is read and its CRC-32 compared, and a damaged or missing
shard is built again, never served (TFRecord's own per-record CRC-32C guards the reads too).

The reference bank of cached mode (a few utterances' mel starts per speaker) is kept beside the
shards in `reference-bank-<hash>.npz`, so a restart reads it instead of the shards.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import io
import json
import logging
import os
import shutil
import zlib
from typing import Dict, List, Sequence, Tuple

import numpy as np
import tensorflow as tf
import tqdm

from myxtts.atomic_write import atomic_write
from myxtts.data import audio as audio_lib

from myxtts.data import audio_io, audio_math, voice_shifts
from myxtts.data.validation import Item

logger = logging.getLogger("myxtts.data")

FORMAT_VERSION = 3
ITEMS_PER_SHARD = 256
MEL_BATCH = 32  # utterances per featurizer call while caching
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


def _example(uid: str, position: int, mel: np.ndarray) -> bytes:
    feature = {
        "id": tf.train.Feature(bytes_list=tf.train.BytesList(value=[uid.encode("utf-8")])),
        "index": tf.train.Feature(int64_list=tf.train.Int64List(value=[position])),
        "frames": tf.train.Feature(int64_list=tf.train.Int64List(value=[mel.shape[0]])),
        "mel": tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[np.ascontiguousarray(mel, np.float32).tobytes()])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _crc32(path: str) -> int:
    crc = 0
    with open(path, "rb") as f:
        while True:
            block = f.read(1 << 22)
            if not block:
                return crc
            crc = zlib.crc32(block, crc)


def _shard_ok(path: str, expected_items: int) -> bool:
    """Whether shard `path` is complete and intact, by its sidecar: same size and mtime, or
    same size and CRC-32 (a copied folder gets new mtimes; the sidecar is then updated)."""
    try:
        with open(path + ".json", encoding="utf-8") as f:
            meta = json.load(f)
        st = os.stat(path)
    except (OSError, ValueError):
        return False
    if meta.get("items") != expected_items or st.st_size != meta.get("bytes"):
        return False
    if st.st_mtime_ns == meta.get("mtime_ns"):
        return True
    if _crc32(path) != meta.get("crc32"):
        return False
    atomic_write(path + ".json", json.dumps(dict(meta, mtime_ns=st.st_mtime_ns)))
    return True


def _build_shard(path: str, items: Sequence[Item], first: int, data_config, log_mel,
                 data_device: str, progress) -> None:
    """Writes one shard under a temporary name, renames it, then writes its sidecar. The mels
    are computed MEL_BATCH utterances of similar length at a time (zero-padded and masked:
    the same frames as one at a time, in a third of the time)."""
    samples = [load_samples(item, data_config) for item in items]
    mels: List[np.ndarray] = [np.zeros(0)] * len(items)
    by_length = sorted(range(len(items)), key=lambda i: len(samples[i]))
    for start in range(0, len(by_length), MEL_BATCH):
        group = by_length[start:start + MEL_BATCH]
        lengths = np.array([len(samples[i]) for i in group], np.int32)
        batch = np.zeros([len(group), int(lengths.max())], np.float32)
        for row, i in enumerate(group):
            batch[row, :lengths[row]] = samples[i]
        with tf.device(data_device):
            mel, mel_lengths = log_mel.masked(batch, lengths)
        mel, mel_lengths = mel.numpy(), mel_lengths.numpy()
        for row, i in enumerate(group):
            mels[i] = mel[row, :mel_lengths[row]]
        progress.update(len(group))
    part = path + ".part"
    with tf.io.TFRecordWriter(part) as writer:
        for offset, (item, mel) in enumerate(zip(items, mels)):
            writer.write(_example(item.id, first + offset, mel))
    with open(part, "rb") as f:
        os.fsync(f.fileno())
    os.replace(part, path)
    st = os.stat(path)
    atomic_write(path + ".json", json.dumps({"items": len(items), "bytes": st.st_size,
                                             "mtime_ns": st.st_mtime_ns,
                                             "crc32": _crc32(path)}))


def _folder_bytes(folder: str) -> int:
    return sum(e.stat().st_size for e in os.scandir(folder) if e.is_file())


def ensure_cache(items: Sequence[Item], split: str, data_config, cache_dir: str,
                 data_device: str) -> List[str]:
    """Returns the shard paths of an up-to-date cache for `items`, building what is missing or
    damaged (mels computed with the same LogMel as raw mode, under `data_device`, by
    data.num_workers threads, one shard each at a time)."""
    d = data_config
    fp = fingerprint(items, d)
    folder = os.path.join(cache_dir, f"features-{split}-{fp[:16]}")
    index_path = os.path.join(folder, "index.json")
    num_shards = max(1, -(-len(items) // ITEMS_PER_SHARD))
    shards = [f"shard-{i:05d}-of-{num_shards:05d}.tfrecord" for i in range(num_shards)]
    os.makedirs(cache_dir, exist_ok=True)
    for name in os.listdir(cache_dir):
        if name.startswith(f"features-{split}-") and name != os.path.basename(folder):
            logger.info("Removing the stale %s feature cache %s.", split, name)
            shutil.rmtree(os.path.join(cache_dir, name), ignore_errors=True)
    os.makedirs(folder, exist_ok=True)
    for name in os.listdir(folder):
        if name.endswith(".part"):
            os.remove(os.path.join(folder, name))

    def chunk(i):
        return items[i * ITEMS_PER_SHARD:(i + 1) * ITEMS_PER_SHARD]

    todo = [i for i in range(num_shards)
            if not _shard_ok(os.path.join(folder, shards[i]), len(chunk(i)))]
    complete = os.path.isfile(index_path)
    if complete and todo:
        logger.warning("The %s feature cache %s has %d damaged or missing shard(s) (first: "
                       "%s); building them again.", split, folder, len(todo), shards[todo[0]])
    elif todo and len(todo) < num_shards:
        logger.info("Resuming the %s feature cache in %s: %d of %d shards are done.", split,
                    folder, num_shards - len(todo), num_shards)
    elif todo:
        logger.info("Building the %s feature cache in %s (%d utterances, %d shard(s)).", split,
                    folder, len(items), num_shards)
    if todo:
        log_mel = audio_lib.LogMel.from_config(d)
        done = len(items) - sum(len(chunk(i)) for i in todo)
        progress = tqdm.tqdm(total=len(items), initial=done, desc=f"caching {split} features",
                             unit="utt")
        workers = max(1, d.num_workers or os.cpu_count() or 1)
        with concurrent.futures.ThreadPoolExecutor(workers) as pool:
            futures = [pool.submit(_build_shard, os.path.join(folder, shards[i]), chunk(i),
                                   i * ITEMS_PER_SHARD, d, log_mel, data_device, progress)
                       for i in todo]
            try:
                for future in futures:
                    future.result()
            except BaseException:
                for future in futures:
                    future.cancel()
                raise
        progress.close()
    if todo or not complete:
        atomic_write(index_path, json.dumps({"fingerprint": fp, "items": len(items),
                                             "shards": shards, "n_mels": d.n_mels}, indent=1))
    logger.info("%s %s features in %s: %d utterances, %d shard(s), %.2f GB on disk.",
                "Cached" if todo else "Using cached", split, folder, len(items), num_shards,
                _folder_bytes(folder) / 1e9)
    return [os.path.join(folder, s) for s in shards]


def reference_bank(members: Sequence[Tuple[str, int]], shards: Dict[str, List[str]],
                   frames: int, data_config, cache_dir: str) -> Tuple[np.ndarray, np.ndarray]:
    """Mels [len(members), frames, n_mels] (the first `frames` frames, padded with the log
    floor) and lengths of the utterances `members` ((split, position) pairs), read from the
    feature caches once and then kept in `<cache_dir>/reference-bank-<hash>.npz`. Only the
    shards that hold members are read."""
    d = data_config
    key = hashlib.sha256(json.dumps({"shards": {s: os.path.dirname(p[0]) for s, p in
                                                shards.items() if p},
                                     "members": [list(m) for m in members], "frames": frames,
                                     "n_mels": d.n_mels}, sort_keys=True).encode())
    path = os.path.join(cache_dir, f"reference-bank-{key.hexdigest()[:16]}.npz")
    if os.path.isfile(path):
        try:
            with np.load(path, allow_pickle=False) as saved:
                mels, lengths = saved["mels"], saved["lengths"]
            if mels.shape == (len(members), frames, d.n_mels):
                return mels, lengths
        except (OSError, ValueError, KeyError):
            pass
        logger.warning("The reference bank %s is unreadable; reading it again from the "
                       "feature cache.", path)
    mels = np.full([len(members), frames, d.n_mels], np.log10(d.mel_floor), np.float32)
    lengths = np.zeros([len(members)], np.int32)
    rows: Dict[str, Dict[int, int]] = {}
    for row, (split, position) in enumerate(members):
        rows.setdefault(split, {})[position] = row
    for split, wanted in rows.items():
        files = [shards[split][i] for i in sorted({p // ITEMS_PER_SHARD for p in wanted})]
        keys = tf.constant(sorted(wanted), tf.int64)

        def is_wanted(serialized):
            position = tf.io.parse_single_example(
                serialized, {"index": tf.io.FixedLenFeature([], tf.int64)})["index"]
            at = tf.minimum(tf.searchsorted(keys, position[None])[0], len(wanted) - 1)
            return tf.equal(keys[at], position)

        records = tf.data.TFRecordDataset(files, num_parallel_reads=min(len(files), 4))
        records = records.filter(is_wanted).map(lambda r: parse_record(r, d.n_mels))
        for position, mel in records.prefetch(tf.data.AUTOTUNE):
            row = wanted[int(position)]
            mel = mel.numpy()[:frames]
            mels[row, :len(mel)] = mel
            lengths[row] = len(mel)
    for name in os.listdir(cache_dir):
        if name.startswith("reference-bank-") and name.endswith(".npz"):
            os.remove(os.path.join(cache_dir, name))
    buffer = _npz_bytes(mels=mels, lengths=lengths)
    atomic_write(path, buffer)
    return mels, lengths


def _npz_bytes(**arrays) -> bytes:
    out = io.BytesIO()
    np.savez(out, **arrays)
    return out.getvalue()


def parse_record(serialized: tf.Tensor, n_mels: int):
    """(position in its split, mel [frames, n_mels]) of one record."""
    parsed = tf.io.parse_single_example(serialized, {
        "index": tf.io.FixedLenFeature([], tf.int64),
        "mel": tf.io.FixedLenFeature([], tf.string)})
    mel = tf.reshape(tf.io.decode_raw(parsed["mel"], tf.float32), [-1, n_mels])
    return parsed["index"], mel
