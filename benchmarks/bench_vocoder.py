"""Vocoder speed (real-time factor of each HiFi-GAN preset vs Griffin-Lim) and resynthesis
quality of held-out recordings (their real mels → waveform) for HiFi-GAN, Griffin-Lim and the
recordings themselves.

    python benchmarks/bench_vocoder.py --config configs/vocoder_quick.yaml          # speed only
    python benchmarks/bench_vocoder.py --config configs/vocoder_quick.yaml \
        --vocoder-dir runs/vocoder_quick --heldout /work/corpora/espeak_m --clips 20
    python benchmarks/bench_vocoder.py --config configs/vocoder_quick.yaml --skip-speed \
        --train-step                                  # GAN step with and without XLA

Speed: an untrained generator of each preset (speed does not depend on the weights) vocodes the
log-mel of --seconds of audio, in a tf.function and XLA-compiled; Griffin-Lim (32 iterations,
myxtts.inference.griffin_lim) the same mel. RTF = seconds of compute per second of audio (batch
1, this CPU). Quality (with --vocoder-dir and --heldout): the first --clips utterances of the
held-out folder (metadata.csv + wavs/, or audio files), at most --max-seconds each, are turned
into log-mels with the project's featurizer and back into audio by each vocoder; against the
recording: mel-cepstral distance (MCD, dB, 13 cepstra of the log-mel without c0, frame-aligned),
log-spectral distance (LSD, dB, STFT power), and the word error rate of pocketsphinx (optional:
`pip install pocketsphinx jiwer`; skipped when not installed; needs metadata.csv texts).
Griffin-Lim's output leads the features by win_length // 2 samples and is shifted back first.
All numbers come from this one run.
"""

import argparse
import glob
import os
import re
import statistics
import sys
import time

import numpy as np
import tensorflow as tf

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data import audio as audio_lib  # noqa: E402
from myxtts.inference.vocoding import GriffinLimVocoder, load_vocoder  # noqa: E402
from myxtts.vocoder.generator import HiFiGANGenerator  # noqa: E402

AUDIO = (".wav", ".flac", ".ogg")


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
    print(f"| Griffin-Lim, 32 iterations | - | {gl:.4f} | - | 1.0x |")
    for preset in presets:
        config.vocoder.preset = preset
        generator = HiFiGANGenerator.from_config(config)
        plain = timed(lambda g=generator: tf.function(g)(mel), repeats) / seconds
        xla = timed(lambda g=generator: tf.function(g, jit_compile=True)(mel), repeats) / seconds
        best = min(plain, xla)
        print(f"| HiFi-GAN {preset} | {generator.count_params():,} | {plain:.4f} | {xla:.4f} | "
              f"{gl / best:.1f}x faster |" if best < gl else
              f"| HiFi-GAN {preset} | {generator.count_params():,} | {plain:.4f} | {xla:.4f} | "
              f"{best / gl:.1f}x slower |")


def train_step_speed(config, repeats):
    """Seconds per GAN training step (discriminator + generator update) of the config's preset,
    batch and segment, as a tf.function and XLA-compiled, plus the first call (trace/compile)."""
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
        step = GANStep(HiFiGANGenerator.from_config(config),
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
            print(f"| {'generator warm-up' if not adversarial else 'GAN'}, "
                  f"{'XLA' if jit else 'tf.function'} | {first:.1f} | {per_step:.3f} |")


def heldout_clips(folder, count, data_config, max_seconds):
    """[(name, samples, text or None)] of the first `count` utterances."""
    rows = []
    metadata = os.path.join(folder, "metadata.csv")
    if os.path.exists(metadata):
        with open(metadata, encoding="utf-8") as f:
            for line in f:
                parts = line.rstrip("\n").split("|")
                paths = [p for ext in AUDIO
                         for p in glob.glob(os.path.join(folder, "wavs", parts[0] + ext))]
                if paths:
                    rows.append((parts[0], paths[0], parts[-1] if len(parts) < 4 else parts[2]))
    else:
        rows = [(os.path.basename(p), p, None) for p in sorted(glob.glob(os.path.join(
            folder, "**", "*"), recursive=True)) if p.lower().endswith(AUDIO)]
    clips = []
    hop = data_config.hop_length
    for name, path, text in rows[:count]:
        samples = audio_lib.decode(path, data_config.sample_rate).samples
        n = min(len(samples), int(max_seconds * data_config.sample_rate)) // hop * hop
        clips.append((name, samples[:n], text if n == (len(samples) // hop * hop) else None))
    return clips


def cepstra(log10_mel, count=13):
    """DCT-II (orthonormal) of the natural-log mel, coefficients 1..count."""
    n = log10_mel.shape[-1]
    k = np.arange(n)
    basis = np.cos(np.pi / n * (k[None, :] + 0.5) * np.arange(count + 1)[:, None])
    basis *= np.sqrt(2.0 / n)
    basis[0] /= np.sqrt(2.0)
    return (log10_mel * np.log(10.0)) @ basis.T[:, 1:]


def mcd(log_mel, reference_mel):
    diff = cepstra(log_mel) - cepstra(reference_mel)
    return float(np.mean(10.0 / np.log(10.0) * np.sqrt(2.0 * np.sum(diff ** 2, axis=-1))))


def lsd(audio, reference, d):
    def power(x):
        spec = tf.signal.stft(x, d.win_length, d.hop_length, d.n_fft)
        return np.maximum(np.abs(spec.numpy()) ** 2, 1e-10)
    a, b = power(audio), power(reference)
    return float(np.mean(np.sqrt(np.mean((10.0 * np.log10(a / b)) ** 2, axis=-1))))


def recogniser(sample_rate):
    try:
        import jiwer
        from pocketsphinx import Decoder
    except ImportError:
        return None
    decoder = Decoder(samprate=16000, loglevel="FATAL")

    def words(text):
        return re.sub(r"[^a-z' ]+", " ", text.lower()).split()

    def wer(samples, text):
        import librosa
        if sample_rate != 16000:
            samples = librosa.resample(samples, orig_sr=sample_rate, target_sr=16000)
        pcm = (np.clip(samples, -1, 1) * 32767).astype(np.int16).tobytes()
        decoder.start_utt()
        decoder.process_raw(pcm, full_utt=True)
        decoder.end_utt()
        hyp = decoder.hyp().hypstr if decoder.hyp() else ""
        return jiwer.wer(" ".join(words(text)), " ".join(words(hyp)) or "<empty>")
    return wer


def quality(config, vocoder, clips):
    d = config.data
    log_mel = audio_lib.LogMel.from_config(d)
    griffin_lim = GriffinLimVocoder(d)
    wer = recogniser(d.sample_rate)
    systems = {"recordings": [], "Griffin-Lim (32 it.)": [], "HiFi-GAN": []}
    lead = d.win_length // 2
    for _, samples, text in clips:
        frames = len(samples) // d.hop_length
        mel = log_mel(samples[None])[:, :frames]
        lengths = tf.constant([frames], tf.int32)
        gl = griffin_lim(mel, lengths)[0][0].numpy()[lead:lead + len(samples)]
        gl = np.pad(gl, (0, len(samples) - len(gl)))
        hifi = vocoder(mel, lengths)[0][0].numpy()
        reference = mel[0].numpy()
        for name, audio in (("recordings", samples), ("Griffin-Lim (32 it.)", gl),
                            ("HiFi-GAN", hifi)):
            own = log_mel(audio[None].astype(np.float32))[0, :frames].numpy()
            systems[name].append((mcd(own, reference), lsd(audio, samples, d),
                                  wer(audio, text) if wer and text else None))
    print(f"\n## Resynthesis of {len(clips)} held-out recordings (real mels → waveform)\n")
    print("| audio | MCD dB | LSD dB | WER (pocketsphinx) |")
    print("| --- | --- | --- | --- |")
    for name, values in systems.items():
        wers = [w for _, _, w in values if w is not None]
        print(f"| {name} | {np.mean([m for m, _, _ in values]):.2f} | "
              f"{np.mean([s for _, s, _ in values]):.2f} | "
              f"{f'{100 * np.mean(wers):.1f}%' if wers else 'n/a'} |")
    if wer is None:
        print("\n(WER skipped: pocketsphinx/jiwer not installed.)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default=os.path.join(REPO, "configs", "vocoder_quick.yaml"))
    p.add_argument("--presets", default="tiny,small,full")
    p.add_argument("--seconds", type=float, default=4.0, help="Audio length for the speed test.")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--vocoder-dir", default=None, help="A trained vocoder for the quality test.")
    p.add_argument("--vocoder-checkpoint", default=None, help="'best' or a prefix (default: "
                                                              "the latest).")
    p.add_argument("--heldout", default=None, help="Folder of held-out recordings.")
    p.add_argument("--clips", type=int, default=20)
    p.add_argument("--max-seconds", type=float, default=6.0)
    p.add_argument("--skip-speed", action="store_true")
    p.add_argument("--train-step", action="store_true",
                   help="Also time a training step with and without XLA.")
    args = p.parse_args()
    config = XTTSConfig.from_yaml(args.config)
    d = config.data
    print(f"CPU threads: {os.cpu_count()}; TensorFlow {tf.__version__}; data: {d.sample_rate} Hz,"
          f" hop {d.hop_length}, {d.n_mels} mels")
    if not args.skip_speed:
        rng = np.random.default_rng(0)
        frames = int(args.seconds * d.sample_rate / d.hop_length)
        mel = tf.constant(rng.normal(-2.5, 0.8, (1, frames, d.n_mels)), tf.float32)
        if args.heldout:
            samples = np.concatenate([c[1] for c in heldout_clips(args.heldout, 4, d, 10.0)])
            mel = audio_lib.LogMel.from_config(d)(samples[None])[:, :frames]
        speed(config, mel, args.presets.split(","), args.repeats)
    if args.train_step:
        train_step_speed(config, args.repeats)
    if args.vocoder_dir and args.heldout:
        vocoder = load_vocoder(args.vocoder_dir, d, args.vocoder_checkpoint)
        print(f"\n{vocoder.describe()}")
        quality(config, vocoder, heldout_clips(args.heldout, args.clips, d, args.max_seconds))


if __name__ == "__main__":
    main()
