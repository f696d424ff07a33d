"""Streaming synthesis (myxtts/inference/streaming.py): the joined chunks equal whole-utterance
synthesis (HiFi-GAN, Vocos, Griffin-Lim), Vocos's stateful stream equals its whole mel, seams without clicks, an item the stop head ends in
the middle of a chunk, a text of several sentences, the first chunk before the decode ends.

    python -m pytest tests/test_streaming.py -v
"""

import os
import shutil
import tempfile
import unittest

import keras
import numpy as np
import pytest
import tensorflow as tf

from myxtts.decoding import scheduler
from myxtts.inference import streaming
from myxtts.inference.model_decoder import ModelDecoder
from myxtts.inference.synthesizer import TOKEN_PADDING, Synthesizer
from myxtts.inference.vocoding import load_vocoder
from myxtts.vocoder.vocos import VocosGenerator, VocosStream
from tests.inference_helpers import REFERENCE_AUDIO, make_checkpoint, shared_vocoder_checkpoint
from tests.model_helpers import tiny_config, tiny_model

MAX_STEPS = 48  # tiny.yaml: r = 2, so up to 96 frames (1.5 s)
TEXT = "Hello there, this is a test of streaming."
MIN_SNR_DB = 30.0  # every vocoder, Griffin-Lim included (its phases are keyed by position)


def snr_db(signal: np.ndarray, reference: np.ndarray) -> float:
    noise = np.sum((signal - reference) ** 2)
    return float(10 * np.log10(np.sum(reference ** 2) / max(noise, 1e-30)))


def _local_filter(context: int, per_frame: int):
    """A stage whose output for frame i is a weighted sum of frames [i - context, i + context]
    (zeros past the window's edges), repeated per_frame times: a stand-in with an exact
    receptive field."""
    weights = np.linspace(1.0, 2.0, 2 * context + 1)

    def run(frames, first_frame):
        del first_frame
        padded = np.pad(frames, [(context, context)] + [(0, 0)] * (frames.ndim - 1))
        out = sum(w * padded[k: k + len(frames)] for k, w in enumerate(weights))
        return np.repeat(out, per_frame, axis=0)
    return run


@pytest.mark.parametrize("per_frame,crossfade", [(1, 0), (4, 3)])
def test_windowed_stage_equals_one_pass_for_any_chunking(per_frame, crossfade):
    context = 3
    run = _local_filter(context, per_frame)
    rng = np.random.default_rng(0)
    frames = rng.normal(size=(53, 5)).astype(np.float32)
    whole = run(frames, 0)
    for trial in range(5):
        stage = streaming.WindowedStage(run, context, per_frame, crossfade)
        cuts = np.sort(rng.choice(np.arange(1, 53), size=trial + 2, replace=False))
        pieces = np.split(frames, cuts)
        outs = [stage.push(piece, i == len(pieces) - 1) for i, piece in enumerate(pieces)]
        joined = np.concatenate([o for o in outs if o is not None])
        np.testing.assert_allclose(joined, whole, atol=1e-5)


def test_vocos_stream_equals_the_whole_mel_for_any_cut_and_computes_each_frame_once():
    keras.utils.set_random_seed(0)
    generator = VocosGenerator(16, 256, 64, 256, channels=24, layers=3)
    mel = np.random.default_rng(1).normal(-2, 1, (90, 16)).astype(np.float32)
    whole = np.clip(generator(mel[None]).numpy()[0], -1.0, 1.0)
    # the first call needs the convolutions' lag of frames (12 here); pushes before it wait
    for cuts in ([90], [13, 77], [5, 8, 1, 1, 40, 35], [30, 60, 0], [12, 1, 77], [7, 0]):
        stream, outs, position = VocosStream(generator), [], 0
        for i, n in enumerate(cuts):
            final = i == len(cuts) - 1
            out = stream.push(mel[position:position + n], final)
            position += n
            if out is not None:
                outs.append(out)
        joined = np.concatenate(outs)
        expected = whole if sum(cuts) == len(mel) else np.clip(
            generator(mel[None, :sum(cuts)]).numpy()[0], -1.0, 1.0)  # a mel shorter than the lag
        assert len(joined) == len(expected)
        np.testing.assert_allclose(joined, expected, atol=1e-6)
    # after the first call, every push of N frames gives N frames' samples (no frame twice)
    stream = VocosStream(generator)
    assert stream.push(mel[:12], False) is None
    assert len(stream.push(mel[12:40], False)) == (40 - 12) * 64 - 128
    assert len(stream.push(mel[40:50], False)) == 10 * 64
    assert len(stream.push(None, True)) == 12 * 64 + 128
    assert len(VocosStream(generator).push(None, True)) == 0


def test_ahead_keeps_order_raises_the_producers_error_and_stops_when_closed():
    assert list(streaming.ahead(iter(range(20)))) == list(range(20))

    def failing():
        yield 1
        raise RuntimeError("decode failed")
    items = streaming.ahead(failing())
    assert next(items) == 1
    with pytest.raises(RuntimeError, match="decode failed"):
        next(items)
    produced = []

    def endless():
        for i in range(10 ** 6):
            produced.append(i)
            yield i
    items = streaming.ahead(endless(), depth=2)
    assert next(items) == 0
    items.close()  # returns once the thread has stopped (it would hang otherwise)
    assert len(produced) <= 4


class _Recording(ModelDecoder):
    """A checkpoint's decoder that records how many frames were decoded each time the driver
    asked."""

    def __init__(self, *args):
        super().__init__(*args)
        self.decoded = []

    def batch_progress(self, state):
        done, frames, by_stop = super().batch_progress(state)
        self.decoded.append(int(frames[0]))
        return done, frames, by_stop


@pytest.mark.slow
class StreamingTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="myxtts-streaming-test-")
        cls.checkpoint_dir = os.path.join(cls.tmp, "run")
        # Seeded: the stop-head search below depends on the decoder's weights, which must not
        # depend on what earlier tests in the process drew from the global generators.
        keras.utils.set_random_seed(0)
        make_checkpoint(cls.checkpoint_dir)
        cls.synths = {"griffin-lim": cls._synth(None)}
        for generator in ("hifigan", "vocos"):
            cls.synths[generator] = cls._synth(
                load_vocoder(shared_vocoder_checkpoint(generator)[0]))
        cls.latents = cls.synths["vocos"].speaker_latents(REFERENCE_AUDIO)

    @classmethod
    def _synth(cls, vocoder):
        return Synthesizer.from_checkpoint_dir(cls.checkpoint_dir, max_decoder_steps=MAX_STEPS,
                                               vocoder=vocoder)

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def _stream(self, synth, ids, **kwargs):
        ends = []
        chunks = list(synth.stream_sentences([ids], 0, self.latents, ends=ends, **kwargs))
        self.assertEqual(len(ends), 1)
        return chunks, ends[0]

    def test_joined_chunks_equal_whole_synthesis_without_clicks(self):
        for name, synth in self.synths.items():
            with self.subTest(vocoder=name):
                ids = synth.encode(TEXT, "en")
                whole = synth.synthesize_detailed(ids, 0, self.latents)
                chunks, end = self._stream(synth, ids, chunk_steps=5)
                joined = np.concatenate(chunks)
                self.assertGreater(len(chunks), 4)
                self.assertTrue(all(c.dtype == np.float32 for c in chunks))
                self.assertEqual(end.frames, len(whole.mel))
                self.assertEqual(len(joined), len(whole.waveform))
                self.assertGreaterEqual(snr_db(joined, whole.waveform), MIN_SNR_DB)
                # No click at a seam: the sample step across each seam is the whole
                # synthesis's step there, to within a tenth of the largest step it takes
                # anywhere (a click is a jump the whole synthesis does not make).
                seams = np.cumsum([len(c) for c in chunks])[:-1]
                seam_error = np.abs(np.diff(joined) - np.diff(whole.waveform))[seams - 1]
                self.assertLessEqual(seam_error.max(),
                                     0.1 * np.abs(np.diff(whole.waveform)).max())

    def test_an_item_the_stop_head_ends_mid_chunk(self):
        synth = self.synths["vocos"]
        ids = synth.encode(TEXT, "en")
        stop = synth.model.decoder.stop_projection
        kernel, bias = stop.kernel.numpy(), stop.bias.numpy()
        chunk_steps, first = 5, scheduler.default_first_chunk_steps(
            synth._stream_decoder, synth.vocoder.receptive_field, 256)  # pylint: disable=protected-access
        r = synth.model.reduction_factor
        try:
            # A stop head that reads one unit of the decoder state: some threshold on it ends
            # the decode after the first chunk, inside a decoder step and inside a chunk.
            found = None
            for unit in (4, 12, 24, 8, 28):
                for level in np.linspace(-3.0, 3.0, 25):
                    weights = np.zeros_like(kernel)
                    weights[unit] = 20.0
                    stop.kernel.assign(weights)
                    stop.bias.assign(np.full_like(bias, -20.0 * level))
                    result = synth.synthesize_detailed(ids, 0, self.latents)
                    frames = len(result.mel)
                    step = -(-frames // r)
                    if (result.ended_by_stop and frames % r and step > first + chunk_steps
                            and (step - first) % chunk_steps):
                        found = result
                        break
                if found is not None:
                    break
            self.assertIsNotNone(found, "no stop head setting ends the decode mid-chunk")
            chunks, end = self._stream(synth, ids, chunk_steps=chunk_steps)
            self.assertTrue(end.ended_by_stop)
            self.assertEqual(end.frames, len(found.mel))
            joined = np.concatenate(chunks)
            self.assertEqual(len(joined), len(found.waveform))
            self.assertGreaterEqual(snr_db(joined, found.waveform), MIN_SNR_DB)
        finally:
            stop.kernel.assign(kernel)
            stop.bias.assign(bias)

    def test_first_chunk_comes_before_the_decode_ends(self):
        synth = self.synths["vocos"]
        ids = synth.encode(TEXT, "en")
        decoder = _Recording(synth.model, MAX_STEPS, TOKEN_PADDING)
        chunks = streaming.stream_decode(decoder, synth.vocoder, 16000, 256, [ids], 0,
                                         self.latents, chunk_steps=5)
        first = next(chunks)
        self.assertGreater(len(first), 0)
        # The decoder runs at most a few chunks ahead of the vocoder (a bounded queue): when
        # the first audio is out, most of the item is still to be decoded.
        decoded_at_first = decoder.decoded[-1]
        rest = list(chunks)
        self.assertLess(decoded_at_first, 0.75 * decoder.decoded[-1])
        self.assertGreater(len(rest), 3)

    def test_several_sentences_stream_like_their_whole_synthesis(self):
        synth = self.synths["hifigan"]
        text = "Hello there. How are you? Fine, thanks."
        self.assertEqual(len(synth.sentences(text, "en")), 3)
        waveform, mel = synth.synthesize(text, "en", self.latents)
        joined = np.concatenate(list(synth.stream(text, "en", self.latents, chunk_steps=7)))
        self.assertEqual(len(joined), len(waveform))
        self.assertGreaterEqual(snr_db(joined, waveform), MIN_SNR_DB)
        pause = len(synth.pause())
        singles = [synth.synthesize(s, "en", self.latents)[0]
                   for s in ("Hello there.", "How are you?", "Fine, thanks.")]
        self.assertEqual(len(waveform), sum(map(len, singles)) + 2 * pause)
        start = len(singles[0])
        np.testing.assert_array_equal(waveform[start: start + pause], 0.0)
        self.assertEqual(mel.shape[0], sum(len(synth.synthesize(s, "en", self.latents)[1])
                                           for s in ("Hello there.", "How are you?",
                                                     "Fine, thanks.")) + 2 * (pause // 256))

    def test_a_long_paragraph_is_cut_below_the_length_cap(self):
        synth = self.synths["griffin-lim"]
        budget = synth.front_end.max_sentence_tokens
        text = ("The quick brown fox jumps over the lazy dog, and the dog sleeps on, "
                "while the fox runs far away into the wood. ") * 3
        pieces = synth.sentences(text, "en")
        self.assertGreaterEqual(len(pieces), 6)
        self.assertTrue(all(len(ids) <= budget for ids in pieces))


def test_decode_state_round_trips_as_named_tensors():
    config = tiny_config()
    model = tiny_model(config)
    latents = tf.zeros([2, config.model.num_speaker_latents, config.model.d_model])
    state = model.start_decode(tf.ones([2, 5], tf.int32), tf.constant([5, 3]),
                               tf.zeros([2], tf.int32), latents, 8)
    flat = state.to_tensors()
    assert all(name.isidentifier() for name in flat)
    again = type(state).from_tensors(flat)
    tf.nest.assert_same_structure(again, state)
    for a, b in zip(tf.nest.flatten(again), tf.nest.flatten(state)):
        assert a is b
