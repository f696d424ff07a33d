"""The voices a speech server speaks with: voice files (myxtts.inference.voices) in one folder.

    store = VoiceStore("voices/", fingerprint, checkpoint)
    store.add("anna", voice)        # voices/anna.npz, written atomically
    store.get("anna").latents; store.list(); store.delete("anna")

A voice's id is its file name without `.npz`: letters, digits, `_`, `-` and `.` (not first),
at most 64 characters, so an id can never name a path outside the folder. The folder is the
truth: files are written with atomic_write (a kill -9 leaves the old file or the new one, never
half of one), so the voices a server made survive a crash and a restart, and voice files
`myxtts-synthesize --save-voice` wrote with the same checkpoint can be copied in, adapted ones
(their postnet) too when the model speaks them (`decoder_fingerprint`). Files made by another
model, damaged ones and temporary files of an interrupted write are skipped at start, each with
a log line saying why. No TensorFlow.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from typing import Dict, List, Optional

from myxtts.errors import MyXTTSError
from myxtts.inference.voices import Voice, VoiceFileError, VoiceMismatchError

logger = logging.getLogger("myxtts.serving")

VOICE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
SUFFIX = ".npz"


class VoiceIdError(MyXTTSError, ValueError):
    """A voice id that is not a plain name (it could name a path outside the folder)."""


class UnknownVoiceError(MyXTTSError, KeyError):
    """No stored voice has this id."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class VoiceExistsError(MyXTTSError, ValueError):
    """A voice with this id is stored already."""


def check_voice_id(voice_id: str) -> str:
    if not isinstance(voice_id, str) or not VOICE_ID.fullmatch(voice_id) or ".." in voice_id:
        raise VoiceIdError(
            f"{voice_id!r} is not a voice id: use 1-64 letters, digits, '_', '-' or '.', "
            f"starting with a letter or digit (no '/', no '..').")
    return voice_id


class VoiceStore:
    """Voice files in `folder` that the model with conditioning `fingerprint` can use."""

    def __init__(self, folder: str, fingerprint: str, checkpoint: str,
                 decoder_fingerprint: Optional[str] = None):
        self.folder = folder
        self.fingerprint, self.checkpoint = fingerprint, checkpoint
        # the model's decoder fingerprint when it speaks adapted voices (ExportedModel
        # .speaks_adapted); None: adapted voices are skipped like another model's
        self.decoder_fingerprint = decoder_fingerprint
        self._lock = threading.Lock()
        self._voices: Dict[str, Voice] = {}
        os.makedirs(folder, exist_ok=True)
        for name in sorted(os.listdir(folder)):
            voice_id, suffix = os.path.splitext(name)
            if suffix != SUFFIX or not VOICE_ID.fullmatch(voice_id) or ".." in voice_id:
                continue  # not a voice file (e.g. atomic_write's ".anna.npz.xyz.tmp")
            path = os.path.join(folder, name)
            try:
                voice = Voice.load(path)
                self._check(voice)
            except (VoiceFileError, VoiceMismatchError) as e:
                logger.warning("Voice %s skipped: %s", path, e)
                continue
            self._voices[voice_id] = voice
        logger.info("Voices: %d in %s%s", len(self._voices), folder,
                    f" ({', '.join(sorted(self._voices))})" if self._voices else "")

    def _check(self, voice: Voice) -> None:
        """VoiceMismatchError for a voice this model cannot speak as it was made."""
        adapted = voice.postnet is not None and self.decoder_fingerprint is not None
        if adapted:
            voice.postnet_for(self.decoder_fingerprint, self.checkpoint)
        voice.latents_for(self.fingerprint, self.checkpoint, speaks_adapted=adapted)

    def path(self, voice_id: str) -> str:
        return os.path.join(self.folder, check_voice_id(voice_id) + SUFFIX)

    def list(self) -> List[tuple]:
        """[(id, voice)] sorted by id."""
        with self._lock:
            return sorted(self._voices.items())

    def get(self, voice_id: str) -> Voice:
        check_voice_id(voice_id)
        with self._lock:
            voice = self._voices.get(voice_id)
        if voice is None:
            raise UnknownVoiceError(self._unknown(voice_id))
        return voice

    def add(self, voice_id: str, voice: Voice) -> None:
        """Stores `voice` as `voice_id`; VoiceExistsError when that id is taken."""
        path = self.path(voice_id)
        with self._lock:
            if voice_id in self._voices:
                raise VoiceExistsError(f"A voice {voice_id!r} exists already: delete it first "
                                       f"or choose another name.")
            voice.save(path)
            self._voices[voice_id] = Voice.load(path)

    def delete(self, voice_id: str) -> None:
        path = self.path(voice_id)
        with self._lock:
            if voice_id not in self._voices:
                raise UnknownVoiceError(self._unknown(voice_id))
            os.remove(path)
            del self._voices[voice_id]

    def _unknown(self, voice_id: str) -> str:
        known = ", ".join(sorted(self._voices)) or "none yet"
        return (f"No voice {voice_id!r} (stored voices: {known}). Upload a recording with "
                f"POST /v1/voices to make one.")
