"""A paragraph of 8 sentences: decoded together as a batch (Synthesizer.synthesize_batch, what
`myxtts-synthesize` and Synthesizer.synthesize run) against one sentence after another.

    python benchmarks/bench_batched_sentences.py [--presets tiny,quick]
                                                 [--vocoders griffin-lim,vocos] [--repeats 3]

For each preset and vocoder, two fresh processes (this script with --worker), one per way, each
building the same untrained model (seeded; speed does not depend on the weights) with the stop
head off and model.max_frames_per_token 4.5 (about natural speech at 16 kHz, hop 256), so every
sentence ends at its own per-token cap: rows of the batch end at different steps, as in speech.
Each process times the paragraph's synthesis the first time (`cold`: what one
`myxtts-synthesize` call pays, XLA compilation of the decode included, the model's loading
not) and then the best of --repeats more (`warm`: a long-lived synthesizer, the server's
case). Columns: cold and warm seconds of each way, their ratios (alone / batch), and the
lowest SNR over the 8 sentences of the batched waveform against the same sentence alone (the
issue's bound: >= 40 dB). The vocos vocoder is configs/vocoder_quick.yaml's generator,
untrained (bench_streaming.build_vocos). All numbers come from this one run.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

PARAGRAPH = ("The rain stopped just before sunrise. Birds began to sing in the tall trees. "
             "We walked down to the quiet harbor, where the fishing boats were coming home. "
             "An old man mended his nets on the pier. Gulls circled above the water. "
             "The baker on the corner had opened his shop and the smell of fresh bread filled "
             "the street. Children ran past us on their way to school. It was going to be a "
             "fine day.")
LANGUAGE = "en"
FRAMES_PER_TOKEN = 4.5
GOAL_RATIO = 2.0  # sentence by sentence / batched, a paragraph through myxtts-synthesize
GOAL_SNR = 40.0


def build_synthesizer(preset: str, vocoder: str):
    import keras  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    from myxtts.config import XTTSConfig  # pylint: disable=import-outside-toplevel
    from myxtts.data.text import Tokenizer, clean_text  # pylint: disable=import-outside-toplevel
    from myxtts.inference.checkpoint_loading import (  # pylint: disable=import-outside-toplevel
        LoadedCheckpoint)
    from myxtts.inference.synthesizer import Synthesizer  # pylint: disable=import-outside-toplevel
    from myxtts.models.xtts import XTTSModel  # pylint: disable=import-outside-toplevel

    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", f"{preset}.yaml"))
    d, m = config.data, config.model
    tokenizer = Tokenizer.build([clean_text(PARAGRAPH, d.text_cleaners, LANGUAGE)],
                                d.text_cleaners)
    config.override({"model.max_frames_per_token": FRAMES_PER_TOKEN}, source="benchmark")
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    model = XTTSModel(m, tokenizer.vocab_size, len(d.languages), d.n_mels)
    stop = model.decoder.stop_projection  # every decode runs to its per-token cap
    stop.kernel.assign(tf.zeros_like(stop.kernel))
    stop.bias.assign(tf.fill([m.reduction_factor], -1e4))
    neural = None
    if vocoder == "vocos":
        sys.path.insert(0, os.path.join(REPO, "benchmarks"))
        from bench_streaming import build_vocos  # pylint: disable=import-outside-toplevel
        neural, _ = build_vocos(config)
    synth = Synthesizer(LoadedCheckpoint("", "", config, tokenizer, model, {}), vocoder=neural)
    reference = tf.constant(np.random.default_rng(0).normal(
        -2, 1, (1, int(d.ref_max_seconds * d.sample_rate / d.hop_length), d.n_mels)),
        tf.float32)
    return synth, model.speaker_latents(reference, tf.shape(reference)[1:2])


def worker(preset: str, vocoder: str, way: str, repeats: int, out: str) -> None:
    import logging  # pylint: disable=import-outside-toplevel
    logging.getLogger("myxtts.inference").setLevel(logging.ERROR)  # the length-cap warnings
    synth, latents = build_synthesizer(preset, vocoder)
    sentences = synth.sentences(PARAGRAPH, LANGUAGE)
    language_id = synth.language_id(LANGUAGE)

    def run():
        start = time.perf_counter()
        if way == "batch":
            results = synth.synthesize_batch(sentences, language_id, latents)
        else:
            results = [synth.synthesize_detailed(ids, language_id, latents) for ids in sentences]
        return time.perf_counter() - start, results

    cold, results = run()
    warm = min(run()[0] for _ in range(repeats))
    np.savez(out, cold=cold, warm=warm, frames=[len(r.mel) for r in results],
             **{f"wave{k}": r.waveform for k, r in enumerate(results)})


def snr_db(estimate: np.ndarray, reference: np.ndarray) -> float:
    noise = float(np.sum((estimate.astype(np.float64) - reference) ** 2))
    return float("inf") if noise == 0 else 10 * np.log10(np.sum(reference ** 2.0) / noise)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", default="tiny,quick")
    parser.add_argument("--vocoders", default="griffin-lim,vocos")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--worker", nargs=4, metavar=("PRESET", "VOCODER", "WAY", "OUT"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        preset, vocoder, way, out = args.worker
        worker(preset, vocoder, way, args.repeats, out)
        return 0
    print(f"{os.cpu_count()} cores; a paragraph of 8 sentences, {args.repeats} warm repeats")
    print(f"{'preset':8} {'vocoder':12} {'frames':>22} | {'cold alone':>10} {'batch':>6} "
          f"{'ratio':>5} | {'warm alone':>10} {'batch':>6} {'ratio':>5} | {'min SNR dB':>10}")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for preset in args.presets.split(","):
            for vocoder in args.vocoders.split(","):
                got = {}
                for way in ("alone", "batch"):
                    out = os.path.join(tmp, f"{preset}-{vocoder}-{way}.npz")
                    subprocess.run([sys.executable, os.path.abspath(__file__), "--repeats",
                                    str(args.repeats), "--worker", preset, vocoder, way, out],
                                   check=True)
                    got[way] = dict(np.load(out))
                alone, batch = got["alone"], got["batch"]
                assert list(alone["frames"]) == list(batch["frames"]), (alone["frames"],
                                                                        batch["frames"])
                snr = min(snr_db(batch[f"wave{k}"], alone[f"wave{k}"])
                          for k in range(len(alone["frames"])))
                cold = float(alone["cold"] / batch["cold"])
                warm = float(alone["warm"] / batch["warm"])
                frames = ",".join(str(f) for f in alone["frames"])
                print(f"{preset:8} {vocoder:12} {frames:>22} | {float(alone['cold']):10.2f} "
                      f"{float(batch['cold']):6.2f} {cold:5.2f} | {float(alone['warm']):10.2f} "
                      f"{float(batch['warm']):6.2f} {warm:5.2f} | {snr:10.1f}", flush=True)
                if cold < GOAL_RATIO or snr < GOAL_SNR:
                    failures.append(f"{preset}/{vocoder}")
    print(json.dumps({"goal": f"cold ratio >= {GOAL_RATIO}, SNR >= {GOAL_SNR} dB",
                      "missed": failures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
