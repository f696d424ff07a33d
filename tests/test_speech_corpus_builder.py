"""samples/make_speech_corpus.py's many-voice sets: which voices go where (no synthesiser runs)."""

import importlib.util
import subprocess
import sys
import unittest

spec = importlib.util.spec_from_file_location("make_speech_corpus", "samples/make_speech_corpus.py")
builder = importlib.util.module_from_spec(spec)
spec.loader.exec_module(builder)


def identity(voice) -> tuple:
    """An espeak-ng variant is one voice in every accent; other engines' voices are their names."""
    return (voice.engine, voice.variant or voice.voice)


class ManyVoiceSetsTest(unittest.TestCase):
    def test_held_out_and_training_voices_are_disjoint_and_seeded(self):
        held, train = builder.split(builder.inventory(), 25, 2, 6, seed=0)
        self.assertEqual([len(s) for s in held], [6, 6])
        self.assertEqual(len(train), 25)
        trained = {identity(v) for v in train}
        for held_set in held:
            self.assertFalse(trained & {identity(v) for v in held_set})
        self.assertFalse({identity(v) for v in held[0]} & {identity(v) for v in held[1]})
        self.assertEqual(builder.split(builder.inventory(), 25, 2, 6, seed=0), (held, train))
        self.assertNotEqual(builder.split(builder.inventory(), 25, 2, 6, seed=1)[0], held)

    def test_every_outside_voice_is_outside_the_inventory_and_in_one_set(self):
        inventory = {identity(v) for v in builder.inventory()}
        seen = set()
        for voices in builder.OUTSIDE_SETS:
            # a pitch-shifted voice is another voice than the voice it was made from
            ids = {identity(builder.Voice(*spec)) + (builder.Voice(*spec).cents,)
                   for spec in voices}
            self.assertEqual(len(ids), len(voices))
            self.assertIn(len(ids), (5, 6))
            self.assertFalse({i[:2] for i in ids} & inventory)
            self.assertFalse(ids & seen)
            seen |= ids

    def test_every_outside_set_names_the_packages_of_its_festival_voices(self):
        self.assertEqual(len(builder.FESTIVAL_PACKAGES), len(builder.OUTSIDE_SETS))
        for voices, packages in zip(builder.OUTSIDE_SETS, builder.FESTIVAL_PACKAGES):
            festival = [spec for spec in voices if spec[0] == "festival"]
            self.assertEqual(bool(festival), bool(packages))
            self.assertLessEqual(len(packages), len(festival))

    def test_outside_sets_need_the_many_voice_mode(self):
        run = subprocess.run([sys.executable, "samples/make_speech_corpus.py", "--out", "unused",
                              "--outside-sets", "2"], capture_output=True, text=True)
        self.assertEqual(run.returncode, 2)
        self.assertIn("--outside-sets", run.stderr)
        self.assertIn("--many-voices", run.stderr)


if __name__ == "__main__":
    unittest.main()
