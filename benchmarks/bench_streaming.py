"""Streaming synthesis: time to first audio and real-time factor, streamed vs whole.

    python benchmarks/bench_streaming.py [--presets tiny,quick,small]
                                         [--vocoders griffin-lim,vocos] [--repeats 3]
                                         [--chunk-steps 24] [--first-chunk-steps N]

For each preset (configs/<preset>.yaml): an untrained XTTSModel (speed does not depend on the
weights) behind a Synthesizer built in memory (a LoadedCheckpoint of the model, the preset's
config and a tokenizer of this benchmark's texts; no checkpoint on disk), with two vocoders:
  * griffin-lim: GriffinLimVocoder, 32 iterations (the synthesizer's default),
  * vocos: an untrained VocosGenerator sized as configs/vocoder_quick.yaml's vocoder section
    (channels, layers), on the acoustic preset's mel features (vocoder_quick's data section when
    it equals the preset's features, else the preset's data section), in a NeuralVocoder: a
    stream vocodes each chunk's new frames once (VocosStream),
  * vocos-windows (not in the default list): the same generator streamed in windows that
    recompute their receptive field of context each side, as HiFi-GAN is (for comparison).
Two inputs each: one sentence of ~10 s of audio, and a paragraph of three ~3 s sentences.

Every run does the same work: the stop head is switched off (its projection assigned to never
fire) and model.max_frames_per_token is set per preset so the long sentence's per-token length
cap is ~10 s of frames at the preset's sample rate and hop (the paragraph's sentences, a third
of its characters each, get ~3 s each); max_decoder_steps is the long sentence's step count
plus a margin, so the per-token cap, not max_decoder_steps, ends every sentence, and the
sentence splitting of the text front end (whose budget follows from both) keeps the long
sentence whole (the `pieces` column shows how many pieces each text became).

Per case, after one warm-up of each path on that input (tracing and XLA compilation are
excluded from every figure), `Synthesizer.synthesize` (whole: every sentence decoded, then
vocoded, joined with pauses) and `Synthesizer.stream` (chunks as the decoder runs) run
alternately --repeats times, so load from other jobs hits both alike; the table gives the best
(min) of each:
  pieces         the pieces the text front end cut the text into (sentences),
  audio s        seconds of audio of the whole synthesis (pauses between sentences included),
  whole s, RTF   synthesize wall time, and that per second of audio (< 1: faster than real time),
  first audio s  time from calling stream to its first chunk; first/whole %: that / whole s,
  stream s       time until the stream is exhausted; stream/whole: that / whole s,
  chunks         arrays the stream yielded (the pauses between sentences count as one each),
  SNR dB         the joined stream against the whole waveform (a correctness sanity figure:
                 float rounding only with Vocos; lower with Griffin-Lim, whose windows see
                 GRIFFIN_LIM_CONTEXT frames of context, not the whole utterance).
Both paths are timed as the library runs them (the generator in a tf.function in both).
The goals (GOALS: quick first audio <= 15% of whole and stream <= 1.2x; small 12% and 1.15x; aim
10% for the first audio) are checked per case at the end. The "myxtts.inference" logger is set to ERROR: with the stop head off every streamed
sentence would log the length-cap warning. All numbers come from this one run.
"""

import argparse
import copy
import dataclasses
import logging
import math
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from myxtts.config import XTTSConfig  # noqa: E402
from myxtts.data.text import Tokenizer, clean_text  # noqa: E402
from myxtts.decoding import scheduler  # noqa: E402
from myxtts.inference.checkpoint_loading import LoadedCheckpoint  # noqa: E402
from myxtts.inference.synthesizer import Synthesizer  # noqa: E402
from myxtts.inference.vocoding import (FEATURE_FIELDS, GRIFFIN_LIM_ITERATIONS,  # noqa: E402
                                       NeuralVocoder)
from myxtts.models.xtts import XTTSModel  # noqa: E402
from myxtts.vocoder.generator import build_generator  # noqa: E402

LANGUAGE = "en"
SENTENCE = ("The old lighthouse keeper climbed the winding stairs every evening to light the "
            "great lamp that guided the fishing boats home.")  # 126 characters cleaned
PARAGRAPH = ("The rain stopped just before sunrise. Birds began to sing in the tall trees. "
             "We walked down to the quiet harbor.")  # 37 + 38 + 35 characters
INPUTS = {"sentence": SENTENCE, "paragraph": PARAGRAPH}
SENTENCE_SECONDS = 10.0  # audio of SENTENCE; the paragraph's sentences get their share
STEP_MARGIN = 8  # decoder steps of max_decoder_steps beyond the longest sentence's cap
VOCODER_CONFIG = os.path.join(REPO, "configs", "vocoder_quick.yaml")
# Per preset: (first audio / whole synthesis time, stream / whole synthesis time) at most; the
# first audio's aim is AIM_FIRST. tiny has no goal (reported only).
GOALS = {"quick": (0.15, 1.20), "small": (0.12, 1.15)}
AIM_FIRST = 0.10


def build_synthesizer_model(preset: str):
    """(config, LoadedCheckpoint) of an untrained model of `preset` whose every sentence ends at
    its per-token cap of frames (stop head off)."""
    config = XTTSConfig.from_yaml(os.path.join(REPO, "configs", f"{preset}.yaml"))
    d, m = config.data, config.model
    if d.use_phonemes:
        raise SystemExit(f"{preset}: data.use_phonemes is on; this benchmark tokenizes "
                         f"characters")
    if LANGUAGE not in d.languages:
        raise SystemExit(f"{preset}: no language {LANGUAGE!r} in data.languages")
    cleaned = [clean_text(t, d.text_cleaners, LANGUAGE) for t in INPUTS.values()]
    tokenizer = Tokenizer.build(cleaned, d.text_cleaners)
    # ~SENTENCE_SECONDS of frames for SENTENCE's tokens (one token per cleaned character).
    tokens = len(tokenizer.encode(clean_text(SENTENCE, d.text_cleaners, LANGUAGE)))
    frames_per_token = SENTENCE_SECONDS * d.sample_rate / d.hop_length / tokens
    r = m.reduction_factor
    steps = int(np.ceil(np.float32(tokens) * np.float32(frames_per_token) / np.float32(r)))
    config.override({"model.max_frames_per_token": frames_per_token,
                     "model.max_decoder_steps": steps + STEP_MARGIN}, source="benchmark")
    keras.mixed_precision.set_global_policy("float32")
    keras.utils.set_random_seed(0)
    model = XTTSModel(m, tokenizer.vocab_size, len(d.languages), d.n_mels)
    model.max_frames_per_token = frames_per_token  # (the config gave it already; explicit)
    # Stop head off: every decode runs to its per-token cap, so every run does the same work.
    stop = model.decoder.stop_projection
    stop.kernel.assign(tf.zeros_like(stop.kernel))
    stop.bias.assign(tf.fill([r], -1e4))
    return config, LoadedCheckpoint("", "", config, tokenizer, model, {})


def build_vocos(config: XTTSConfig):
    """(NeuralVocoder of an untrained Vocos sized by vocoder_quick, a description)."""
    vocoder_config = XTTSConfig.from_yaml(VOCODER_CONFIG)
    differing = [f for f in FEATURE_FIELDS
                 if getattr(vocoder_config.data, f) != getattr(config.data, f)]
    if differing:  # vocoder_quick's generator on the acoustic preset's features
        vocoder_config = dataclasses.replace(vocoder_config, data=copy.deepcopy(config.data))
    generator = build_generator(vocoder_config)
    v = vocoder_config.vocoder
    source = (f"the preset's data section ({', '.join(differing)} differ from vocoder_quick)"
              if differing else "vocoder_quick's data section")
    return NeuralVocoder(generator, config.data, "(untrained)"), (
        f"Vocos {v.vocos_channels} channels x {v.vocos_layers} layers, "
        f"{generator.count_params():,} params, receptive field {generator.receptive_field} "
        f"frames, features from {source}")


class WindowedNeuralVocoder(NeuralVocoder):
    """A NeuralVocoder streamed the way HiFi-GAN is, in windows that recompute their context
    (streaming.WindowedStage), for comparison with Vocos's stateful stream."""

    def streaming_stage(self):
        return None


def run_whole(synth, text, latents):
    start = time.perf_counter()
    waveform, mel = synth.synthesize(text, LANGUAGE, latents)
    return time.perf_counter() - start, waveform, mel


def run_stream(synth, text, latents, first_chunk_steps, chunk_steps):
    """(seconds to the first chunk, seconds in all, the chunks)."""
    start = time.perf_counter()
    chunks, first = [], None
    for chunk in synth.stream(text, LANGUAGE, latents, first_chunk_steps=first_chunk_steps,
                              chunk_steps=chunk_steps):
        if first is None:
            first = time.perf_counter() - start
        chunks.append(chunk)
    return first, time.perf_counter() - start, chunks


def snr_db(reference: np.ndarray, estimate: np.ndarray) -> float:
    n = min(len(reference), len(estimate))
    noise = float(np.sum((reference[:n].astype(np.float64) - estimate[:n]) ** 2))
    signal = float(np.sum(reference[:n].astype(np.float64) ** 2))
    if noise == 0.0:
        return math.inf
    return 10.0 * math.log10(max(signal, 1e-30) / noise)


def bench_case(synth, text, latents, args, expected_frames):
    pieces = len(synth.sentences(text, LANGUAGE))
    # Warm-up of both paths on this input: tracing and XLA compilation.
    _, whole_wav, whole_mel = run_whole(synth, text, latents)
    assert whole_mel.shape[0] == expected_frames, (whole_mel.shape, expected_frames)
    _, _, chunks = run_stream(synth, text, latents, args.first_chunk_steps, args.chunk_steps)
    streamed = np.concatenate(chunks)
    first_chunk_seconds = len(chunks[0]) / synth.sample_rate
    if len(streamed) != len(whole_wav):
        print(f"       note: stream {len(streamed)} samples, whole {len(whole_wav)}")
    snr = snr_db(whole_wav, streamed)
    whole_times, first_times, stream_times = [], [], []
    for _ in range(args.repeats):  # alternately: other jobs' load hits both paths alike
        whole_times.append(run_whole(synth, text, latents)[0])
        first, total, chunks = run_stream(synth, text, latents, args.first_chunk_steps,
                                          args.chunk_steps)
        first_times.append(first)
        stream_times.append(total)
    return {"pieces": pieces, "audio": len(whole_wav) / synth.sample_rate,
            "whole": min(whole_times), "first": min(first_times),
            "stream": min(stream_times), "chunks": len(chunks), "snr": snr,
            "first_chunk_audio": first_chunk_seconds}


def bench_preset(preset: str, args, rows):
    config, loaded = build_synthesizer_model(preset)
    d, m = config.data, config.model
    model = loaded.model
    rng = np.random.default_rng(0)
    ref = tf.constant(rng.normal(-2, 1, (1, int(d.ref_max_seconds * d.sample_rate
                                                / d.hop_length), d.n_mels)), tf.float32)
    latents = model.speaker_latents(ref, tf.shape(ref)[1:2])
    print(f"\n{preset}: {model.count_params():,} params, r {m.reduction_factor}, "
          f"{d.sample_rate} Hz, hop {d.hop_length}, n_mels {d.n_mels}, n_fft {d.n_fft} | "
          f"max_frames_per_token {m.max_frames_per_token:.3f}, max_decoder_steps "
          f"{m.max_decoder_steps}, postnet receptive field {model.postnet.receptive_field}")
    vocoders = {}
    for name in args.vocoders:
        if name == "griffin-lim":
            vocoders[name] = (None, f"Griffin-Lim {GRIFFIN_LIM_ITERATIONS} iterations")
        elif name == "vocos":
            vocoders[name] = build_vocos(config)
        elif name == "vocos-windows":
            vocos, description = vocoders.get("vocos") or build_vocos(config)
            vocoders[name] = (WindowedNeuralVocoder(vocos.generator, config.data, "(untrained)"),
                              description + "; streamed in windows with context")
        else:
            raise SystemExit(f"unknown vocoder {name!r} (griffin-lim, vocos, vocos-windows)")
    for name, (vocoder, description) in vocoders.items():
        synth = Synthesizer(loaded, griffin_lim_iterations=GRIFFIN_LIM_ITERATIONS,
                            vocoder=vocoder)
        pause_frames = len(synth.pause()) // d.hop_length
        first = (f"{args.first_chunk_steps} decoder steps" if args.first_chunk_steps else
                 "the library's default size")
        print(f"  {name}: {description}; vocoder receptive field "
              f"{synth.vocoder.receptive_field} frames; first chunk of each sentence "
              f"{first}, then {args.chunk_steps} decoder steps "
              f"({args.chunk_steps * m.reduction_factor} frames)")
        for input_name, text in INPUTS.items():
            sentences = synth.sentences(text, LANGUAGE)
            frames = [synth.max_frames(len(ids)) for ids in sentences]
            expected = sum(frames) + pause_frames * (len(frames) - 1)
            result = bench_case(synth, text, latents, args, expected)
            print(f"    {input_name}: {len(sentences)} piece(s) of "
                  f"{', '.join(str(len(ids)) for ids in sentences)} tokens -> "
                  f"{', '.join(str(f) for f in frames)} frames; first chunk "
                  f"{1000 * result['first_chunk_audio']:.0f} ms of audio")
            rows.append({"preset": preset, "vocoder": name, "input": input_name, **result})


def print_table(rows):
    header = (f"{'preset':<6} {'vocoder':<13} {'input':<9} {'pieces':>6} {'audio s':>7} "
              f"{'whole s':>8} {'whole RTF':>9} {'first audio s':>13} {'first/whole %':>13} "
              f"{'stream s':>8} {'stream/whole':>12} {'chunks':>6} {'stream==whole SNR dB':>20}")
    print("\n" + header + "\n" + "-" * len(header))
    for row in rows:
        print(f"{row['preset']:<6} {row['vocoder']:<13} {row['input']:<9} {row['pieces']:>6} "
              f"{row['audio']:>7.2f} {row['whole']:>8.3f} {row['whole'] / row['audio']:>9.3f} "
              f"{row['first']:>13.3f} {100 * row['first'] / row['whole']:>12.1f}% "
              f"{row['stream']:>8.3f} {row['stream'] / row['whole']:>11.2f}x "
              f"{row['chunks']:>6} {row['snr']:>20.1f}")


def print_goals(rows):
    print("\nGoals: " + "; ".join(f"{preset} first audio <= {first:.0%} of whole (aim "
                                  f"{AIM_FIRST:.0%}), stream <= {stream:.2f}x whole"
                                  for preset, (first, stream) in GOALS.items()))
    for row in rows:
        first, ratio = row["first"] / row["whole"], row["stream"] / row["whole"]
        goal = GOALS.get(row["preset"])
        verdicts = ("", "") if goal is None else (
            "PASS" if first <= goal[0] else "MISS", "PASS" if ratio <= goal[1] else "MISS")
        aim = " (aim met)" if first <= AIM_FIRST else ""
        print(f"  {row['preset']:<6} {row['vocoder']:<13} {row['input']:<9} first audio "
              f"{first:6.1%} {verdicts[0]:<4}{aim:<11} | stream {ratio:5.2f}x {verdicts[1]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", default="tiny,quick,small")
    parser.add_argument("--vocoders", default="griffin-lim,vocos",
                        help="of griffin-lim, vocos, vocos-windows")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--chunk-steps", type=int, default=scheduler.CHUNK_STEPS,
                        help="decoder steps per chunk after the first")
    parser.add_argument("--first-chunk-steps", type=int, default=None,
                        help="decoder steps of each sentence's first chunk (default: the "
                             "library's, just enough for its first frames of audio)")
    args = parser.parse_args()
    args.vocoders = [v.strip() for v in args.vocoders.split(",") if v.strip()]
    logging.getLogger("myxtts.inference").setLevel(logging.ERROR)
    print(f"TensorFlow {tf.__version__}, {os.cpu_count()} CPU cores, devices: "
          f"{[d.name for d in tf.config.list_logical_devices()]}; repeats {args.repeats} "
          f"(best of), chunk steps {args.chunk_steps}, first chunk steps "
          f"{args.first_chunk_steps or 'library default'}")
    rows = []
    for preset in args.presets.split(","):
        bench_preset(preset.strip(), args, rows)
    print_table(rows)
    print_goals(rows)


if __name__ == "__main__":
    main()
