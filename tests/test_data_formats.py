"""Input formats and folder layouts: real speech in every format libsndfile writes here (wav,
flac, ogg/vorbis, ogg/opus, mp3, aiff) validates and decodes; m4a decodes through ffmpeg when it
is installed and is reported with a one-line hint when it is not; audio may sit beside
metadata.csv and rows may name files with their extension or a relative path; a folder of audio
without metadata says how to write one.

    python -m pytest tests/test_data_formats.py -v
"""

import os
import shutil
import subprocess
import tempfile
import unittest
from unittest import mock

import soundfile as sf

from myxtts.data import audio_io
from myxtts.data.metadata import DatasetError
from myxtts.data.prepare import prepare_dataset
from tests.data_samples import sample_rows, speech, tiny_config, write_metadata

RATE = 16000
# extension → soundfile (format, subtype)
FORMATS = {"wav": ("WAV", "PCM_16"), "flac": ("FLAC", "PCM_16"), "ogg": ("OGG", "VORBIS"),
           "opus": ("OGG", "OPUS"), "mp3": ("MP3", "MPEG_LAYER_III"), "aiff": ("AIFF", "PCM_16")}
TEXTS = [text for _, text, *_ in sample_rows()]


class FormatsAndLayoutsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp()

    def tearDown(self):
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _dataset(self, names, layout=lambda name: name.split(".")[0]):
        """Speech files `names` (with extensions) beside metadata.csv; rows named by
        `layout(file name)`."""
        voice = speech("S001")
        lines = []
        for i, name in enumerate(names):
            ext = name.rsplit(".", 1)[1]
            if ext in FORMATS:
                fmt, subtype = FORMATS[ext]
                sf.write(os.path.join(self.tmp, name), voice, RATE, format=fmt, subtype=subtype)
            lines.append(f"{layout(name)}|{TEXTS[i]}|{TEXTS[i]}|anna|en")
        write_metadata(self.tmp, lines)
        return prepare_dataset(tiny_config(val_fraction=0.0, min_train_items=0), self.tmp)

    def test_every_libsndfile_format_beside_the_metadata(self):
        prepared = self._dataset([f"u{i}.{ext}" for i, ext in enumerate(FORMATS)])
        self.assertEqual(prepared.report.problems, [], prepared.report.table())
        for item in prepared.items["train"]:
            self.assertAlmostEqual(item.num_samples / RATE, len(speech("S001")) / RATE,
                                   delta=0.1, msg=item.audio_path)

    def test_rows_may_name_files_with_extension_or_relative_path(self):
        os.makedirs(os.path.join(self.tmp, "clips"))
        prepared = self._dataset(["a.wav", "clips/b.flac"], layout=lambda name: name)
        self.assertEqual(sorted(it.id for it in prepared.items["train"]),
                         ["a.wav", "clips/b.flac"])

    @unittest.skipUnless(shutil.which("ffmpeg"), "ffmpeg is not installed")
    def test_m4a_decodes_with_ffmpeg(self):
        wav = os.path.join(self.tmp, "source.wav")
        sf.write(wav, speech("S001"), RATE)
        subprocess.run(["ffmpeg", "-v", "error", "-i", wav, "-c:a", "aac",
                        os.path.join(self.tmp, "u0.m4a")], check=True)
        os.remove(wav)
        prepared = self._dataset(["u0.m4a", "u1.wav"])
        self.assertEqual(prepared.report.problems, [], prepared.report.table())
        m4a = next(it for it in prepared.items["train"] if it.id == "u0")
        self.assertAlmostEqual(m4a.num_samples / RATE, len(speech("S001")) / RATE, delta=0.1)

    def test_m4a_without_ffmpeg_is_reported_with_a_hint(self):
        with open(os.path.join(self.tmp, "u0.m4a"), "wb") as f:
            f.write(b"\0" * 64)
        with mock.patch.object(audio_io.shutil, "which", return_value=None):
            prepared = self._dataset(["u0.m4a", "u1.wav", "u2.wav"])
        table = prepared.report.table()
        self.assertEqual(prepared.report.count("needs_ffmpeg"), 1, table)
        self.assertIn(".m4a files need ffmpeg, which is not installed: install it "
                      "(apt-get install ffmpeg", table)
        self.assertEqual([it.id for it in prepared.items["train"]], ["u1", "u2"])
        if shutil.which("ffmpeg"):  # once installed, the file is decoded: the hint is not cached
            again = prepare_dataset(tiny_config(val_fraction=0.0), self.tmp)
            self.assertEqual(again.report.count("needs_ffmpeg"), 0)
            self.assertEqual(again.report.count("unreadable_audio"), 1)

    def test_audio_without_metadata_says_how_to_write_it(self):
        for name in ("take1.wav", "take2.wav"):
            sf.write(os.path.join(self.tmp, name), speech("S001"), RATE)
        with self.assertRaises(DatasetError) as ctx:
            prepare_dataset(tiny_config(), self.tmp)
        message = str(ctx.exception)
        self.assertIn("holds 2 audio file(s) but no metadata_train.csv or metadata.csv", message)
        self.assertIn(f"Write {os.path.join(self.tmp, 'metadata.csv')}", message)
        self.assertIn("'take1|Hello, this is my voice.'", message)
        self.assertNotIn("\n", message)


if __name__ == "__main__":
    unittest.main()
