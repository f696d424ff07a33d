"""Batched mel → waveform for synthesis and serving, the same ops in both.

With a trained vocoder (`--vocoder-dir V`, a `train_main.py --stage vocoder` checkpoint
directory) the waveform comes from its generator (HiFi-GAN or Vocos, `load_vocoder`); without
one, from Griffin-Lim (myxtts.inference.griffin_lim, tf.signal): intelligible but phasey audio.
Both have the same call signature, and `describe()` says in the logs of the synthesis CLI and
the exporter which one ran.
"""

from __future__ import annotations

import functools
import logging
import math
import os
from typing import Optional, Tuple

import keras
import tensorflow as tf

from myxtts.config import XTTSConfig
from myxtts.errors import MyXTTSError
from myxtts.inference.griffin_lim import GriffinLim
from myxtts.run_directory import CONFIG_FILE, find_checkpoint
from myxtts.vocoder.vocos import VocosGenerator, VocosStream

logger = logging.getLogger("myxtts.inference")

GRIFFIN_LIM_ITERATIONS = 32
# Mel frames of context on each side of a streamed Griffin-Lim window. Griffin-Lim has no finite
# receptive field (each iteration spreads phase over the frames a window overlaps, n_fft / hop
# of them); 16 frames (0.26 s at 16 kHz, hop 256) is where the streamed audio's mel stops
# changing much with more (docs/streaming.md has the measurement).
GRIFFIN_LIM_CONTEXT = 16


def trim_to_longest(mel: tf.Tensor, mel_lengths: tf.Tensor) -> tf.Tensor:
    """`generate`'s static-length mel [B, max_steps*r, n] cut to the longest item's frames."""
    return mel[:, :tf.reduce_max(mel_lengths)]


def floor_padding(mel, mel_lengths, log_floor: float) -> Tuple[tf.Tensor, tf.Tensor]:
    """(mel float32 with every frame past an item's length at `log_floor` (silence), lengths
    int32): padding frames then vocode like the end of a shorter utterance."""
    mel = tf.convert_to_tensor(mel, tf.float32)
    mel_lengths = tf.cast(mel_lengths, tf.int32)
    valid = tf.sequence_mask(mel_lengths, tf.shape(mel)[1])[:, :, None]
    return tf.where(valid, mel, tf.constant(log_floor, tf.float32)), mel_lengths


def zero_past_lengths(waveform: tf.Tensor, lengths: tf.Tensor) -> tf.Tensor:
    return waveform * tf.sequence_mask(lengths, tf.shape(waveform)[1], dtype=waveform.dtype)


class GriffinLimVocoder:
    """`vocoder(mel [B, T, n_mels] log10, mel_lengths [B]) -> (waveform [B, S] float32,
    waveform_lengths [B] int32)`; samples past an item's length are 0.

    Each item is inverted over the batch's T frames with its padding frames at log10(mel_floor)
    (silence), so item b of a batch of one equals the inversion of mel[b, :mel_lengths[b]].
    An item of L frames gives (L-1)*hop + win samples (tf.signal.inverse_stft)."""

    def __init__(self, data_config, iterations: int = GRIFFIN_LIM_ITERATIONS):
        d = data_config
        self.iterations = iterations
        self.hop, self.win = d.hop_length, d.win_length
        self.log_floor = math.log10(d.mel_floor)
        self.griffin_lim = GriffinLim.from_config(d, iterations)
        self.name = f"griffin-lim ({iterations} iterations)"

    def describe(self) -> str:
        return (f"Vocoder: Griffin-Lim ({self.iterations} iterations, tf.signal), the fallback "
                f"without --vocoder-dir; expect intelligible but phasey audio (train a HiFi-GAN "
                f"vocoder with train_main.py --stage vocoder, docs/vocoder.md).")

    @property
    def receptive_field(self) -> int:
        """Mel frames of context a streamed window gets on each side (GRIFFIN_LIM_CONTEXT)."""
        return GRIFFIN_LIM_CONTEXT

    def window(self, mel, first_frame=0) -> tf.Tensor:
        """The waveform [(T - 1) * hop + win] of mel frames [T, n_mels] that start at frame
        `first_frame` of an utterance (their starting phases are the utterance's)."""
        return self.griffin_lim(mel, first_frame)

    def windows(self, mel, first_frame=0) -> tf.Tensor:
        """`window` of each of mel windows [B, T, n_mels] that start at the same frame."""
        return tf.map_fn(lambda item: self.griffin_lim(item, first_frame), mel,
                         fn_output_signature=tf.float32)

    def __call__(self, mel, mel_lengths) -> Tuple[tf.Tensor, tf.Tensor]:
        floored, mel_lengths = floor_padding(mel, mel_lengths, self.log_floor)
        waveform = tf.map_fn(self.griffin_lim, floored, fn_output_signature=tf.float32)
        lengths = tf.where(mel_lengths > 0, (mel_lengths - 1) * self.hop + self.win, 0)
        lengths = tf.minimum(lengths, tf.shape(waveform)[1])
        return zero_past_lengths(waveform, lengths), lengths


class VocoderError(MyXTTSError, ValueError):
    """A vocoder directory that is not a usable vocoder checkpoint, or one that does not fit the
    acoustic model's features."""


# Data fields whose values must agree between the acoustic model and the vocoder.
FEATURE_FIELDS = ("sample_rate", "n_fft", "hop_length", "win_length", "n_mels", "fmin", "fmax",
                  "mel_floor")


class NeuralVocoder:
    """A trained generator (HiFi-GAN or Vocos, myxtts.vocoder) with GriffinLimVocoder's call
    signature: `vocoder(mel [B, T, n_mels] log10, mel_lengths [B]) -> (waveform [B, T * hop],
    waveform_lengths = mel_lengths * hop)`, clipped to [-1, 1]; samples past an item's length
    are 0. Item b of a batch equals the vocoding of mel[b, :mel_lengths[b]] up to the
    generator's receptive field at the end (padding frames are set to log10(mel_floor),
    silence)."""

    def __init__(self, generator, data_config, checkpoint_path: str = ""):
        self.generator = generator
        self.hop = data_config.hop_length
        self.log_floor = math.log10(data_config.mel_floor)
        self.checkpoint_path = checkpoint_path
        self.name = f"{generator.vocoder_name} {checkpoint_path}"

    def describe(self) -> str:
        return (f"Vocoder: {self.generator.vocoder_name} {self.checkpoint_path} "
                f"({self.generator.describe()}, {self.generator.count_params():,} parameters).")

    @property
    def receptive_field(self) -> int:
        """Mel frames of context on each side an output sample depends on (the generator's)."""
        return self.generator.receptive_field

    def window(self, mel, first_frame=0) -> tf.Tensor:  # pylint: disable=unused-argument
        """The waveform [T * hop] of mel frames [T, n_mels] (any part of an utterance: the
        generator does not depend on where they start)."""
        return self._window(tf.convert_to_tensor(mel, tf.float32))

    @functools.cached_property
    def _window(self):
        def run(mel):
            return self.windows(mel[None])[0]
        return tf.function(run, reduce_retracing=True)

    def streaming_stage(self):
        """For streaming (streaming.vocoder_stage): a Vocos generator's VocosStream, which
        vocodes a growing mel without recomputing any frame; None for HiFi-GAN, whose stream
        runs windows with context."""
        if isinstance(self.generator, VocosGenerator):
            return VocosStream(self.generator)
        return None

    def windows(self, mel, first_frame=0) -> tf.Tensor:  # pylint: disable=unused-argument
        """`window` of each of mel windows [B, T, n_mels], as one batch through the
        generator."""
        return tf.clip_by_value(self.generator(mel, training=False), -1.0, 1.0)

    def __call__(self, mel, mel_lengths) -> Tuple[tf.Tensor, tf.Tensor]:
        return self._batch(tf.convert_to_tensor(mel, tf.float32),
                           tf.convert_to_tensor(mel_lengths, tf.int32))

    @functools.cached_property
    def _batch(self):
        def run(mel, mel_lengths):
            floored, mel_lengths = floor_padding(mel, mel_lengths, self.log_floor)
            # Vocos's inverse STFT is not bounded like HiFi-GAN's tanh: clip to the sample range.
            waveform = tf.clip_by_value(self.generator(floored, training=False), -1.0, 1.0)
            lengths = mel_lengths * self.hop
            return zero_past_lengths(waveform, lengths), lengths
        return tf.function(run, reduce_retracing=True)


def load_vocoder(directory: str, data_config=None,
                 checkpoint: Optional[str] = None) -> NeuralVocoder:
    """The generator of vocoder checkpoint directory `directory` (its config.yaml and latest
    ckpt-N; `checkpoint` "best" → best/, or a prefix), in float32. With `data_config` (the
    acoustic model's), raises VocoderError when the two were trained on different features."""
    # pylint: disable=import-outside-toplevel  (keeps this module light for Griffin-Lim users)
    from myxtts.vocoder.generator import build_generator
    config_path = os.path.join(directory, CONFIG_FILE)
    if not os.path.isfile(config_path):
        raise VocoderError(f"The vocoder directory {directory} has no {CONFIG_FILE}: it should "
                           f"be the --checkpoint-dir of a `train_main.py --stage vocoder` run.")
    config = XTTSConfig.from_yaml(config_path)
    path = find_checkpoint(directory, checkpoint)
    if path is None:
        raise VocoderError(f"No vocoder checkpoint ({checkpoint or 'latest'}) in {directory}; "
                           f"train one with train_main.py --stage vocoder --checkpoint-dir "
                           f"{directory}.")
    names = {name for name, _ in tf.train.list_variables(path)}
    if not any(name.startswith("generator/") for name in names):
        raise VocoderError(f"{path} holds no vocoder generator: is it an acoustic-model "
                           f"checkpoint? The acoustic model and the vocoder are separate runs.")
    if data_config is not None:
        mismatch = [f"data.{f} {getattr(config.data, f)!r} (vocoder) vs "
                    f"{getattr(data_config, f)!r} (acoustic model)" for f in FEATURE_FIELDS
                    if getattr(config.data, f) != getattr(data_config, f)]
        if mismatch:
            raise VocoderError(f"The vocoder {directory} was trained on other mel features "
                               f"than the acoustic model: {'; '.join(mismatch)}. Train the "
                               f"vocoder with the acoustic model's data section.")
    keras.mixed_precision.set_global_policy("float32")
    generator = build_generator(config)
    try:
        tf.train.Checkpoint(generator=generator).restore(path).expect_partial() \
            .assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise VocoderError(f"The vocoder checkpoint {path} does not fit the generator its "
                           f"config.yaml describes ({str(e).splitlines()[0][:200]}).") from None
    logger.info("Loaded the %s vocoder %s (generator weights only).", generator.vocoder_name,
                path)
    return NeuralVocoder(generator, config.data, path)
