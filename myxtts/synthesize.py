"""Text → speech from a checkpoint directory, on the command line.

    python -m myxtts.synthesize --checkpoint-dir runs/tiny --reference-audio speaker.flac \
        --text "Hello there." --output hello.wav
    myxtts-synthesize --checkpoint-dir runs/tiny --reference-audio speaker.ogg \
        --text-file lines.txt --language de --output out/ --save-mel
    python -m myxtts.synthesize --checkpoint-dir runs/tiny --vocoder-dir runs/vocoder ...
        (HiFi-GAN or Vocos instead of the Griffin-Lim fallback; docs/vocoder.md)

A voice as a file (myxtts.inference.voices): several recordings are averaged into one voice,
stored with --save-voice (with or without text to speak) and reused with --voice, which refuses
a voice another model made:

    myxtts-synthesize --checkpoint-dir runs/tiny --reference-audio a.wav b.flac --save-voice v.npz
    myxtts-synthesize --checkpoint-dir runs/tiny --voice v.npz --text "Hello." --output hello.wav

Adapting to the voice (myxtts.inference.voice_adaptation): --adapt-steps fine-tunes the model
on the recordings and what each says (--reference-text) before speaking. With --adapt-part
postnet only the postnet moves, and --save-voice stores it in the voice file, which --voice then
speaks adapted:

    myxtts-synthesize --checkpoint-dir runs/tiny --reference-audio a.wav \
        --reference-text "The words a.wav says." --adapt-steps 30 --adapt-part postnet \
        --save-voice v.npz

Streaming (myxtts.inference.streaming): --stream writes each wav file as the decoder makes the
audio, and --output - writes one WAV stream to standard output as chunks arrive (every
utterance, a pause between them), so a player starts before synthesis ends:

    myxtts-synthesize --checkpoint-dir runs/tiny --voice v.npz --text "Hello." --output - | aplay

A text of several sentences is spoken with the same voice, a short pause between its sentences;
they decode together as one batch (Synthesizer.synthesize_batch; streamed, one after another).

Problems the user can fix (missing checkpoint, unknown language, characters outside the saved
vocabulary, unreadable reference audio, a voice file that is not one or is another model's) are
printed as one paragraph, without a traceback, and the exit status is 2. TensorFlow is imported
only after the arguments are checked.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from typing import List, Optional, Sequence

from myxtts.cli import (UsageError, add_adaptation_args, add_model_args, check_adaptation_args,
                        check_model_args, entry_point, flag_hint, load_synthesizer,
                        require_path)
from myxtts.inference.voices import Voice, VoiceFileError, VoiceMismatchError
from myxtts.inference.wav_stream import WavStreamWriter

logger = logging.getLogger("myxtts")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-synthesize", description=__doc__.split("\n")[0])
    add_model_args(p)
    text = p.add_mutually_exclusive_group()
    text.add_argument("--text", help="The text to speak.")
    text.add_argument("--text-file", help="A UTF-8 file with one utterance per line "
                                          "(blank lines are skipped).")
    speaker = p.add_mutually_exclusive_group(required=True)
    speaker.add_argument("--reference-audio", nargs="+", metavar="AUDIO",
                         help="One or more recordings of the target speaker, any format the data "
                              "pipeline reads (wav, flac, ogg, ...); the first "
                              "data.ref_max_seconds of each are used and their speaker latents "
                              "averaged.")
    speaker.add_argument("--voice", metavar="VOICE.npz",
                         help="A voice file --save-voice wrote with this model (another model's "
                              "is refused).")
    p.add_argument("--reference-text", nargs="+", metavar="TEXT",
                   help="What each --reference-audio recording says, in the same order (for "
                        "--adapt-steps).")
    add_adaptation_args(p, "the voice of --reference-audio (needs --reference-text)")
    p.add_argument("--save-voice", metavar="VOICE.npz",
                   help="Store the voice of --reference-audio in this .npz file, with "
                        "--adapt-steps its adapted postnet too (before synthesising; without "
                        "--text/--text-file only the file is written).")
    p.add_argument("--language", default=None,
                   help="Language code from the model's data.languages (default: "
                        "data.default_language).")
    p.add_argument("--output",
                   help="Needed with --text/--text-file: a .wav file for one utterance, or a "
                        "folder (created if needed) that gets 001.wav, 002.wav, ... one per "
                        "line, or - for one WAV stream on standard output, written as the "
                        "audio is made (messages then go to standard error).")
    p.add_argument("--stream", action="store_true",
                   help="Write each wav file while the decoder runs, chunk by chunk (the "
                        "file is a valid WAV after every chunk); --output - always streams.")
    p.add_argument("--save-mel", action="store_true",
                   help="Also save each log10 mel [frames, n_mels] as .npy next to its wav "
                        "(whole synthesis only: not with --stream or --output -).")
    return p


def read_texts(args: argparse.Namespace) -> List[str]:
    """The utterances to speak: none when only --save-voice is given."""
    if args.text is None and args.text_file is None:
        if not args.save_voice:
            raise UsageError("Pass --text or --text-file (the words to speak), or --save-voice "
                             "alone to only store the voice of --reference-audio.")
        if args.output:
            raise UsageError(f"--output {args.output} without --text or --text-file: pass the "
                             f"words to speak.")
        return []
    if not args.output:
        raise UsageError("--output is needed with --text/--text-file: a .wav file, or a folder "
                         "for one file per line.")
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
    numbered files inside the folder `output`; "-" (standard output) for every utterance."""
    if output == "-":
        return [output] * count
    if output.lower().endswith(".wav"):
        if count > 1:
            raise UsageError(f"--output {output} is one wav file but there are {count} "
                             f"utterances: pass a folder instead.")
        return [output]
    width = max(3, len(str(count)))
    return [os.path.join(output, f"{i:0{width}d}.wav") for i in range(1, count + 1)]


def check_reference_texts(args: argparse.Namespace) -> None:
    """--adapt-steps needs --reference-audio and one --reference-text per recording."""
    if not args.adapt_steps:
        if args.reference_text:
            raise UsageError("--reference-text is read by --adapt-steps (adapting the model to "
                             "the voice of --reference-audio); pass --adapt-steps 30 with it, "
                             "or leave it out.")
        return
    if not args.reference_audio:
        raise UsageError(f"--adapt-steps {args.adapt_steps} adapts the model to recordings: "
                         f"pass --reference-audio (and what each says, --reference-text) "
                         f"instead of --voice.")
    if args.save_voice and args.adapt_part != "postnet":
        raise UsageError(f"--save-voice with --adapt-steps: a voice file holds an adapted "
                         f"postnet, not every weight (--adapt-part {args.adapt_part or 'all'}); "
                         f"pass --adapt-part postnet to store the adapted voice, or save the "
                         f"voice without --adapt-steps.")
    texts = args.reference_text or []
    if len(texts) != len(args.reference_audio):
        raise UsageError(f"--adapt-steps needs what each --reference-audio recording says: "
                         f"{len(args.reference_audio)} recording(s) and {len(texts)} "
                         f"--reference-text(s). Pass one quoted text per recording, in the "
                         f"same order.")


def read_voice(args: argparse.Namespace) -> Optional[Voice]:
    """Checks --reference-audio/--voice/--save-voice (no TensorFlow needed) and returns the
    --voice file's voice (None with --reference-audio)."""
    if args.save_voice and not args.reference_audio:
        raise UsageError(f"--save-voice needs --reference-audio: a voice is made from "
                         f"recordings (--voice {args.voice} is one already).")
    if args.save_voice and os.path.isdir(args.save_voice):
        raise UsageError(f"--save-voice {args.save_voice} is a folder: pass a file name such as "
                         f"{os.path.join(args.save_voice, 'voice.npz')}.")
    for path in args.reference_audio or ():
        require_path("--reference-audio", path, "file",
                     "recordings of the target speaker (wav, flac, ogg, ...)")
    if args.voice is None:
        return None
    require_path("--voice", args.voice, "file", "a voice file that --save-voice wrote")
    with flag_hint("(--voice: --save-voice with --reference-audio writes voice files.)",
                   VoiceFileError):
        return Voice.load(args.voice)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    texts = read_texts(args)
    paths = output_paths(args.output, len(texts)) if texts else []
    streaming = args.stream or args.output == "-"
    if args.save_mel and streaming:
        raise UsageError("--save-mel needs whole synthesis: leave out --stream and pass a .wav "
                         "file or a folder to --output.")
    check_model_args(args)
    check_adaptation_args(args)
    check_reference_texts(args)
    voice = read_voice(args)
    # Messages go to standard error when standard output carries the audio.
    report = sys.stderr if args.output == "-" else sys.stdout
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    import numpy as np
    import soundfile as sf

    synth = load_synthesizer(args)
    from myxtts.inference.synthesizer import warn_length_cap
    from myxtts.inference.text_front_end import UnknownCharactersError, UnknownLanguageError
    from myxtts.inference.voice_adaptation import ADAPT_LEARNING_RATE
    language = args.language or synth.config.data.default_language
    with flag_hint("Pass one of them to --language.", UnknownLanguageError):
        language_id = synth.language_id(language)
    # Every text's sentences, so every error comes before any audio.
    sentences = [synth.sentences(text, language) for text in texts]
    if voice is None:
        voice = synth.voice(args.reference_audio)
    with flag_hint(f"(--voice {args.voice}, --checkpoint-dir {args.checkpoint_dir}: make it "
                   f"again with --reference-audio and --save-voice, or pass the "
                   f"--checkpoint-dir and --checkpoint that made it.)", VoiceMismatchError):
        latents = synth.use_voice(voice)
    if voice.postnet is not None:
        print(f"The voice {args.voice} is adapted to {', '.join(voice.references)}: its "
              f"postnet speaks.", file=report)
    if args.adapt_steps:
        started = time.monotonic()
        with flag_hint("(--reference-text: the words of each --reference-audio recording.)",
                       UnknownCharactersError):
            adapted = synth.adapt_to_references(
                latents, args.reference_audio, args.reference_text, language, args.adapt_steps,
                args.adapt_learning_rate or ADAPT_LEARNING_RATE, args.adapt_part or "all")
        print(f"Adapted to the voice of {', '.join(voice.references)} ({adapted.part}): "
              f"{args.adapt_steps} steps, mel loss {adapted.losses[0]:.3f} -> "
              f"{adapted.losses[-1]:.3f} ({time.monotonic() - started:.1f} s)", file=report)
        if adapted.part == "postnet":
            voice = synth.voice(args.reference_audio, adapted)
            latents = synth.use_voice(voice)
        else:
            synth.use_weights(adapted)
    if args.save_voice:
        with flag_hint(f"(--save-voice {args.save_voice})", VoiceFileError):
            voice.save(args.save_voice)
        adapted_note = ", its postnet adapted" if voice.postnet is not None else ""
        print(f"{args.save_voice}: the voice of {', '.join(voice.references)} "
              f"({voice.latents.shape[0]} latents{adapted_note}), made by {voice.checkpoint}",
              file=report)
    if args.output == "-":
        _stream_to_stdout(synth, sentences, language_id, latents)
        return 0
    for pieces, path in zip(sentences, paths):
        started = time.monotonic()
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        if streaming:
            first = _stream_to_file(synth, pieces, language_id, latents, path, started)
            samples, frames = sf.info(path).frames, None
        else:
            results = synth.synthesize_batch(pieces, language_id, latents)
            waveform, mel = synth.join_sentences(results)
            sf.write(path, waveform, synth.sample_rate, subtype="PCM_16")
            samples, frames, first = len(waveform), mel.shape[0], None
            for result in results:
                if not result.ended_by_stop:
                    warn_length_cap(path, result.max_frames, synth.sample_rate,
                                    synth.config.data.hop_length, synth.max_decoder_steps)
        seconds = time.monotonic() - started
        duration = samples / synth.sample_rate
        made = f" ({frames} mel frames)" if frames is not None else ""
        streamed = f", first audio after {first:.2f} s" if first is not None else ""
        print(f"{path}: {duration:.2f} s of audio{made} in {seconds:.2f} s, real-time factor "
              f"{seconds / max(duration, 1e-9):.2f}{streamed}", file=report)
        if args.save_mel:
            mel_path = os.path.splitext(path)[0] + ".npy"
            np.save(mel_path, mel.astype(np.float32), allow_pickle=False)
            print(f"{mel_path}: log10 mel {mel.shape[0]} x {mel.shape[1]}", file=report)
    return 0


def _stream_to_file(synth, sentences, language_id, latents, path, started) -> float:
    """Writes the stream of `sentences` into the wav `path` chunk by chunk (flushed after each:
    the file is a valid WAV throughout); returns the seconds to the first chunk."""
    import soundfile as sf  # pylint: disable=import-outside-toplevel
    first = None
    with sf.SoundFile(path, "w", synth.sample_rate, 1, "PCM_16") as f:
        for chunk in synth.stream_sentences(sentences, language_id, latents):
            if first is None:
                first = time.monotonic() - started
            f.write(chunk)
            f.flush()
    return first


def _stream_to_stdout(synth, sentences, language_id, latents) -> None:
    """One WAV stream of every utterance on standard output, pauses between them. A reader that
    goes away (a player quit, `| head -c N`) ends the stream quietly."""
    started = time.monotonic()
    first = None
    try:
        writer = WavStreamWriter(sys.stdout.buffer, synth.sample_rate)
        for i, pieces in enumerate(sentences):
            if i:
                writer.write(synth.pause())
            for chunk in synth.stream_sentences(pieces, language_id, latents):
                if first is None:
                    first = time.monotonic() - started
                writer.write(chunk)
        writer.finish()
    except BrokenPipeError:
        # Python would flush standard output again at exit and fail once more (its docs'
        # advice: point it at /dev/null).
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        print("-: standard output was closed by its reader; synthesis stopped.",
              file=sys.stderr)
        return
    duration = writer.samples / synth.sample_rate
    seconds = time.monotonic() - started
    print(f"-: {duration:.2f} s of audio streamed in {seconds:.2f} s, real-time factor "
          f"{seconds / max(duration, 1e-9):.2f}, first audio after {first:.2f} s",
          file=sys.stderr)


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
