"""Vocoder speed (real-time factor of each HiFi-GAN preset and of the Vocos generator vs
Griffin-Lim) and resynthesis quality of held-out recordings (their real mels → waveform) for the
trained vocoder (HiFi-GAN or Vocos), Griffin-Lim and the
recordings themselves.

    python benchmarks/bench_vocoder.py                                   # speed of every preset
    python benchmarks/bench_vocoder.py --skip-speed --quality --vocoder-dir runs/vocoder_quick \
        --data /work/corpora/flite_slt --num 20                          # quality after training
    python benchmarks/bench_vocoder.py --skip-speed --train-step         # GAN step, XLA or not

Speed: an untrained generator of each preset (speed does not depend on the weights) vocodes the
log-mel of --seconds of audio (a real recording's with --data, else random) as a tf.function and
XLA-compiled; Griffin-Lim (32 iterations, myxtts.inference.griffin_lim) the same mel. RTF =
seconds of compute per second of audio (batch 1, median of --repeats, this CPU).

Quality (--quality): the first --num validation rows of the vocoder run (the rows of --data, its
--train-data, that the run's saved split held out of training) are turned into log-mels with the
project's featurizer and back into audio by each vocoder. Against the recording: mel-cepstral
distortion (dB, frame by frame, the cepstra and distance of myxtts.evaluation.metrics),
log-spectral distance (dB, STFT power), and the corpus word error rate heard by Whisper
(myxtts.evaluation.recognizer; skipped with the reason when it cannot run), and the mel L1 of
the validation loss (log10 units). The recordings' own
row is the ceiling (MCD and LSD 0, the recogniser's WER on real speech). Griffin-Lim's output
is centred win_length // 2 samples later than the feature frames and is shifted back first.
All numbers come from this one run.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data import audio as audio_lib  # noqa: E402
from myxtts.data.cache import load_samples  # noqa: E402
from myxtts.data.prepare import prepare_dataset  # noqa: E402
from myxtts.evaluation.metrics import frame_distances, mel_cepstra, word_errors  # noqa: E402
from myxtts.evaluation.recognizer import load_recognizer  # noqa: E402
from myxtts.inference.vocoding import (GRIFFIN_LIM_ITERATIONS, GriffinLimVocoder,  # noqa: E402
                                       load_vocoder)
from myxtts.vocoder.generator import build_generator  # noqa: E402


def timed(fn, repeats):
    fn()  # tracing / compilation
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        np.asarray(fn())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def speed(config, mel, presets, repeats):
    d = config.data
    seconds = mel.shape[1] * d.hop_length / d.sample_rate
    lengths = tf.constant([mel.shape[1]], tf.int32)
    griffin_lim = GriffinLimVocoder(d)
    gl = timed(lambda: griffin_lim(mel, lengths)[0], repeats) / seconds
    print(f"\n## Speed: {seconds:.2f} s of audio, batch 1, RTF = compute s / audio s\n")
    print("| vocoder | parameters | RTF tf.function | RTF XLA | vs Griffin-Lim |")
    print("| --- | --- | --- | --- | --- |")
    print(f"| Griffin-Lim, {GRIFFIN_LIM_ITERATIONS} iterations | - | {gl:.4f} | - | 1.0x |")
    for preset in presets:  # "vocos": the Vocos generator (vocoder.vocos_* sizes)
        if preset == "vocos":
            config.vocoder.generator = "vocos"
        else:
            config.vocoder.generator, config.vocoder.preset = "hifigan", preset
        generator = build_generator(config)
        plain, xla = (timed(lambda f=tf.function(generator, jit_compile=jit): f(mel), repeats)
                      / seconds for jit in (False, True))
        best = min(plain, xla)
        ratio = f"{gl / best:.1f}x faster" if best < gl else f"{best / gl:.1f}x slower"
        name = generator.vocoder_name + ("" if preset == "vocos" else f" {preset}")
        print(f"| {name} | {generator.count_params():,} | {plain:.4f} | {xla:.4f} | "
              f"{ratio} |")


def train_step_speed(config, repeats):
    """Seconds per GAN training step (discriminator + generator update) and per warm-up step
    of the config's preset, batch and segment, as a tf.function and XLA-compiled, plus the
    first call (trace/compile)."""
    import keras
    from myxtts.training.gan_step import GANStep
    from myxtts.vocoder.discriminators import MultiPeriodDiscriminator, MultiScaleDiscriminator
    from myxtts.vocoder.generator import PRESETS
    d, v = config.data, config.vocoder
    preset = PRESETS[v.preset]
    rng = np.random.default_rng(0)
    audio = tf.constant(rng.normal(0, 0.1, (v.batch_size, v.segment_frames * d.hop_length)),
                        tf.float32)
    mel = audio_lib.LogMel.from_config(d)(audio)[:, :v.segment_frames]
    batch = {"audio": audio, "mel": mel, "mel_target": mel}
    print(f"\n## Training step: preset {v.preset}, batch {v.batch_size} x {v.segment_frames} "
          f"frames\n")
    print("| step | first call (trace/compile) s | s per step (median) |")
    print("| --- | --- | --- |")
    for jit in (False, True):
        keras.utils.set_random_seed(0)
        step = GANStep(build_generator(config),
                       MultiPeriodDiscriminator(v.mpd_periods, preset.discriminator_width),
                       MultiScaleDiscriminator(v.msd_scales, preset.discriminator_width,
                                               preset.grouped_msd),
                       v, audio_lib.LogMel.from_config(d), model_device="/CPU:0",
                       loss_scaling=False, jit_compile=jit)
        for adversarial in (False, True):
            started = time.perf_counter()
            step(batch, adversarial)["total"].numpy()
            first = time.perf_counter() - started
            per_step = timed(lambda a=adversarial: step(batch, a)["total"], repeats)
            print(f"| {'GAN' if adversarial else 'generator warm-up'}, "
                  f"{'XLA' if jit else 'tf.function'} | {first:.1f} | {per_step:.3f} |")


def heldout_items(config, data_dir, vocoder_dir, count):
    """The first `count` validation items of the vocoder run in `vocoder_dir` (its saved split
    of `data_dir`, or the evaluation metadata beside data_dir's)."""
    items = prepare_dataset(config, data_dir, None, vocoder_dir).items["val"]
    if not items:
        raise SystemExit(f"{data_dir} gives no validation rows: pass the --train-data of the "
                         f"vocoder run in {vocoder_dir}.")
    return items[:count]


def frame_aligned_mcd(log_mel, reference_mel):
    """Mel-cepstral distortion (dB) frame by frame: resynthesis keeps the timing."""
    return float(np.mean(np.diag(frame_distances(mel_cepstra(log_mel),
                                                 mel_cepstra(reference_mel)))))


def log_spectral_distance(audio, reference, d):
    """RMS over frequency of the STFT power ratio in dB, mean over frames."""
    def power(x):
        spec = tf.signal.stft(np.asarray(x, np.float32), d.win_length, d.hop_length, d.n_fft)
        return np.maximum(np.abs(spec.numpy()) ** 2, 1e-10)
    a, b = power(audio), power(reference)
    return float(np.mean(np.sqrt(np.mean((10.0 * np.log10(a / b)) ** 2, axis=-1))))


def quality(config, vocoder, items):
    d = config.data
    log_mel = audio_lib.LogMel.from_config(d)
    griffin_lim = GriffinLimVocoder(d)
    recognizer, why_not = load_recognizer("auto", [d.languages[it.language_id] for it in items])
    names = ("recordings", f"Griffin-Lim ({GRIFFIN_LIM_ITERATIONS} iterations)",
             vocoder.generator.vocoder_name)
    scores = {name: {"l1": [], "mcd": [], "lsd": [], "errors": 0, "words": 0} for name in names}
    lead = d.win_length // 2
    seconds = 0.0
    for item in items:
        samples = load_samples(item, d)
        frames = len(samples) // d.hop_length
        samples = samples[:frames * d.hop_length]
        seconds += len(samples) / d.sample_rate
        mel = log_mel(samples[None])[:, :frames]
        lengths = tf.constant([frames], tf.int32)
        gl = griffin_lim(mel, lengths)[0][0].numpy()[lead:lead + len(samples)]
        gl = np.pad(gl, (0, len(samples) - len(gl)))
        neural = vocoder(mel, lengths)[0][0].numpy()
        for name, audio in zip(names, (samples, gl, neural)):
            own = log_mel(audio[None].astype(np.float32))[0, :frames].numpy()
            score = scores[name]
            score["l1"].append(float(np.mean(np.abs(own - mel[0].numpy()))))
            score["mcd"].append(frame_aligned_mcd(own, mel[0].numpy()))
            score["lsd"].append(log_spectral_distance(audio, samples, d))
            if recognizer is not None:
                language = d.languages[item.language_id]
                errors, words = word_errors(
                    item.text, recognizer.transcribe(audio, d.sample_rate, language), language)
                score["errors"] += errors
                score["words"] += words
    print(f"\n## Resynthesis of {len(items)} held-out recordings ({seconds:.0f} s): real mels → "
          f"waveform\n")
    print("| audio | mel L1 (log10) | MCD dB (frame by frame) | LSD dB | WER (Whisper) |")
    print("| --- | --- | --- | --- | --- |")
    for name, score in scores.items():
        wer = f"{score['errors'] / score['words']:.3f}" if score["words"] else "n/a"
        print(f"| {name} | {np.mean(score['l1']):.3f} | {np.mean(score['mcd']):.2f} | "
              f"{np.mean(score['lsd']):.2f} | {wer} |")
    if recognizer is None:
        print(f"\n(WER not measured: {why_not}.)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(REPO, "configs", "vocoder_quick.yaml"),
                   help="Features and preset for --train-step and speed (default: the CPU "
                        "recipe); --quality uses the vocoder run's own config.yaml.")
    p.add_argument("--presets", default="tiny,small,full,vocos")
    p.add_argument("--seconds", type=float, default=4.0, help="Audio length for the speed test.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--train-step", action="store_true",
                   help="Also time a training step with and without XLA.")
    p.add_argument("--quality", action="store_true",
                   help="Resynthesis quality; needs --vocoder-dir and --data.")
    p.add_argument("--vocoder-dir", default=None, help="A trained vocoder (train_main.py "
                                                       "--stage vocoder --checkpoint-dir).")
    p.add_argument("--vocoder-checkpoint", default=None, help="'best' or a prefix (default: "
                                                              "the latest).")
    p.add_argument("--data", default=None, help="The vocoder run's --train-data: its held-out "
                                                "rows are resynthesised (and the speed test "
                                                "uses a real mel).")
    p.add_argument("--num", type=int, default=20, help="Held-out recordings to resynthesise.")
    args = p.parse_args()
    if args.quality and not (args.vocoder_dir and args.data):
        p.error("--quality needs --vocoder-dir and --data")
    config = XTTSConfig.from_yaml(os.path.join(args.vocoder_dir, "config.yaml")
                                  if args.quality else args.config)
    d = config.data
    print(f"CPU threads: {os.cpu_count()}; TensorFlow {tf.__version__}; data: {d.sample_rate} Hz,"
          f" hop {d.hop_length}, {d.n_mels} mels")
    if not args.skip_speed:
        frames = int(args.seconds * d.sample_rate / d.hop_length)
        if args.data:
            items = prepare_dataset(config, args.data).items["train"]
            samples = np.concatenate([load_samples(item, d) for item in items[:8]])
            mel = audio_lib.LogMel.from_config(d)(samples[None])[:, :frames]
        else:
            rng = np.random.default_rng(0)
            mel = tf.constant(rng.normal(-2.5, 0.8, (1, frames, d.n_mels)), tf.float32)
        speed(config, mel, args.presets.split(","), args.repeats)
    if args.train_step:
        train_step_speed(config, args.repeats)
    if args.quality:
        vocoder = load_vocoder(args.vocoder_dir, d, args.vocoder_checkpoint)
        print(f"\n{vocoder.describe()}")
        quality(config, vocoder, heldout_items(config, args.data, args.vocoder_dir, args.num))


if __name__ == "__main__":
    main()
