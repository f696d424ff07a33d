"""--init-from once the model exists, and what trains: training.freeze, pretrained_lr_scale.

`copy_source_weights` copies a source run's model weights into a freshly built model of the same
architecture. Only the embedding tables may be larger in the new model (characters or languages
the source never saw, myxtts.source_run): their source rows are copied and each new row starts at
the mean of the source rows (for tokens without the padding row), i.e. "an average character /
language" rather than noise the trained layers after it never saw.

`training_plan` marks the variables under training.freeze as not trainable (so the optimizer,
built afterwards, holds no slots for them) and gives TrainStep the update scales that keep the
source rows of a frozen embedding table unchanged while its new rows train, and that slow the
source weights down to training.pretrained_lr_scale.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Dict, List, Optional, Sequence

import keras
import numpy as np
import tensorflow as tf

from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.training")

_DIFFERENT = ("The model does not have the source run's architecture ({}): under --init-from the "
              "new run's model fields must come from the source's config.yaml "
              "(myxtts.source_run.warm_start_config does that).")


@dataclasses.dataclass(frozen=True)
class SourceRows:
    """Rows of the embedding tables that hold the source run's weights (the rest are new)."""

    tokens: int
    languages: int

    @classmethod
    def of(cls, source) -> "SourceRows":
        """All rows of a source run (myxtts.source_run.Source)."""
        return cls(source.tokenizer.vocab_size, len(source.config.data.languages))


def embedding_tables(model: keras.Model) -> Dict[str, keras.Variable]:
    """{"tokens": token embedding table, "languages": language embedding table}."""
    encoder = model.text_encoder
    return {"tokens": encoder.token_embedding.embeddings,
            "languages": encoder.language_embedding.embeddings}


def _part_path(variable) -> str:
    """The variable's path below the model, e.g. text_encoder/token_embedding/embeddings."""
    return variable.path.split("/", 1)[1]


def copy_source_weights(source: keras.Model, model: keras.Model) -> Dict[str, List[int]]:
    """Assigns every weight of `source` to `model` (same architecture); grows the embedding
    tables. Returns {"tokens": [first new row, rows], "languages": [...]} for the grown ones."""
    pairs = list(zip(source.weights, model.weights))
    if len(source.weights) != len(model.weights) or any(
            _part_path(a) != _part_path(b) for a, b in pairs):
        raise MyXTTSError(_DIFFERENT.format(f"{len(source.weights)} weights in the source, "
                                            f"{len(model.weights)} here"))
    tables = {id(v): name for name, v in embedding_tables(model).items()}
    grown = {}
    for old, new in pairs:
        value = old.numpy()
        if tuple(value.shape) != tuple(new.shape):
            name = tables.get(id(new))
            if name is None or value.shape[1:] != tuple(new.shape[1:]) or \
                    value.shape[0] > new.shape[0]:
                raise MyXTTSError(_DIFFERENT.format(f"{new.path} is {tuple(new.shape)} here, "
                                                    f"{tuple(value.shape)} in the source"))
            # Token row 0 is padding: not part of the mean of real characters.
            first = 1 if name == "tokens" and value.shape[0] > 1 else 0
            mean = value[first:].mean(axis=0, keepdims=True)
            value = np.concatenate([value, np.repeat(mean, new.shape[0] - value.shape[0], 0)])
            grown[name] = [old.shape[0], int(new.shape[0])]
        new.assign(value)
    return grown


def _matches(variable, part: str) -> bool:
    path = _part_path(variable)
    return path == part or path.startswith(part + "/")


def _layers_under(model: keras.Model, part: str) -> List[str]:
    """Names of the layers directly under `part`'s first segment (for error messages)."""
    top = getattr(model, part.split("/")[0])
    return [layer.name for layer in top._flatten_layers(  # pylint: disable=protected-access
        include_self=False, recursive=False)]


def training_plan(model: keras.Model, freeze: Sequence[str], pretrained_lr_scale: float,
                  rows: Optional[SourceRows]) -> List:
    """Applies training.freeze to `model` (call before the optimizer is built) and returns the
    update scales for TrainStep, one per trainable variable (None = full update).

    `rows` is None when the run did not start from another run: nothing is "pre-trained", so
    pretrained_lr_scale does not apply and frozen tables are frozen whole."""
    tables = {id(v): getattr(rows, name) for name, v in embedding_tables(model).items()} \
        if rows else {}
    for part in freeze:
        if not any(_matches(v, part) for v in model.weights):
            raise MyXTTSError(
                f"training.freeze: {part!r} names no layer of the model. Under "
                f"{part.split('/')[0]}: {', '.join(_layers_under(model, part))}.")
    frozen, partly = [], []
    for variable in model.weights:
        if not any(_matches(variable, part) for part in freeze):
            continue
        source_rows = tables.get(id(variable))
        if source_rows is not None and source_rows < variable.shape[0]:
            partly.append((variable, source_rows))
        else:
            variable.trainable = False
            frozen.append(variable)
    if freeze:
        logger.info("training.freeze (%s): %d variables with %s weights are kept unchanged and "
                    "left out of the optimizer%s.", ", ".join(freeze), len(frozen),
                    f"{sum(int(np.prod(v.shape)) for v in frozen):,}",
                    "".join(f"; {_part_path(v)} trains only its {int(v.shape[0]) - n} new "
                            f"row(s), its {n} source row(s) stay" for v, n in partly))
    scale = pretrained_lr_scale if rows else 1.0
    if scale != 1.0:
        logger.info("Source weights train at %g x the learning rate, rows added for new "
                    "characters or languages at the full rate (training.pretrained_lr_scale).",
                    scale)
    partly_rows = {id(v): n for v, n in partly}
    scales = []
    for variable in model.trainable_variables:
        source_rows = partly_rows.get(id(variable), tables.get(id(variable)))
        old_rate = 0.0 if id(variable) in partly_rows else scale
        if source_rows is not None and old_rate != 1.0:
            new_row = tf.range(variable.shape[0])[:, None] >= source_rows
            scales.append(tf.where(new_row, 1.0, old_rate))
        else:
            scales.append(None if old_rate == 1.0 else old_rate)
    return scales
