"""Voices as files: a speaker's latents, made once from reference recordings, stored and reused.

    voice = synth.voice(["a.wav", "b.flac"])     # Synthesizer: latents averaged over references
    voice.save("v.npz")
    voice = Voice.load("v.npz")                  # no TensorFlow needed
    latents = synth.use_voice(voice)             # refuses a voice made with another model

A voice file is an uncompressed .npz of plain arrays, read with allow_pickle=False: `format`
("myxtts-voice"), `format_version`, `latents` float32 [speaker_latent_rows, d_model],
`fingerprint` (hex SHA-256), `references` (the recordings' file names, without folders) and
`checkpoint` (the checkpoint that made it, for messages). Strings are numpy unicode arrays.

A voice adapted to its references (myxtts-synthesize --adapt-steps --adapt-part postnet;
inference.voice_adaptation) also holds the adapted postnet: `postnet_0` ... `postnet_{n-1}`
(float32, in the order of model.postnet.trainable_variables) and `decoder_fingerprint`
(decoder_fingerprint below); such a file is format version 2, a plain voice version 1, so older
readers refuse only the adapted ones. The Synthesizer and an export that records the decoder
fingerprint (its postnet_window_adapted signature; the speech server) speak an adapted voice;
older exports and the on-device runtime speak with a voice's latents alone, so they refuse it
(Voice.latents_for) rather than drop its postnet.

The fingerprint identifies the latent space a voice lives in: it is a SHA-256 over everything
that turns a reference recording into latents — the reference featurisation (sample rate, STFT
and mel settings, silence trimming, loudness normalisation, the seconds used) and the speaker
conditioning path (conditioning encoder + perceiver resampler: its architecture settings and each
weight's name, shape, dtype and values). Equal fingerprints mean the model would compute exactly
the stored latents from the same recordings, so a stored voice is as good as passing the
recordings again: loading the same checkpoint again, in any process, accepts it, and so does a
model fine-tuned with the speaker encoder frozen (training.freeze). The text encoder and the
decoder are deliberately left out: they read the latents but do not define them. Another run, or
the same run at another step, has other conditioning weights and is refused. Hashing the
conditioning weights is cheap next to loading them (measured on 2 busy CPU cores: 1 ms for
configs/tiny.yaml's 23k parameters, 7 ms for quick.yaml's 0.5 M, 0.23 s for base.yaml's 21 M);
the Synthesizer computes it once.

An adapted postnet was fitted to the frames one model's decoder writes, and it replaces that
model's postnet: decoder_fingerprint hashes the model's settings (config.model and the reference
featurisation) and every weight except the postnet's, so it holds for the checkpoint that made
the voice whichever postnet is in use.

Imports no TensorFlow (a server or an on-device runtime reads voice files without it).
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import re
import zipfile
import zlib
from typing import Optional, Tuple

import numpy as np

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError

FORMAT = "myxtts-voice"
FORMAT_VERSION = 2  # written for adapted voices; plain voices are written as version 1
PLAIN_VERSION = 1

# What turns a recording into the model's reference mel (Synthesizer.reference_mel) and which
# architecture settings of the speaker encoder its weight shapes do not show (num_heads); a new
# setting that changes either belongs here.
_FEATURISATION = ("sample_rate", "n_fft", "hop_length", "win_length", "n_mels", "fmin", "fmax",
                  "mel_floor", "trim_silence", "trim_top_db", "normalize_loudness",
                  "target_rms_db", "ref_max_seconds")
_CONDITIONING = ("d_model", "num_heads", "ff_multiplier", "conditioning_layers",
                 "perceiver_layers", "num_speaker_latents", "reference_spectrum")
# Settings that add latent rows when on; off they are left out of the fingerprint, so the voices
# of models from before they existed keep their fingerprints.
_CONDITIONING_WHEN_ON = ("reference_statistics", "reference_matching")
_ZIP_MAGIC = b"PK\x03\x04"  # how every .npz (a zip archive) begins
_KEYS = ("format", "format_version", "latents", "fingerprint", "references", "checkpoint")
_ADAPTED_KEYS = ("decoder_fingerprint", "postnet_0")


class VoiceFileError(MyXTTSError, ValueError):
    """A voice file that cannot be written or read, is not a voice file, or is damaged."""


class VoiceMismatchError(MyXTTSError, ValueError):
    """A voice made with a model whose speaker conditioning differs from this one's, or an
    adapted voice where it cannot be spoken adapted."""


def conditioning_fingerprint(model, config) -> str:
    """Hex SHA-256 of the reference featurisation of `config.data` and the speaker conditioning
    path of `model` (an XTTSModel built from `config`): its settings and every weight of
    model.speaker_encoder (name, shape, dtype, values)."""
    settings = {"data": {k: getattr(config.data, k) for k in _FEATURISATION},
                "model": {k: getattr(config.model, k) for k in _CONDITIONING}}
    settings["model"].update({k: True for k in _CONDITIONING_WHEN_ON if getattr(config.model, k)})
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8"))
    for variable in model.speaker_encoder.weights:
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"\n{variable.path} {value.dtype.str} {value.shape}\n".encode("utf-8"))
        digest.update(value.tobytes())
    return digest.hexdigest()


def decoder_fingerprint(model, config) -> str:
    """Hex SHA-256 of the model's settings (config.model, the reference featurisation of
    config.data) and every weight of `model` but the postnet's (name, shape, dtype, values):
    what writes the frames an adapted postnet was fitted to."""
    settings = {"data": {k: getattr(config.data, k) for k in _FEATURISATION},
                "model": dataclasses.asdict(config.model)}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode("utf-8"))
    postnet = {id(variable) for variable in model.postnet.weights}
    for variable in model.weights:
        if id(variable) in postnet:
            continue
        value = np.ascontiguousarray(variable.numpy())
        digest.update(f"\n{variable.path} {value.dtype.str} {value.shape}\n".encode("utf-8"))
        digest.update(value.tobytes())
    return digest.hexdigest()


@dataclasses.dataclass(frozen=True, eq=False)
class Voice:
    """A speaker's latents and the model that made them (Synthesizer.voice, Voice.load)."""

    latents: np.ndarray  # float32 [speaker_latent_rows, d_model]: mean over the references
    fingerprint: str  # conditioning_fingerprint of the model that made it
    references: Tuple[str, ...]  # file names (no folders) of the recordings it was made from
    checkpoint: str  # the checkpoint that made it (for messages)
    file: Optional[str] = None  # where it was loaded from (None: made in this process)
    # adapted to its references: the postnet's weights (model.postnet.trainable_variables'
    # order) and the decoder_fingerprint of the model they were fitted to; None for a plain voice
    postnet: Optional[Tuple[np.ndarray, ...]] = None
    decoder_fingerprint: Optional[str] = None

    def latents_for(self, fingerprint: str, checkpoint: str,
                    speaks_adapted: bool = False) -> np.ndarray:
        """The latents [speaker_latent_rows, d_model] for the model with conditioning
        `fingerprint` (loaded from `checkpoint`, named in the message); VoiceMismatchError when
        the voice was made with another model, or when it is adapted and the caller cannot put
        its postnet in (`speaks_adapted` False)."""
        name = f" {self.file}" if self.file else ""
        if self.postnet is not None and not speaks_adapted:
            raise VoiceMismatchError(
                f"The voice{name} was adapted to its recordings ({', '.join(self.references)}): "
                f"it holds a postnet fine-tuned on them (myxtts-synthesize --adapt-steps), and "
                f"its latents alone would not sound as adapted. Speak it with myxtts-synthesize "
                f"--voice (Synthesizer.use_voice) or the speech server, with the checkpoint that "
                f"made it (the server's export made by this myxtts); the on-device runtime "
                f"speaks with latents only, so make its voices without --adapt-steps.")
        if fingerprint != self.fingerprint:
            raise VoiceMismatchError(
                f"The voice{name} was made by {self.checkpoint} from "
                f"{', '.join(self.references)}, and the speaker conditioning of {checkpoint} "
                f"differs (fingerprint {self.fingerprint[:12]} vs {fingerprint[:12]}): its "
                f"latents are not what this model hears in those recordings. Make the voice "
                f"again from the recordings with {checkpoint}, or use it with the checkpoint "
                f"that made it (and the same --reference-statistics and --reference-matching "
                f"on or off: on, a voice holds more latent rows).")
        return self.latents

    def postnet_for(self, fingerprint: str, checkpoint: str) -> Optional[Tuple[np.ndarray, ...]]:
        """The adapted postnet's weights (None for a plain voice) for the model with
        decoder_fingerprint `fingerprint` (loaded from `checkpoint`); VoiceMismatchError when
        they were fitted to another model's decoder."""
        if self.postnet is not None and fingerprint != self.decoder_fingerprint:
            name = f" {self.file}" if self.file else ""
            raise VoiceMismatchError(
                f"The voice{name} was adapted to {', '.join(self.references)} with "
                f"{self.checkpoint}: its postnet was fitted to that model's decoder, and the "
                f"decoder of {checkpoint} differs (fingerprint {self.decoder_fingerprint[:12]} "
                f"vs {fingerprint[:12]}). Adapt the voice again with {checkpoint} "
                f"(--reference-audio, --reference-text, --adapt-steps, --save-voice), or use it "
                f"with the checkpoint that made it.")
        return self.postnet

    def save(self, path: str) -> None:
        """Writes the voice to `path` (a .npz, replaced atomically; the name is used as given)."""
        buffer = io.BytesIO()
        adapted = {}
        if self.postnet is not None:
            adapted = {f"postnet_{i}": np.asarray(value, np.float32)
                       for i, value in enumerate(self.postnet)}
            adapted["decoder_fingerprint"] = np.array(self.decoder_fingerprint)
        np.savez(buffer, format=np.array(FORMAT),
                 format_version=np.array(FORMAT_VERSION if adapted else PLAIN_VERSION),
                 latents=np.asarray(self.latents, np.float32),
                 fingerprint=np.array(self.fingerprint), references=np.array(self.references),
                 checkpoint=np.array(self.checkpoint), **adapted)
        try:
            atomic_write(path, buffer.getvalue())
        except OSError as e:
            raise VoiceFileError(f"Cannot write the voice file {path}: {e}. Pass a path in a "
                                 f"writable folder (free space if the disk is full).") from None

    @classmethod
    def load(cls, path: str) -> "Voice":
        """The voice stored in `path` by Voice.save; VoiceFileError (naming the file) for a file
        that cannot be read, is not a voice file, is damaged or comes from a newer format."""
        arrays = _read_voice_arrays(path)
        version = arrays.get("format_version")
        if _is_integer(version) and int(version) > FORMAT_VERSION:
            raise VoiceFileError(
                f"The voice file {path} has format version {int(version)}, written by a newer "
                f"myxtts; this one reads version {FORMAT_VERSION}. Update myxtts, or make the "
                f"voice again with this one.")
        problem = _problem(arrays)
        if problem:
            raise VoiceFileError(
                f"The voice file {path} is damaged ({problem}). Make the voice again from its "
                f"recordings.")
        postnet, fingerprint = None, None
        if int(version) == FORMAT_VERSION:
            postnet = tuple(arrays[f"postnet_{i}"] for i in range(_postnet_count(arrays)))
            fingerprint = str(arrays["decoder_fingerprint"])
        return cls(arrays["latents"], str(arrays["fingerprint"]),
                   tuple(str(r) for r in arrays["references"]), str(arrays["checkpoint"]),
                   file=path, postnet=postnet, decoder_fingerprint=fingerprint)


def _read_voice_arrays(path: str) -> dict:
    """The arrays of the voice file `path` by name, read without unpickling; VoiceFileError for
    a file that cannot be read, is not a voice file or is a damaged archive."""
    try:
        with open(path, "rb") as f:
            is_zip = f.read(len(_ZIP_MAGIC)) == _ZIP_MAGIC
    except OSError as e:
        raise VoiceFileError(f"Cannot read the voice file {path}: {e}.") from None
    arrays = None
    if is_zip:
        try:
            with np.load(path, allow_pickle=False) as loaded:
                if "format" in loaded.files and str(loaded["format"]) == FORMAT:
                    arrays = {name: loaded[name] for name in loaded.files}
        except (OSError, EOFError, ValueError, zipfile.BadZipFile, zlib.error) as e:
            raise VoiceFileError(
                f"The voice file {path} is damaged or incomplete ({str(e)[:200]}). Make the "
                f"voice again from its recordings.") from None
    if arrays is None:
        raise VoiceFileError(
            f"{path} is not a myxtts voice file (a .npz with format '{FORMAT}', written by "
            f"Voice.save). Pass such a file, or make the voice from recordings of the speaker.")
    return arrays


def _is_integer(value: Optional[np.ndarray]) -> bool:
    return value is not None and value.shape == () and value.dtype.kind in "iu"


def _problem(arrays: dict) -> Optional[str]:
    """What is wrong with the arrays of a file that says it is a voice file, or None."""
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        return f"no {', '.join(missing)}"
    version, latents, references = (arrays[k] for k in ("format_version", "latents",
                                                         "references"))
    if not _is_integer(version) or int(version) not in (PLAIN_VERSION, FORMAT_VERSION):
        return f"format_version {version}"
    if latents.dtype != np.float32 or latents.ndim != 2 or not np.all(np.isfinite(latents)):
        return f"latents {latents.dtype} {latents.shape}, expected finite float32 [L, d]"
    if not re.fullmatch(r"[0-9a-f]{64}", str(arrays["fingerprint"])):
        return "the fingerprint is not a SHA-256"
    if references.dtype.kind != "U" or references.ndim != 1 or references.size == 0:
        return "no reference names"
    if arrays["checkpoint"].dtype.kind != "U":
        return "no checkpoint name"
    if int(version) == FORMAT_VERSION:
        missing = [k for k in _ADAPTED_KEYS if k not in arrays]
        if missing:
            return f"an adapted voice without {', '.join(missing)}"
        if not re.fullmatch(r"[0-9a-f]{64}", str(arrays["decoder_fingerprint"])):
            return "the decoder fingerprint is not a SHA-256"
        for i in range(_postnet_count(arrays)):
            value = arrays[f"postnet_{i}"]
            if value.dtype != np.float32 or not np.all(np.isfinite(value)):
                return f"postnet_{i} {value.dtype} {value.shape}, expected finite float32"
    return None


def _postnet_count(arrays: dict) -> int:
    count = 0
    while f"postnet_{count}" in arrays:
        count += 1
    return count

