"""What quantisation costs in quality: the on-device formats read the same held-out sentences as
LiteRT fp32, and each is judged as `myxtts-evaluate` judges a checkpoint.

    python benchmarks/bench_quantization.py --checkpoint-dir runs/c1 \
        --data corpora/voices25_unseen2 [--num 48] [--vocoder-dir runs/v25voc \
        --vocoder-checkpoint best] [--recognizer none|whisper] [--out /tmp/bench-quant]

Exports the checkpoint as LiteRT fp32, fp16 and int8 and as ONNX (bench_edge.py's formats,
into --out), chooses the sentences as `myxtts-evaluate` does (its --data, --num and --seed:
the same picks, each with a reference of its speaker) and synthesises every one with each
format (myxtts.lite.LiteSynthesizer). Per format:
  text-match   the share of outputs whose own recording is strictly the nearest of all the
               sentences' recordings (DTW mel-cepstral distortion; evaluation.metrics),
  MCD fp32     mean DTW mel-cepstral distortion (dB) of its mels against fp32's, sentence by
               sentence (0 = the same mels),
  frames       its total mel frames minus fp32's (a stop head that decided otherwise),
  WER          word error rate of its audio heard by Whisper (--recognizer whisper, and
               --recognizer-model DIR for a model other than the installed tiny.en).
"""

import argparse
import os
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.bench_edge import FORMATS, export_formats  # noqa: E402
from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.text import Tokenizer  # noqa: E402
from myxtts.evaluation import metrics  # noqa: E402
from myxtts.evaluation.sentence_choice import find_sentences, pick_sentences  # noqa: E402
from myxtts.model_info import read_model_info  # noqa: E402
from myxtts.run_directory import CONFIG_FILE, VOCAB_FILE  # noqa: E402


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoint-dir", required=True)
    p.add_argument("--checkpoint", default=None)
    p.add_argument("--data", default=None, help="as myxtts-evaluate's --data")
    p.add_argument("--num", type=int, default=48)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--vocoder-dir", default=None)
    p.add_argument("--vocoder-checkpoint", default=None)
    p.add_argument("--recognizer", choices=("none", "whisper"), default="none")
    p.add_argument("--recognizer-model", default=None, metavar="DIR")
    p.add_argument("--out", default="/tmp/bench-quant")
    args = p.parse_args()
    # pylint: disable=import-outside-toplevel  (TensorFlow-free once the exports exist)
    from myxtts.data.cache import load_samples
    from myxtts.evaluation.recognizer import load_recognizer
    from myxtts.lite import features
    from myxtts.lite.synthesizer import LiteSynthesizer
    config = XTTSConfig.from_yaml(os.path.join(args.checkpoint_dir, CONFIG_FILE))
    tokenizer = Tokenizer.load(os.path.join(args.checkpoint_dir, VOCAB_FILE))
    sentences = find_sentences(config, args.checkpoint_dir, args.data,
                               read_model_info(args.checkpoint_dir))
    picks, _ = pick_sentences(sentences, config, tokenizer, args.num, args.seed)
    formats = [f for f in FORMATS if f[1] != "tf_serving"]
    folders = export_formats(formats, args.checkpoint_dir, args.out, checkpoint=args.checkpoint,
                             vocoder_dir=args.vocoder_dir,
                             vocoder_checkpoint=args.vocoder_checkpoint)
    recognizer = None
    if args.recognizer != "none":
        recognizer, why_not = load_recognizer(
            args.recognizer, [config.data.languages[p.item.language_id] for p in picks],
            args.recognizer_model)
        if recognizer is None:
            raise SystemExit(f"--recognizer {args.recognizer}: {why_not}")
    d = config.data
    recordings, gt_cepstra = [], []
    results = {}
    for name, _, _ in formats:
        synth = LiteSynthesizer(folders[name], threads=2)
        if not gt_cepstra:
            for pick in picks:
                samples = load_samples(pick.item, d)
                recordings.append(samples)
                gt_cepstra.append(metrics.mel_cepstra(features.log_mel(
                    samples, synth.vocoder.stft_window, synth.vocoder.filters, d.hop_length,
                    d.mel_floor)))
        mels, errors, words = [], 0, 0
        for pick in picks:
            latents = synth.speaker_latents(pick.reference.audio_path)
            waveform, mel = synth.synthesize(pick.text, synth.languages[pick.item.language_id],
                                             latents)
            mels.append(mel)
            if recognizer is not None:
                language = synth.languages[pick.item.language_id]
                wrong, count = metrics.word_errors(pick.text, recognizer.transcribe(
                    waveform, synth.sample_rate, language), language)
                errors, words = errors + wrong, words + count
        distances = metrics.dtw_mcd_matrix([metrics.mel_cepstra(m) for m in mels], gt_cepstra)
        results[name] = {"mels": mels, "text_match": float(np.mean(metrics.text_match(distances))),
                         "wer": errors / words if words else None}
        print(f"{name}: text-match {results[name]['text_match']:.3f}", flush=True)
    if recognizer is not None:
        errors, words = 0, 0
        for pick, samples in zip(picks, recordings):
            language = d.languages[pick.item.language_id]
            wrong, count = metrics.word_errors(pick.text, recognizer.transcribe(
                samples, d.sample_rate, language), language)
            errors, words = errors + wrong, words + count
        print(f"recordings: WER {errors / words:.3f}")
    fp32 = results["litert fp32"]["mels"]
    print(f"{args.checkpoint_dir} ({args.checkpoint or 'latest'}), {len(picks)} sentences from "
          f"{sentences.source} ({sentences.mode}), vocoder: "
          f"{args.vocoder_dir or 'Griffin-Lim (numpy)'}")
    print(f"{'format':<12} {'size MB':>8} {'text-match':>10} {'MCD fp32':>8} {'frames':>7} "
          f"{'WER':>6}")
    for name, result in results.items():
        size = sum(os.path.getsize(os.path.join(folders[name], f))
                   for f in os.listdir(folders[name])) / 1e6
        mcd = float(np.mean([metrics.dtw_mcd(a, b) for a, b in zip(result["mels"], fp32)]))
        frames = sum(len(m) for m in result["mels"]) - sum(len(m) for m in fp32)
        wer = "-" if result["wer"] is None else f"{result['wer']:.3f}"
        print(f"{name:<12} {size:>8.1f} {result['text_match']:>10.3f} {mcd:>8.3f} "
              f"{frames:>+7d} {wer:>6}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
