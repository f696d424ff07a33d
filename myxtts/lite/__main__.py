"""Speak with an on-device export (LiteRT or ONNX), without TensorFlow.

    python -m myxtts.lite --model models/myxtts-lite --voice voices/anna.npz \
        --text "Hello there." --output hello.wav [--save-mel] [--threads 2]
    python -m myxtts.lite --model models/myxtts-lite --reference-audio speaker.wav ...

--model is what `myxtts-export --format tflite|onnx` wrote (the folder, whose newest version is
used, or one version folder). --save-mel also writes the log10 mel [frames, n_mels] as
<output>.npy. Problems the user can fix are one paragraph and exit status 2.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Optional, Sequence

import numpy as np
import soundfile as sf

from myxtts.errors import MyXTTSError
from myxtts.inference.voices import Voice


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m myxtts.lite", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True,
                   help="The folder myxtts-export --format tflite|onnx wrote, or a version.")
    speaker = p.add_mutually_exclusive_group(required=True)
    speaker.add_argument("--reference-audio", metavar="AUDIO",
                         help="A recording of the speaker (wav, flac, ogg, mp3, ...).")
    speaker.add_argument("--voice", metavar="VOICE.npz",
                         help="A voice file made with the same checkpoint (myxtts-synthesize "
                              "--save-voice, myxtts-serve's voices).")
    p.add_argument("--text", required=True, help="The text to speak.")
    p.add_argument("--language", default=None, help="Default: the model's default language.")
    p.add_argument("--output", required=True, help="The .wav file to write.")
    p.add_argument("--save-mel", action="store_true",
                   help="Also write the log10 mel as <output without .wav>.npy.")
    p.add_argument("--threads", type=int, default=1, help="CPU threads of the runtime.")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    # pylint: disable=import-outside-toplevel  (the runtime loads after the flags are checked)
    from myxtts.lite.parts import ExportError
    from myxtts.lite.synthesizer import LiteSynthesizer
    try:
        if args.threads < 1:
            raise ExportError(f"--threads {args.threads} must be 1 or more.")
        if not args.text.strip():
            raise ExportError("--text is empty: pass the words to speak.")
        started = time.monotonic()
        synth = LiteSynthesizer(args.model, threads=args.threads)
        latents = (synth.latents_of(Voice.load(args.voice)) if args.voice
                   else synth.speaker_latents(args.reference_audio))
        waveform, mel = synth.synthesize(args.text, args.language, latents)
    except (MyXTTSError, ValueError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    folder = os.path.dirname(os.path.abspath(args.output))
    os.makedirs(folder, exist_ok=True)
    sf.write(args.output, waveform, synth.sample_rate, subtype="PCM_16")
    if args.save_mel:
        np.save(os.path.splitext(args.output)[0] + ".npy", mel)
    seconds = len(waveform) / synth.sample_rate
    print(f"Wrote {args.output}: {seconds:.2f} s of audio in {time.monotonic() - started:.2f} s "
          f"({synth.manifest['runtime']}, {args.threads} thread(s))", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
