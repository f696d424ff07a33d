"""Sentence splitting before synthesis (myxtts.inference.sentences): where a sentence ends by
language, and how a sentence too long for one decode is cut at clauses, words and characters."""

import subprocess
import unittest

from myxtts.inference.sentences import split_sentences
from tests import children


class SentenceEndTest(unittest.TestCase):
    def test_a_paragraph_of_three_sentences(self):
        self.assertEqual(split_sentences("  Hello there. How are you?\nI am fine!  ", "en"),
                         ["Hello there.", "How are you?", "I am fine!"])

    def test_abbreviations_initials_and_decimals_do_not_end_a_sentence(self):
        self.assertEqual(
            split_sentences("Dr. Smith met J. R. R. Tolkien at 3.5 p.m. today. Mrs. Jones, "
                            "e.g. her, did not. So did I. Then No. 5 came.", "en-US"),
            ["Dr. Smith met J. R. R. Tolkien at 3.5 p.m. today.",
             "Mrs. Jones, e.g. her, did not.", "So did I.", "Then No. 5 came."])

    def test_abbreviations_are_those_of_the_language(self):
        self.assertEqual(split_sentences("Sra. García llegó. Adiós.", "es"),
                         ["Sra. García llegó.", "Adiós."])
        self.assertEqual(split_sentences("Sra. García llegó. Adiós.", "xx"),
                         ["Sra.", "García llegó.", "Adiós."])

    def test_runs_of_terminators_and_closing_quotes(self):
        self.assertEqual(
            split_sentences('Really?! Yes... He said "Stop." (It worked.) Then he left…', "en"),
            ["Really?!", "Yes...", 'He said "Stop."', "(It worked.)", "Then he left…"])
        self.assertEqual(split_sentences("« Bonjour ! » dit-il. M. Dupont arrive.", "fr"),
                         ["« Bonjour ! » dit-il.", "M. Dupont arrive."])

    def test_a_lowercase_continuation_is_not_an_end(self):
        self.assertEqual(split_sentences("Apples, pears, etc. and so on. Wait... what? OK.",
                                         "en"),
                         ["Apples, pears, etc. and so on.", "Wait... what?", "OK."])

    def test_chinese_and_japanese_need_no_whitespace(self):
        self.assertEqual(split_sentences("你好。我很好！你呢？", "zh"),
                         ["你好。", "我很好！", "你呢？"])
        self.assertEqual(split_sentences("「こんにちは。」元気？はい。", "ja"),
                         ["「こんにちは。」", "元気？", "はい。"])

    def test_spanish_opening_marks_belong_to_their_sentence(self):
        self.assertEqual(split_sentences("¿Cómo estás? ¡Muy bien! Gracias.¿Y tú?", "es"),
                         ["¿Cómo estás?", "¡Muy bien!", "Gracias.", "¿Y tú?"])

    def test_german_ordinals_and_quotes(self):
        self.assertEqual(
            split_sentences("Wir kommen am 3. Mai, z.B. mit Dr. Weber. Er sagte: »Komm!« Er "
                            "ging.", "de-DE"),
            ["Wir kommen am 3. Mai, z.B. mit Dr. Weber.", "Er sagte: »Komm!«", "Er ging."])
        self.assertEqual(split_sentences("Es waren 3. Dann 4.", "en"), ["Es waren 3.", "Dann 4."])

    def test_empty_and_unpunctuated_texts(self):
        self.assertEqual(split_sentences("", "en"), [])
        self.assertEqual(split_sentences(" \n\t ", "en"), [])
        self.assertEqual(split_sentences("  no punctuation at all\n", "en"),
                         ["no punctuation at all"])


class OverlongSentenceTest(unittest.TestCase):
    @staticmethod
    def _words(piece: str) -> int:
        return len(piece.split())

    def test_cut_at_clauses_then_words_each_piece_fitting(self):
        sentence = ("One two three, four five six seven eight nine ten eleven, twelve; thirteen "
                    "fourteen.")
        pieces = split_sentences(sentence + " Short one.", "en", 4, self._words)
        self.assertEqual(pieces, ["One two three,", "four five six seven", "eight nine ten eleven,",
                                  "twelve; thirteen fourteen.", "Short one."])
        self.assertTrue(all(self._words(p) <= 4 for p in pieces))
        self.assertEqual(" ".join(pieces).split(), (sentence + " Short one.").split())

    def test_a_sentence_that_fits_is_not_cut(self):
        sentence = "One two three, four five six."
        self.assertEqual(split_sentences(sentence, "en", 6, self._words), [sentence])
        self.assertEqual(split_sentences(sentence, "en", 5, self._words),
                         ["One two three,", "four five six."])

    def test_a_word_too_long_is_cut_hard_and_numbers_are_not_clauses(self):
        self.assertEqual(split_sentences("Supercalifragilistic costs 1,000.", "en", 6),
                         ["Superc", "alifra", "gilist", "ic", "costs", "1,000."])

    def test_chinese_is_cut_at_clauses_then_characters_punctuation_kept(self):
        pieces = split_sentences("这是一个非常长的句子，没有任何空格；但是有逗号。", "zh", 6)
        self.assertEqual(pieces, ["这是一个非常", "长的句子，", "没有任何空", "格；", "但是有逗号。"])

    def test_calls_to_length_grow_with_the_text_not_its_square(self):
        calls = []

        def length(piece: str) -> int:
            calls.append(piece)
            return self._words(piece)

        paragraph = " ".join(f"Sentence {i} has some words, a clause or two, and then it ends."
                             for i in range(500))
        pieces = split_sentences(paragraph, "en", 5, length)
        self.assertEqual(" ".join(pieces).split(), paragraph.split())
        self.assertTrue(all(self._words(p) <= 5 for p in pieces))
        self.assertLessEqual(len(calls), 3 * len(paragraph.split()))

    def test_max_length_below_one_is_refused(self):
        with self.assertRaises(ValueError):
            split_sentences("Hello.", "en", 0)


class ImportTest(unittest.TestCase):
    def test_importing_it_does_not_import_tensorflow(self):
        proc = subprocess.run(children.command("config", "myxtts.inference.sentences"),
                              cwd=children.REPO, env=children.env(), timeout=120)
        self.assertEqual(proc.returncode, 0)


if __name__ == "__main__":
    unittest.main()
