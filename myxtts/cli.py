"""What every command-line entry point shares: the log format, a quiet TensorFlow start, cheap
argument checks and how user errors end a run.

Imports no TensorFlow (train_main.py uses it before devices are configured).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import re
import signal
import sys
import tempfile
from typing import Callable, Iterator, Optional, Sequence, Tuple, TypeVar

from myxtts.devices import choose_cpu_kernels
from myxtts.errors import MyXTTSError

T = TypeVar("T")

# TensorFlow's start-up lines that say nothing about the run: absl's notice about logging before
# its initialisation, the oneDNN notice, no CUDA driver on a CPU-only machine, CPU instructions.
# They are written before TF_CPP_MIN_LOG_LEVEL takes effect, so they are filtered.
_STARTUP_NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
    r"STDERR|I0000 \S+ +\d+ (port|cudart_stub|cpu_feature_guard)\.cc:\d+\] |To enable the "
    r"following instructions: .* rebuild TensorFlow with the appropriate compiler flags\.$)")


class UsageError(MyXTTSError, ValueError):
    """Contradictory, missing or invalid command-line options."""


def setup_logging() -> None:
    """INFO lines with a time stamp on stderr; absl's and TensorFlow's INFO chatter (e.g. every
    captured input tf.saved_model.save renames, its temporary asset folder) only from WARNING
    up."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    for name in ("absl", "tensorflow"):
        logging.getLogger(name).setLevel(logging.WARNING)


@contextlib.contextmanager
def quiet_tensorflow_start(verbose: bool = False) -> Iterator[None]:
    """Wrap the code that first imports TensorFlow: its CPU kernels are chosen first
    (devices.choose_cpu_kernels) and, unless `verbose`, its C++ start-up lines and E0000 lines
    are kept off the console.

    Sets TF_CPP_MIN_LOG_LEVEL=3, which hides TensorFlow's C++ INFO/WARNING/ERROR log lines, e.g.
    `failed call to cuInit ... (303)` on CPU-only machines and `Compiled cluster using XLA!`;
    failures still raise Python errors, and Python warnings and myxtts logs are unaffected. The
    INFO lines written while the libraries load ignore that setting; they are filtered from
    stderr inside the block, everything else written there is passed on. A user who set
    TF_CPP_MIN_LOG_LEVEL keeps that level, and sees those lines too when it shows INFO (0).
    """
    choose_cpu_kernels()
    if verbose:
        yield
        return
    level = os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if level.strip() in ("", "0"):
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode("utf-8", "replace").splitlines(keepends=True):
                if not _STARTUP_NOISE.match(line):
                    sys.stderr.write(line)
            sys.stderr.flush()


def require_path(flag: str, path: str, kind: str, expected: str) -> None:
    """UsageError naming `flag` unless `path` is an existing directory (`kind` "dir") or file
    ("file"); `expected` says what it should be (e.g. "the folder train_main.py wrote")."""
    if os.path.isdir(path) if kind == "dir" else os.path.isfile(path):
        return
    problem = "does not exist" if not os.path.exists(path) else (
        f"is not a {'folder' if kind == 'dir' else 'file'}")
    raise UsageError(f"{flag} {path} {problem}. Pass {expected}.")


def run_guarded(main: Callable[[T], int], argv: T) -> int:
    """Runs `main(argv)`; a MyXTTSError (a problem the user can fix) is printed as one
    paragraph, without a traceback, and ends the run with exit status 2; Ctrl-C where the
    command does not handle it (e.g. while TensorFlow loads) ends it with status 130, also
    without a traceback."""
    try:
        return main(argv)
    except MyXTTSError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Interrupted (Ctrl-C).", file=sys.stderr)
        return 128 + signal.SIGINT


Main = Callable[[Optional[Sequence[str]]], int]


def entry_point(main: Main) -> Tuple[Main, Callable[[], None]]:
    """(guarded_main, run) of a command whose `main(argv) -> exit status` parses `argv`:
    guarded_main sets up logging and prints user-fixable problems as one paragraph (exit 2);
    run is the console-script entry point that exits with that status."""

    def guarded_main(argv: Optional[Sequence[str]] = None) -> int:
        setup_logging()
        return run_guarded(main, argv)

    def run() -> None:
        sys.exit(guarded_main())

    return guarded_main, run


@contextlib.contextmanager
def flag_hint(hint: str, *errors: type) -> Iterator[None]:
    """Library errors name the problem and the value; a command adds which flag to change: an
    error of one of `errors` raised inside the block gets `hint` appended."""
    try:
        yield
    except errors as e:
        raise type(e)(f"{e} {hint}") from None


# ---- the model-loading flags of the commands that use a trained run -----------------------

def add_model_args(p: argparse.ArgumentParser, vocoder: bool = True) -> None:
    """--checkpoint-dir, --checkpoint, --max-decoder-steps, --griffin-lim-iters, --verbose and
    (with `vocoder`) --vocoder-dir, --vocoder-checkpoint."""
    p.add_argument("--checkpoint-dir", required=True,
                   help="Directory train_main.py wrote (ckpt-N files, config.yaml, vocab.json).")
    p.add_argument("--checkpoint", default=None,
                   help="Which checkpoint: 'latest' (default), 'best' for best/, or a prefix "
                        "such as ckpt-200 (absolute, or inside --checkpoint-dir).")
    p.add_argument("--max-decoder-steps", type=int, default=None,
                   help="Longest decode in decoder steps (default: model.max_decoder_steps).")
    p.add_argument("--reference-statistics", choices=("on", "off"), default=None,
                   help="Map each decoded frame to the reference's mean and spread per mel band "
                        "(default: the run's model.reference_statistics; needs a run trained "
                        "with model.reference_spectrum).")
    p.add_argument("--reference-matching", type=float, default=None, metavar="SHARE",
                   help="Move each speech frame of the output mel this share of the way (0-1, "
                        "e.g. 0.5; 0 = off) toward its nearest frames of the reference "
                        "(default: the run's model.reference_matching; needs a run trained "
                        "with model.reference_spectrum).")
    p.add_argument("--griffin-lim-iters", type=int, default=32,
                   help="Griffin-Lim iterations (more = cleaner phase, slower); used without "
                        "--vocoder-dir.")
    if vocoder:
        p.add_argument("--vocoder-dir", default=None,
                       help="A vocoder (HiFi-GAN or Vocos) checkpoint directory (train_main.py "
                            "--stage vocoder); default: Griffin-Lim. The log says which ran.")
        p.add_argument("--vocoder-checkpoint", default=None,
                       help="Which vocoder checkpoint: 'best' or a prefix such as ckpt-2000. "
                            "Default: the latest in --vocoder-dir.")
    p.add_argument("--verbose", action="store_true",
                   help="Show TensorFlow's C++ start-up and log lines (hidden by default).")


def add_adaptation_args(p: argparse.ArgumentParser, what: str) -> None:
    """--adapt-steps, --adapt-learning-rate and --adapt-part
    (myxtts.inference.voice_adaptation): the model fine-tuned on `what` before it speaks in that
    voice."""
    p.add_argument("--adapt-steps", type=int, default=0,
                   help=f"Adapt the model to {what}: this many steps of fine-tuning on the "
                        f"recording and what it says, before speaking in its voice (30 "
                        f"steps widened the own-vs-other speaker gap on every voice set "
                        f"measured: docs/cloning.md). Default 0: the reference's latents "
                        f"only.")
    p.add_argument("--adapt-learning-rate", type=float, default=None,
                   help="Learning rate of --adapt-steps (default 3e-4).")
    p.add_argument("--adapt-part", choices=("all", "postnet"), default=None,
                   help="The weights --adapt-steps moves: all (default; every weight the "
                        "decode reads, the strongest voice measured) or postnet (the postnet "
                        "alone: the decode, its reading, timing and stops, stays the "
                        "checkpoint's, and a voice file can hold it).")


def check_adaptation_args(args: argparse.Namespace) -> None:
    """UsageError for --adapt-steps / --adapt-learning-rate that cannot work."""
    if args.adapt_steps < 0:
        raise UsageError(f"--adapt-steps {args.adapt_steps} must be 0 (no adaptation) or more, "
                         f"e.g. 30.")
    if args.adapt_part is not None and not args.adapt_steps:
        raise UsageError(f"--adapt-part {args.adapt_part} needs --adapt-steps (how many steps "
                         f"to adapt the model to the voice), e.g. --adapt-steps 30.")
    if args.adapt_learning_rate is not None:
        if not args.adapt_steps:
            raise UsageError("--adapt-learning-rate needs --adapt-steps (how many steps to "
                             "adapt the model to the voice), e.g. --adapt-steps 30.")
        if not args.adapt_learning_rate > 0:
            raise UsageError(f"--adapt-learning-rate {args.adapt_learning_rate} must be above "
                             f"0, e.g. 3e-4.")


def decoding_settings(args: argparse.Namespace) -> dict:
    """The decoding settings the model flags replace (checkpoint_loading.DECODING_FLAGS)."""
    statistics = args.reference_statistics
    return {"model.reference_statistics": None if statistics is None else statistics == "on",
            "model.reference_matching": args.reference_matching}


def check_model_args(args: argparse.Namespace) -> None:
    """UsageError for model-loading flags that cannot work, before TensorFlow is imported."""
    if args.max_decoder_steps is not None and args.max_decoder_steps < 1:
        raise UsageError(f"--max-decoder-steps {args.max_decoder_steps} must be 1 or more.")
    if args.reference_matching is not None and not 0 <= args.reference_matching <= 1:
        raise UsageError(f"--reference-matching {args.reference_matching} must be within 0 "
                         f"(off) and 1, e.g. 0.5.")
    if args.griffin_lim_iters < 1:
        raise UsageError(f"--griffin-lim-iters {args.griffin_lim_iters} must be 1 or more.")
    if getattr(args, "vocoder_checkpoint", None) and not args.vocoder_dir:
        raise UsageError("--vocoder-checkpoint needs --vocoder-dir (the vocoder's checkpoint "
                         "directory).")
    require_path("--checkpoint-dir", args.checkpoint_dir, "dir",
                 "the directory train_main.py wrote (its --checkpoint-dir, holding ckpt-N "
                 "files, config.yaml and vocab.json)")
    if getattr(args, "vocoder_dir", None):
        require_path("--vocoder-dir", args.vocoder_dir, "dir",
                     "the directory train_main.py --stage vocoder wrote")


def load_synthesizer(args: argparse.Namespace):
    """The myxtts.inference.synthesizer.Synthesizer the model flags name (TensorFlow is imported
    here, quietly unless --verbose)."""
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    with quiet_tensorflow_start(args.verbose):
        from myxtts.inference.checkpoint_loading import (CheckpointMismatchError,
                                                         CheckpointNotFoundError, load_checkpoint)
        from myxtts.inference.synthesizer import Synthesizer
        from myxtts.inference.vocoding import VocoderError, load_vocoder
    with flag_hint(f"(--checkpoint-dir {args.checkpoint_dir}, --checkpoint "
                   f"{args.checkpoint or 'latest'}: pass the folder train_main.py wrote and "
                   f"'latest', 'best' or a ckpt-N.)", CheckpointNotFoundError,
                   CheckpointMismatchError):
        loaded = load_checkpoint(args.checkpoint_dir, args.checkpoint, decoding_settings(args))
    vocoder_dir = getattr(args, "vocoder_dir", None)
    vocoder = None
    if vocoder_dir:
        with flag_hint(f"(--vocoder-dir {vocoder_dir}, --vocoder-checkpoint "
                       f"{args.vocoder_checkpoint or 'latest'}: pass the --checkpoint-dir of a "
                       f"`train_main.py --stage vocoder` run.)", VocoderError):
            vocoder = load_vocoder(vocoder_dir, loaded.config.data, args.vocoder_checkpoint)
    return Synthesizer(loaded, max_decoder_steps=args.max_decoder_steps,
                       griffin_lim_iterations=args.griffin_lim_iters, vocoder=vocoder)
