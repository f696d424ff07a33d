"""Child process of tests/test_export.py: streams from an exported SavedModel in a fresh process
(myxtts.inference.exported_model, no checkpoint), as a serving process would.

    python -m tests.children.stream_export EXPORT_DIR INPUTS.npz OUTPUTS.npz

INPUTS.npz: ids [N] int32, latents [1, L, d] float32, text [] str. OUTPUTS.npz: tokens (the
joined chunks of the token stream), tokens_chunks (their lengths), text (the joined stream of
the text, sentence by sentence).
"""

import sys

import numpy as np

from myxtts.inference.exported_model import ExportedModel

CHUNKS = {"first_chunk_steps": 2, "chunk_steps": 2}


def main(export_dir: str, inputs_path: str, outputs_path: str) -> None:
    inputs = np.load(inputs_path, allow_pickle=False)
    model = ExportedModel(export_dir)
    chunks = list(model.stream_sentences([inputs["ids"].tolist()], 0, inputs["latents"],
                                          **CHUNKS))
    text = list(model.stream(str(inputs["text"]), "en", inputs["latents"], **CHUNKS))
    np.savez(outputs_path, tokens=np.concatenate(chunks),
             tokens_chunks=np.array([len(c) for c in chunks]), text=np.concatenate(text))


if __name__ == "__main__":
    main(*sys.argv[1:])
