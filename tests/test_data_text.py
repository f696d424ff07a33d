"""Text front end: cleaners, number expansion, tokenizer vocabulary and its JSON round trip."""

import json
import os
import tempfile
import unittest

from myxtts.data import text
from myxtts.data.text import TextError, Tokenizer


class CleanerTest(unittest.TestCase):
    def test_english_numbers_and_abbreviations(self):
        self.assertEqual(text.clean_text("Dr. Smith paid $3.50 for 2 apples in 1984.", "english"),
                         "doctor smith paid three dollars and fifty cents for two apples in "
                         "nineteen eighty four.")
        self.assertEqual(text.clean_text("The 21st of 1,000,001 at 12.5%", "english"),
                         "the twenty first of one million one at twelve point five percent")

    def test_english_cleaner_strips_diacritics_multilingual_keeps_them(self):
        self.assertEqual(text.clean_text("Café “Über”", "english"), 'cafe "uber"')
        self.assertEqual(text.clean_text("Mañana, ÜBER  den  Berg", "multilingual", "es"),
                         "mañana, über den berg")

    def test_multilingual_expands_numbers_only_for_english(self):
        self.assertEqual(text.clean_text("3 cats", "multilingual", "en"), "three cats")
        self.assertEqual(text.clean_text("3 Katzen", "multilingual", "de"), "3 katzen")

    def test_unicode_normalisation_composes_characters(self):
        decomposed = "u\u0308ber"  # u + combining diaeresis
        self.assertEqual(text.normalize_unicode(decomposed), "über")


class TokenizerTest(unittest.TestCase):
    def test_vocabulary_is_base_alphabet_plus_training_characters(self):
        tok = Tokenizer.build(["über straße", "año"], "multilingual")
        for c in "abcxyz .,?" + "üßñ":
            self.assertIn(c, tok.symbols)
        self.assertEqual(tok.symbols[0], text.PAD)
        self.assertEqual(tok.pad_id, 0)
        ids = tok.encode("año über")
        self.assertNotIn(0, ids)
        self.assertEqual(tok.decode(ids), "año über")

    def test_save_load_round_trip_is_json(self):
        tok = Tokenizer.build(["über straße ☃"], "multilingual")
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "vocab.json")
            tok.save(path)
            with open(path, encoding="utf-8") as f:
                data = json.load(f)
            self.assertEqual(data["symbols"], tok.symbols)
            self.assertNotIn("☃", data["symbols"])  # not speakable: never in a vocabulary
            loaded = Tokenizer.load(path)
        self.assertEqual(loaded, tok)
        self.assertEqual(loaded.encode("straße"), tok.encode("straße"))

    def test_loading_a_foreign_file_is_a_clear_error(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "vocab.json")
            with open(path, "w", encoding="utf-8") as f:
                json.dump({"a": 1}, f)
            with self.assertRaisesRegex(TextError, "not a myxtts vocabulary"):
                Tokenizer.load(path)

    def test_language_ids_follow_config_order(self):
        self.assertEqual(text.language_id("de", ["en", "de", "es"]), 1)
        self.assertIsNone(text.language_id("fr", ["en", "de", "es"]))

    @unittest.skipIf(text.phonemizer_available(), "phonemizer + espeak-ng are installed")
    def test_phonemes_requested_but_missing_is_a_clear_error(self):
        with self.assertRaisesRegex(TextError, "pip install phonemizer"):
            text.Phonemizer()


if __name__ == "__main__":
    unittest.main()
