"""Checkpoint → versioned SavedModel for TF Serving (or on-device parts), on the command line.

    python -m myxtts.export --checkpoint-dir runs/tiny --export-dir models/myxtts
    python -m myxtts.export --checkpoint-dir runs/tiny --vocoder-dir runs/vocoder \
        --export-dir models/myxtts          # vocoder audio + a `vocode` signature
    myxtts-export --checkpoint-dir runs/tiny --export-dir models/myxtts --checkpoint best
    myxtts-export --format tflite --checkpoint-dir runs/tiny --vocoder-dir runs/vocoder \
        --export-dir models/myxtts-tflite [--quantize fp16|int8] [--decode-rows 4]  # LiteRT
    myxtts-export --format onnx --checkpoint-dir runs/tiny --export-dir models/myxtts-onnx

Writes <export dir>/<max existing version + 1>/; a SavedModel also adds/updates its name in
models/models.config. docs/serving.md shows how to serve a SavedModel, docs/edge.md how to run
the on-device parts (python -m myxtts.lite, no TensorFlow).
"""

from __future__ import annotations

import argparse
from typing import Optional, Sequence

from myxtts.cli import (UsageError, add_model_args, check_model_args, decoding_settings,
                        entry_point, quiet_tensorflow_start)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-export", description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--format", default="tf_serving", choices=("tf_serving", "tflite", "onnx"),
                   help="tf_serving: a SavedModel (TF Serving, myxtts-serve); tflite / onnx: "
                        "static-shape parts for the TensorFlow-free runtime myxtts.lite.")
    p.add_argument("--quantize", default="none", choices=("none", "fp16", "int8"),
                   help="--format tflite: store weights as float16, or int8 (dynamic range).")
    p.add_argument("--decode-rows", type=int, default=1,
                   help="--format tflite / onnx: sentences the parts decode together (1-16), "
                        "the most a batch of myxtts-serve's engine and of a text's sentences "
                        "holds; the one-row parts are kept for a lone sentence (docs/edge.md).")
    p.add_argument("--export-dir", default=None,
                   help="The model's folder; versions go in numbered subfolders (default "
                        "models/myxtts, models/myxtts-tflite or models/myxtts-onnx); a "
                        "SavedModel's models.config is written to its parent.")
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
    if args.quantize != "none" and args.format != "tflite":
        raise UsageError(f"--quantize {args.quantize} is for --format tflite.")
    if args.decode_rows != 1 and args.format == "tf_serving":
        raise UsageError("--decode-rows is for --format tflite or onnx: a SavedModel's "
                         "signatures take any number of rows.")
    if not 1 <= args.decode_rows <= 16:
        raise UsageError(f"--decode-rows {args.decode_rows}: give 1 to 16 rows.")
    export_dir = args.export_dir or {"tf_serving": "models/myxtts",
                                     "tflite": "models/myxtts-tflite",
                                     "onnx": "models/myxtts-onnx"}[args.format]
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    with quiet_tensorflow_start(args.verbose):
        from myxtts.exporters.registry import exporter
        export = exporter(args.format)
    common = dict(checkpoint=args.checkpoint, max_decoder_steps=args.max_decoder_steps,
                  vocoder_dir=args.vocoder_dir, vocoder_checkpoint=args.vocoder_checkpoint,
                  decoding=decoding_settings(args))
    if args.format != "tf_serving":
        result = export(args.checkpoint_dir, export_dir, quantize=args.quantize,
                        decode_rows=args.decode_rows, **common)
        print(f"Exported version {result.version} to {result.path} in {result.seconds:.1f} s")
        print(f"parts: {', '.join(result.parts)} ({result.bytes / 1e6:.1f} MB)")
        print(f"run it: python -m myxtts.lite --model {export_dir} --voice VOICE.npz --text "
              f"\"Hello.\" --output hello.wav")
        return 0
    result = export(args.checkpoint_dir, export_dir,
                    griffin_lim_iterations=args.griffin_lim_iters,
                    model_name=args.model_name, serving_base_path=args.serving_base_path,
                    **common)
    print(f"Exported version {result.version} to {result.path} in {result.seconds:.1f} s")
    print(f"signatures: {', '.join(result.signatures)}")
    print(f"TF Serving config: {result.models_config}")
    return 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
