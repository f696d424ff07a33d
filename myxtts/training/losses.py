"""Training losses of the acoustic model, masked by true lengths, float32 under any policy.

    compute_losses(outputs, batch, training_config, step, reduction_factor) -> dict of float32
    scalars:
        "mel"                      mel loss before the postnet (training.mel_loss: l1 | l2 | l1+l2)
        "postnet"                  the same loss after the postnet
        "stop"                     stop-token BCE, positives weighted by training.stop_pos_weight
        "guided_attention"         guided-attention loss (diagonal prior) over every head of
                                   every decoder block's text attention, unweighted
        "guided_attention_weight"  its weight at `step` (linear decay to 0)
        "reading"                  model.reading_probe: the probe's CTC loss per token on
                                   the recording (trains the probe; 0 without)
        "reading_output"           the same on the postnet output, the probe's weights frozen
                                   (trains the model; 0 without)
        "objective"                mel_loss_weight * mel + postnet_loss_weight * postnet
                                   + stop_loss_weight * stop: what validation ranks checkpoints
                                   and early-stops on (it does not depend on the step)
        "total"                    objective + guided_attention_weight * guided_attention
                                   + reading_loss_weight * (reading + reading_output): the
                                   loss that is differentiated

`outputs` is XTTSModel's teacher-forced output dict, `batch` the batch of docs/architecture.md.
Under a tf.distribute strategy each replica sees a slice of the global batch, and a mean of
per-replica means would weigh a frame of a short slice more than one of a long slice. So the
replica calls `loss_counts` (how many values each loss averages over in its slice: valid mel
values, stop frames, valid attention rows; from the batch alone, so before the forward pass),
the strategy sums them over the replicas, and
`compute_losses(..., counts=global counts)` divides each replica's SUM by the global count: the
replicas' losses then add up to the one-device loss of the global batch, and so do their
gradients. Without `counts` the losses are the batch's own means, computed as before.

Stop targets are per frame: the last valid frame (mel_lengths-1) and the padding after it are
positive, the earlier frames negative; a bucket's padding is "after the end", so every item
whose length is below its bucket's gives the stop head several positives to learn from.
"""

from __future__ import annotations

from typing import Dict, Optional

import tensorflow as tf

from myxtts.config import TrainingConfig


def _masked_mean(values: tf.Tensor, mask: tf.Tensor, count=None) -> tf.Tensor:
    """Mean of `values` over positions where `mask` (float32, broadcastable) is 1; divided by
    `count` instead of the mask's sum when given (the global batch's count)."""
    mask = tf.broadcast_to(mask, tf.shape(values))
    if count is not None:
        return tf.reduce_sum(values * mask) / tf.maximum(count, 1.0)
    return tf.reduce_sum(values * mask) / tf.maximum(tf.reduce_sum(mask), 1.0)


def mel_loss(prediction: tf.Tensor, target: tf.Tensor, frame_mask: tf.Tensor,
             kind: str, count=None) -> tf.Tensor:
    """Masked l1 | l2 | l1+l2 over valid frames and all mel bands."""
    error = tf.cast(prediction, tf.float32) - tf.cast(target, tf.float32)
    mask = frame_mask[..., None]
    terms = {"l1": lambda: _masked_mean(tf.abs(error), mask, count),
             "l2": lambda: _masked_mean(tf.square(error), mask, count)}
    if kind == "l1+l2":
        return terms["l1"]() + terms["l2"]()
    return terms[kind]()


def stop_loss(stop_logits: tf.Tensor, mel_lengths: tf.Tensor, pos_weight: float,
              count=None) -> tf.Tensor:
    """Per-frame BCE over every frame of the batch: frames >= mel_lengths-1 are positive
    (weighted by pos_weight), earlier ones negative."""
    num_frames = tf.shape(stop_logits)[1]
    labels = tf.cast(tf.range(num_frames)[None, :] >= mel_lengths[:, None] - 1, tf.float32)
    bce = tf.nn.weighted_cross_entropy_with_logits(labels, tf.cast(stop_logits, tf.float32),
                                                   pos_weight)
    if count is not None:
        return tf.reduce_sum(bce) / tf.maximum(count, 1.0)
    return tf.reduce_mean(bce)


def _step_lengths(mel_lengths: tf.Tensor, reduction_factor: int) -> tf.Tensor:
    return (mel_lengths + reduction_factor - 1) // reduction_factor


def loss_counts(batch: Dict[str, tf.Tensor], reduction_factor: int,
                attention_heads: int) -> Dict[str, tf.Tensor]:
    """How many values each loss of `compute_losses` averages over in this batch (float32),
    from the batch alone (a strategy sums them over the replicas BEFORE the forward pass):
    "mel" (valid frames x mel bands, also the postnet's), "stop" (every frame of every item),
    "attention" (valid decoder steps x `attention_heads`, the text_attention heads of all
    decoder blocks), "items" (the batch's items)."""
    mel_lengths = tf.cast(batch["mel_lengths"], tf.int32)
    shape = tf.shape(batch["mel"])
    valid = tf.reduce_sum(tf.cast(tf.sequence_mask(mel_lengths, shape[1]), tf.float32))
    steps = tf.reduce_sum(tf.cast(tf.sequence_mask(
        _step_lengths(mel_lengths, reduction_factor),
        (shape[1] + reduction_factor - 1) // reduction_factor), tf.float32))
    return {"mel": valid * tf.cast(shape[2], tf.float32),
            "stop": tf.cast(shape[0] * shape[1], tf.float32),
            "attention": steps * float(attention_heads),
            "items": tf.cast(shape[0], tf.float32)}


def guided_attention_loss(attention: tf.Tensor, token_lengths: tf.Tensor,
                          mel_lengths: tf.Tensor, reduction_factor: int,
                          sigma: float, count=None) -> tf.Tensor:
    """attention [B, K, S, T] (K heads, any number) or [B, S, T]. For every valid decoder step
    s of item b, the attention weight that lies off its diagonal,
    sum_n A[b, k, s, n] * (1 - exp(-(n/N_b - s/S_b)^2 / (2 sigma^2))), averaged over heads and
    valid steps: 0 when every head reads the text along the diagonal, near 1 when all weight is
    far from it. (Summing over tokens keeps the term's size independent of the text length.)
    """
    attention = tf.cast(attention, tf.float32)
    if attention.shape.rank == 3:
        attention = attention[:, None]
    steps, text = tf.shape(attention)[2], tf.shape(attention)[3]
    step_lengths = _step_lengths(mel_lengths, reduction_factor)
    s = tf.cast(tf.range(steps), tf.float32)[None, :, None] / tf.cast(
        step_lengths, tf.float32)[:, None, None]
    n = tf.cast(tf.range(text), tf.float32)[None, None, :] / tf.cast(
        token_lengths, tf.float32)[:, None, None]
    penalty = 1.0 - tf.exp(-tf.square(n - s) / (2.0 * sigma ** 2))
    penalty *= tf.cast(tf.sequence_mask(token_lengths, text), tf.float32)[:, None, :]
    off_diagonal = tf.reduce_sum(attention * penalty[:, None], axis=-1)  # [B, K, S]
    valid = tf.cast(tf.sequence_mask(step_lengths, steps), tf.float32)[:, None, :]
    return _masked_mean(off_diagonal, valid, count)


def guided_attention_weight(config: TrainingConfig, step) -> tf.Tensor:
    """training.guided_attention_weight decaying linearly to 0 over
    guided_attention_decay_steps (0 = no decay)."""
    weight = tf.constant(config.guided_attention_weight, tf.float32)
    if config.guided_attention_decay_steps <= 0:
        return weight
    progress = tf.cast(step, tf.float32) / float(config.guided_attention_decay_steps)
    return weight * tf.maximum(0.0, 1.0 - progress)


def reading_loss(logits: tf.Tensor, tokens: tf.Tensor, token_lengths: tf.Tensor,
                 mel_lengths: tf.Tensor, dense: bool, count=None) -> tf.Tensor:
    """CTC loss of the reading probe's logits [B, T_mel, vocab] against the tokens (id 0, the
    padding, is the blank), per token: each item's negative log-likelihood over its token
    count, averaged over items. `dense` uses TensorFlow's CTC in plain ops, which XLA compiles;
    otherwise its CTC kernel (sparse labels), 23x faster on 2 CPU cores
    (benchmarks/bench_reading_loss.py). An item with too few frames for its tokens (CTC needs
    one frame a token and one between repeats) is read only as far as its frames allow, never
    an infinite loss."""
    mel_lengths = tf.cast(mel_lengths, tf.int32)
    token_lengths = tf.minimum(tf.cast(token_lengths, tf.int32), (mel_lengths - 1) // 2)
    tokens = tf.cast(tokens, tf.int32)
    if dense:
        per_item = tf.nn.ctc_loss(tokens, logits, token_lengths, mel_lengths,
                                  logits_time_major=False, blank_index=0)
    else:
        labels = tf.sparse.from_dense(tf.where(
            tf.sequence_mask(token_lengths, tf.shape(tokens)[1]), tokens, 0))
        per_item = tf.nn.ctc_loss(labels, logits, None, mel_lengths, logits_time_major=False,
                                  blank_index=0)
    per_item = per_item / tf.cast(tf.maximum(token_lengths, 1), tf.float32)
    if count is not None:
        return tf.reduce_sum(per_item) / tf.maximum(count, 1.0)
    return tf.reduce_mean(per_item)


def compute_losses(outputs: Dict[str, tf.Tensor], batch: Dict[str, tf.Tensor],
                   training_config: TrainingConfig, step,
                   reduction_factor: int,
                   counts: Optional[Dict[str, tf.Tensor]] = None) -> Dict[str, tf.Tensor]:
    """All training losses; see the module docstring for the keys. `counts` (as from
    `loss_counts`, summed over a strategy's replicas) replaces this batch's own counts."""
    c = training_config
    counts = counts or {}
    mel_lengths = tf.cast(batch["mel_lengths"], tf.int32)
    token_lengths = tf.cast(batch["token_lengths"], tf.int32)
    target = batch["mel"]
    frames = tf.cast(tf.sequence_mask(mel_lengths, tf.shape(target)[1]), tf.float32)
    losses = {
        "mel": mel_loss(outputs["mel_before"], target, frames, c.mel_loss, counts.get("mel")),
        "postnet": mel_loss(outputs["mel_after"], target, frames, c.mel_loss,
                            counts.get("mel")),
        "stop": stop_loss(outputs["stop_logits"], mel_lengths, c.stop_pos_weight,
                          counts.get("stop")),
        "guided_attention": guided_attention_loss(outputs["text_attention"], token_lengths,
                                                  mel_lengths, reduction_factor,
                                                  c.guided_attention_sigma,
                                                  counts.get("attention")),
        "guided_attention_weight": guided_attention_weight(c, step),
    }
    if "reading_logits" in outputs:
        for key in ("reading", "reading_output"):
            logits = outputs["reading_logits" if key == "reading" else "reading_logits_output"]
            losses[key] = reading_loss(logits, batch["tokens"], token_lengths, mel_lengths,
                                       c.xla, counts.get("items"))
    else:
        losses["reading"] = losses["reading_output"] = tf.constant(0.0)
    losses["objective"] = (c.mel_loss_weight * losses["mel"]
                           + c.postnet_loss_weight * losses["postnet"]
                           + c.stop_loss_weight * losses["stop"])
    losses["total"] = (losses["objective"]
                       + losses["guided_attention_weight"] * losses["guided_attention"]
                       + c.reading_loss_weight * (losses["reading"] + losses["reading_output"]))
    return losses
