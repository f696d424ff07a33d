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
from typing import Optional, Sequence

from myxtts.cli import add_model_args, check_model_args, entry_point, quiet_tensorflow_start


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-export", description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--export-dir", default="models/myxtts",
                   help="The model's folder; versions go in numbered subfolders, and "
                        "models.config is written to its parent.")
    p.add_argument("--model-name", default=None,
                   help="Name in models.config and in request URLs (default: the export "
                        "folder's name).")
    p.add_argument("--serving-base-path", default="/models",
                   help="Where TF Serving sees the export folder's parent (the container "
                        "mount point); models.config gets <this>/<model name>.")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_model_args(args)
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    with quiet_tensorflow_start(args.verbose):
        from myxtts.exporters.registry import exporter
        export = exporter("tf_serving")
    result = export(args.checkpoint_dir, args.export_dir,
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


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
