"""On-device formats against the SavedModel: size, load time, peak memory, time to first audio
and real-time factor, with 1 and 2 threads.

    python benchmarks/bench_edge.py --checkpoint-dir runs/c1 --vocoder-dir runs/v25voc \
        --vocoder-checkpoint best --reference corpora/voices25_unseen2/wavs/U00001.wav \
        [--out /tmp/bench-edge] [--repeats 3]

Exports the checkpoint once per format into --out (SavedModel; LiteRT fp32, fp16, int8; ONNX),
then measures each in a fresh process per thread count (so load time and peak RSS are the
format's own):
  size MB     the export's files (weights and graphs; the SavedModel's variables included),
  load s      process start → model loaded and the voice made (imports included: the
              SavedModel path imports TensorFlow, the others only numpy, soundfile and their
              runtime),
  RSS MB      the process's peak resident memory (VmHWM) after all runs,
  first s     time to the first audio chunk of a streamed sentence (best of --repeats),
  RTF         seconds of synthesis per second of audio over TEXTS, whole synthesis (best of
              --repeats; < 1: faster than real time),
  MCD fp32 / SM   mean DTW mel-cepstral distortion (dB, myxtts.evaluation.metrics.dtw_mcd) of
              the format's mels of TEXTS against LiteRT fp32's / the SavedModel's (quality lost
              to quantization; 0 = the same mels),
  frames      the format's mel frames over TEXTS minus LiteRT fp32's (a changed length: the stop
              head decided otherwise).
The SavedModel path is ExportedModel (its streaming signatures for `first`, `synthesize_tokens`
for whole synthesis); the others are LiteSynthesizer (myxtts.lite). Every process first makes
the voice from --reference and runs every text once (warm-up: tracing, XNNPACK packing).
The goal of the on-device issue is checked at the end: LiteRT or ONNX RTF <= 0.5x the
SavedModel's on one thread, peak RSS <= 300 MB. All figures come from this one run.
"""

import time

START = time.monotonic()  # a child's "process start" for its load time  # noqa: E402

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402

import numpy as np  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.evaluation.metrics import dtw_mcd  # noqa: E402

TEXTS = ["The birch canoe slid on the smooth planks.",
         "Glue the sheet to the dark blue background.",
         "It's easy to tell the depth of a well.",
         "These days a chicken leg is a rare dish."]
FORMATS = [("savedmodel", "tf_serving", "none"), ("litert fp32", "tflite", "none"),
           ("litert fp16", "tflite", "fp16"), ("litert int8", "tflite", "int8"),
           ("onnx", "onnx", "none")]


def child(kind: str, folder: str, threads: int, reference: str, repeats: int,
          mels_path: str) -> dict:
    """Runs in its own process: load, warm up, measure; returns the figures and writes the
    mels of TEXTS to mels_path (.npz)."""
    if kind == "savedmodel":
        os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(1)
        from myxtts.inference.exported_model import ExportedModel  # noqa
        model = ExportedModel(folder)
        latents = model.latents_of(model.voice(reference))[None]
        rate = model.sample_rate

        def whole(text):
            sentences, language_id = model.sentences(text, "en")
            audio, mels = [], []
            for ids in sentences:
                out = model.signatures["synthesize_tokens"](
                    tokens=tf.constant([ids], tf.int32),
                    token_lengths=tf.constant([len(ids)], tf.int32),
                    language_ids=tf.constant([language_id], tf.int32),
                    speaker_latents=tf.constant(latents))
                audio.append(out["waveform"][0, : int(out["waveform_lengths"][0])].numpy())
                mels.append(out["mel"][0, : int(out["mel_lengths"][0])].numpy())
            return np.concatenate(audio), np.concatenate(mels)

        def stream(text):
            return model.stream(text, "en", latents)
    else:
        from myxtts.lite.synthesizer import LiteSynthesizer  # noqa
        synth = LiteSynthesizer(folder, threads=threads)
        latents = synth.speaker_latents(reference)
        rate = synth.sample_rate

        def whole(text):
            return synth.synthesize(text, "en", latents)

        def stream(text):
            return synth.stream(text, "en", latents)
    load = time.monotonic() - START
    mels = {}
    for index, text in enumerate(TEXTS):
        mels[str(index)] = whole(text)[1]
        next(iter(stream(text)))
    np.savez(mels_path, **mels)
    firsts, rtfs = [], []
    for _ in range(repeats):
        t = time.monotonic()
        chunks = stream(TEXTS[0])
        next(iter(chunks))
        firsts.append(time.monotonic() - t)
        t, seconds = time.monotonic(), 0.0
        for text in TEXTS:
            seconds += len(whole(text)[0]) / rate
        rtfs.append((time.monotonic() - t) / seconds)
    return {"load": load, "first": min(firsts), "rtf": min(rtfs),
            "rss": peak_rss_mb()}


def peak_rss_mb() -> float:
    """This process's peak resident memory: VmHWM (ru_maxrss would count the parent's peak
    from before the exec, which Linux carries over)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) / 1024.0


def measure(kind: str, folder: str, threads: int, reference: str, repeats: int) -> dict:
    mels_path = os.path.join(folder, f"bench-mels-{threads}.npz")
    out = subprocess.run([sys.executable, __file__, "--child", kind, folder, str(threads),
                          reference, str(repeats), mels_path], check=True, capture_output=True,
                         text=True)
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    with np.load(mels_path) as saved:
        figures["mels"] = [saved[str(i)] for i in range(len(TEXTS))]
    return figures


def mcd_against(mels, reference_mels) -> float:
    """Mean DTW mel-cepstral distortion (dB) of mels against reference mels, text by text."""
    return float(np.mean([dtw_mcd(a, b) for a, b in zip(mels, reference_mels)]))


def folder_size(folder: str) -> float:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(folder)
               for f in files) / 1e6


def export_formats(formats, checkpoint_dir: str, out: str, **kwargs) -> dict:
    """{format name: version folder} of `checkpoint_dir` exported once per (name, format,
    quantize) of `formats` into out/<name>."""
    from myxtts.exporters.registry import exporter  # pylint: disable=import-outside-toplevel
    folders = {}
    for name, fmt, quantize in formats:
        options = dict(kwargs) if fmt == "tf_serving" else dict(kwargs, quantize=quantize)
        folders[name] = exporter(fmt)(checkpoint_dir, os.path.join(out, name.replace(" ", "-")),
                                      **options).path
    return folders


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        kind, folder, threads, reference, repeats, mels_path = sys.argv[2:8]
        print(json.dumps(child(kind, folder, int(threads), reference, int(repeats), mels_path)))
        return 0
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--vocoder-dir", required=True)
    p.add_argument("--vocoder-checkpoint", default=None)
    p.add_argument("--reference", required=True)
    p.add_argument("--out", default="/tmp/bench-edge")
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    folders = export_formats(FORMATS, args.checkpoint_dir, args.out, checkpoint=args.checkpoint,
                             vocoder_dir=args.vocoder_dir,
                             vocoder_checkpoint=args.vocoder_checkpoint)
    rows = []
    for name, _, _ in FORMATS:
        kind = "savedmodel" if name == "savedmodel" else "lite"
        row = {"name": name, "size": folder_size(folders[name])}
        for threads in (1, 2):
            row[threads] = measure(kind, folders[name], threads, args.reference, args.repeats)
        rows.append(row)
    print(f"checkpoint {args.checkpoint_dir}, vocoder {args.vocoder_dir}, {os.cpu_count()} CPUs, "
          f"{len(TEXTS)} sentences, best of {args.repeats}")
    print(f"{'format':<12} {'size MB':>8} {'load s':>7} {'RSS MB':>7} {'first s':>8} "
          f"{'RTF 1t':>7} {'RTF 2t':>7} {'first 2t':>8} {'MCD fp32':>8} {'MCD SM':>7} "
          f"{'frames':>7}")
    fp32, saved_mels = rows[1][1]["mels"], rows[0][1]["mels"]
    for row in rows:
        one, two = row[1], row[2]
        frames = sum(len(m) for m in one["mels"]) - sum(len(m) for m in fp32)
        print(f"{row['name']:<12} {row['size']:>8.1f} {one['load']:>7.2f} {one['rss']:>7.0f} "
              f"{one['first']:>8.3f} {one['rtf']:>7.3f} {two['rtf']:>7.3f} {two['first']:>8.3f} "
              f"{mcd_against(one['mels'], fp32):>8.3f} {mcd_against(one['mels'], saved_mels):>7.3f}"
              f" {frames:>+7d}")
    saved = rows[0][1]["rtf"]
    for row in rows[1:]:
        ratio = row[1]["rtf"] / saved
        print(f"{row['name']}: RTF {ratio:.2f}x the SavedModel's on one thread (goal <= 0.5), "
              f"peak RSS {row[1]['rss']:.0f} MB (goal <= 300): "
              f"{'met' if ratio <= 0.5 and row[1]['rss'] <= 300 else 'missed'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
