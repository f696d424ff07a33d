"""Checkpoint → versioned SavedModel for TF Serving, on the command line.

    python -m myxtts.export --checkpoint-dir runs/tiny --export-dir models/myxtts
    python -m myxtts.export --checkpoint-dir runs/tiny --vocoder-dir runs/vocoder \
        --export-dir models/myxtts          # vocoder audio + a `vocode` signature
    myxtts-export --checkpoint-dir runs/tiny --export-dir models/myxtts --checkpoint best

Writes models/myxtts/<max existing version + 1>/ and adds/updates "myxtts" in
models/models.config. docs/serving.md shows how to serve and call it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from myxtts.cli import quiet_tensorflow_start, require_path, run_guarded, setup_logging


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-export", description=__doc__.split("\n")[0])
    p.add_argument("--checkpoint-dir", required=True,
                   help="Directory train_main.py wrote (ckpt-N files, config.yaml, vocab.json).")
    p.add_argument("--checkpoint", default=None,
                   help="A prefix such as ckpt-200, or 'best'. Default: the latest.")
    p.add_argument("--export-dir", default="models/myxtts",
                   help="The model's folder; versions go in numbered subfolders, and "
                        "models.config is written to its parent.")
    p.add_argument("--model-name", default=None,
                   help="Name in models.config and in request URLs (default: the export "
                        "folder's name).")
    p.add_argument("--serving-base-path", default="/models",
                   help="Where TF Serving sees the export folder's parent (the container "
                        "mount point); models.config gets <this>/<model name>.")
    p.add_argument("--max-decoder-steps", type=int, default=None,
                   help="Longest decode the exported graph runs (default: "
                        "model.max_decoder_steps).")
    p.add_argument("--griffin-lim-iters", type=int, default=32,
                   help="Griffin-Lim iterations in the exported graph (without --vocoder-dir).")
    p.add_argument("--vocoder-dir", default=None,
                   help="A vocoder (HiFi-GAN or Vocos) checkpoint directory (train_main.py "
                        "--stage vocoder): serving_default then returns its waveform, and a "
                        "'vocode' signature (mel in, waveform out) is added. Default: "
                        "Griffin-Lim.")
    p.add_argument("--vocoder-checkpoint", default=None,
                   help="Which vocoder checkpoint: 'best' or a prefix. Default: the latest.")
    p.add_argument("--verbose", action="store_true",
                   help="Show TensorFlow's C++ start-up and log lines (hidden by default).")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    require_path("--checkpoint-dir", args.checkpoint_dir, "dir",
                 "the directory train_main.py wrote (its --checkpoint-dir)")
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    with quiet_tensorflow_start(args.verbose):
        from myxtts.inference.export import export_saved_model
    result = export_saved_model(args.checkpoint_dir, args.export_dir,
                                checkpoint=args.checkpoint,
                                max_decoder_steps=args.max_decoder_steps,
                                griffin_lim_iterations=args.griffin_lim_iters,
                                vocoder_dir=args.vocoder_dir,
                                vocoder_checkpoint=args.vocoder_checkpoint,
                                model_name=args.model_name,
                                serving_base_path=args.serving_base_path)
    print(f"Exported version {result.version} to {result.path} in {result.seconds:.1f} s")
    print(f"signatures: {', '.join(result.signatures)}")
    print(f"TF Serving config: {result.models_config}")
    return 0


def guarded_main(argv: Optional[Sequence[str]] = None) -> int:
    """`main` with logging set up and user-fixable problems printed as one paragraph (exit 2)."""
    setup_logging()
    return run_guarded(main, argv)


def run() -> None:
    """Console-script entry point (myxtts-export)."""
    sys.exit(guarded_main())


if __name__ == "__main__":
    run()
