"""Text → speech from a checkpoint directory, on the command line.

    python -m myxtts.synthesize --checkpoint-dir runs/tiny --reference-audio speaker.flac \
        --text "Hello there." --output hello.wav
    myxtts-synthesize --checkpoint-dir runs/tiny --reference-audio speaker.ogg \
        --text-file lines.txt --language de --output out/ --save-mel
    python -m myxtts.synthesize --checkpoint-dir runs/tiny --vocoder-dir runs/vocoder ...
        (HiFi-GAN or Vocos instead of the Griffin-Lim fallback; docs/vocoder.md)

Problems the user can fix (missing checkpoint, unknown language, characters outside the saved
vocabulary, unreadable reference audio) are printed as one paragraph, without a traceback, and
the exit status is 2. TensorFlow is imported only after the arguments are checked.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from typing import List, Optional, Sequence

from myxtts.cli import (UsageError, add_model_args, check_model_args, entry_point, flag_hint,
                        load_synthesizer, require_path)

logger = logging.getLogger("myxtts")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-synthesize", description=__doc__.split("\n")[0])
    add_model_args(p)
    text = p.add_mutually_exclusive_group(required=True)
    text.add_argument("--text", help="The text to speak.")
    text.add_argument("--text-file", help="A UTF-8 file with one utterance per line "
                                          "(blank lines are skipped).")
    p.add_argument("--reference-audio", required=True,
                   help="A recording of the target speaker, any format the data pipeline "
                        "reads (wav, flac, ogg, ...); the first data.ref_max_seconds are used.")
    p.add_argument("--language", default=None,
                   help="Language code from the model's data.languages (default: "
                        "data.default_language).")
    p.add_argument("--output", required=True,
                   help="A .wav file for one utterance, or a folder (created if needed) that "
                        "gets 001.wav, 002.wav, ... one per line.")
    p.add_argument("--save-mel", action="store_true",
                   help="Also save each log10 mel [frames, n_mels] as .npy next to its wav.")
    return p


def read_texts(args: argparse.Namespace) -> List[str]:
    if args.text is not None:
        if not args.text.strip():
            raise UsageError("--text is empty: pass the words to speak.")
        return [args.text]
    try:
        with open(args.text_file, encoding="utf-8") as f:
            texts = [line.strip() for line in f if line.strip()]
    except (OSError, UnicodeDecodeError) as e:
        raise UsageError(f"Cannot read --text-file {args.text_file}: {e}.") from None
    if not texts:
        raise UsageError(f"--text-file {args.text_file} has no non-blank lines.")
    return texts


def output_paths(output: str, count: int) -> List[str]:
    """One .wav path per utterance: `output` itself when it names a .wav file, otherwise
    numbered files inside the folder `output`."""
    if output.lower().endswith(".wav"):
        if count > 1:
            raise UsageError(f"--output {output} is one wav file but there are {count} "
                             f"utterances: pass a folder instead.")
        return [output]
    width = max(3, len(str(count)))
    return [os.path.join(output, f"{i:0{width}d}.wav") for i in range(1, count + 1)]


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    texts = read_texts(args)
    paths = output_paths(args.output, len(texts))
    check_model_args(args)
    require_path("--reference-audio", args.reference_audio, "file",
                 "a recording of the target speaker (wav, flac, ogg, ...)")
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    import numpy as np
    import soundfile as sf

    synth = load_synthesizer(args)
    from myxtts.inference.text_front_end import UnknownLanguageError
    language = args.language or synth.config.data.default_language
    with flag_hint("Pass one of them to --language.", UnknownLanguageError):
        language_id = synth.language_id(language)
    encoded = [synth.encode(text, language) for text in texts]  # all errors before any audio
    latents = synth.speaker_latents(args.reference_audio)
    for ids, path in zip(encoded, paths):
        started = time.monotonic()
        result = synth.synthesize_detailed(ids, language_id, latents)
        waveform, mel = result.waveform, result.mel
        seconds = time.monotonic() - started
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        sf.write(path, waveform, synth.sample_rate, subtype="PCM_16")
        duration = len(waveform) / synth.sample_rate
        print(f"{path}: {duration:.2f} s of audio ({mel.shape[0]} mel frames) in {seconds:.2f} s, "
              f"real-time factor {seconds / max(duration, 1e-9):.2f}")
        if not result.ended_by_stop:
            logger.warning("%s: decoding stopped at its cap of %d mel frames (%.2f s) because "
                           "the model predicted no end of speech; the audio is probably too "
                           "long and ends in noise or repetition. A model trained longer "
                           "predicts the end; the cap is --max-decoder-steps (now %d decoder "
                           "steps) or model.max_frames_per_token per input token.", path,
                           result.max_frames, duration, synth.max_decoder_steps)
        if args.save_mel:
            mel_path = os.path.splitext(path)[0] + ".npy"
            np.save(mel_path, mel.astype(np.float32), allow_pickle=False)
            print(f"{mel_path}: log10 mel {mel.shape[0]} x {mel.shape[1]}")
    return 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
