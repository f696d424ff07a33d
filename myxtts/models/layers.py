"""Attention and transformer building blocks shared by every part of the acoustic model.

Mask convention (the only one in myxtts): a **boolean** mask where **True = may attend**,
broadcastable to [batch, heads, queries, keys]. Helpers below build every mask the model needs
(`length_mask`, `key_padding_mask`, `causal_mask`); nothing else creates masks. Additive
masks are never used, so there is no sign to get wrong.

Why not `keras.ops.dot_product_attention`: it uses the same boolean convention, but it does not
return the attention weights (the decoder's text cross-attention weights are the alignments that
the guided-attention loss and the plots need) and under mixed precision its softmax runs in the
compute dtype. `attend` computes the logits from pre-scaled q in the compute dtype (tensor cores),
then masks and normalises in float32.

Dropout inside blocks is *stateless* (`tf.nn.experimental.stateless_dropout`) with a seed passed
in by the caller, so a block recomputed by `tf.recompute_grad` draws the same masks as in the
forward pass.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Dict, Iterator, Optional, Tuple

import keras
import tensorflow as tf

# Logit for a masked position. Finite (not -inf) so a row with every key masked gives uniform
# weights instead of NaN; exp(-1e9 - max) is exactly 0 in float32, so masked keys get weight 0.
_MASKED_LOGIT = -1e9


# ---- masks ---------------------------------------------------------------------------------
def length_mask(lengths: tf.Tensor, max_len) -> tf.Tensor:
    """[B, T] bool, True at positions < lengths[b]."""
    return tf.sequence_mask(lengths, max_len)


def key_padding_mask(lengths: tf.Tensor, max_len) -> tf.Tensor:
    """[B, 1, 1, T_keys] bool: every query may attend to the valid keys of its item."""
    return length_mask(lengths, max_len)[:, None, None, :]


def causal_mask(length) -> tf.Tensor:
    """[1, 1, T, T] bool, True where key position <= query position."""
    ones = tf.ones([length, length], tf.bool)
    return tf.linalg.band_part(ones, -1, 0)[None, None]


def window_mask(peaks: tf.Tensor, behind: int, ahead: int, max_len) -> tf.Tensor:
    """[B, 1, 1, T_keys] bool: key n may be attended when peaks[b] - behind <= n <= peaks[b] +
    ahead (the monotonic decode window around the previous step's attention peak)."""
    n = tf.range(max_len)[None, :]
    peaks = tf.cast(peaks, tf.int32)[:, None]
    return ((n >= peaks - behind) & (n <= peaks + ahead))[:, None, None, :]


def sinusoidal_encoding(positions: tf.Tensor, dim: int) -> tf.Tensor:
    """Sinusoidal position encoding [..., dim] (float32) for integer positions of any length."""
    positions = tf.cast(positions, tf.float32)[..., None]
    half = dim // 2
    freqs = tf.exp(-math.log(10000.0) * tf.range(half, dtype=tf.float32) / max(half, 1))
    angles = positions * freqs
    enc = tf.concat([tf.sin(angles), tf.cos(angles)], axis=-1)
    if dim % 2:
        enc = tf.pad(enc, [[0, 0]] * (len(enc.shape) - 1) + [[0, 1]])
    return enc


# ---- attention -----------------------------------------------------------------------------
def attention_logits(q: tf.Tensor, k: tf.Tensor, mask: Optional[tf.Tensor]) -> tf.Tensor:
    """Masked logits [B, H, Tq, Tk] (float32) of scaled dot-product attention.

    q: [B, H, Tq, Dh]; k: [B, H, Tk, Dh] (compute dtype); mask: bool broadcastable to
    [B, H, Tq, Tk], True = may attend, or None (attend everywhere).
    """
    scale = tf.cast(1.0 / math.sqrt(q.shape[-1]), q.dtype)
    logits = tf.cast(tf.matmul(q * scale, k, transpose_b=True), tf.float32)
    if mask is not None:
        logits = tf.where(mask, logits, tf.constant(_MASKED_LOGIT, tf.float32))
    return logits


def attend(q: tf.Tensor, k: tf.Tensor, v: tf.Tensor,
           mask: Optional[tf.Tensor]) -> Tuple[tf.Tensor, tf.Tensor]:
    """Scaled dot-product attention, the single implementation used by the whole model.
    Returns (output [B, H, Tq, Dh] in v's dtype, weights [B, H, Tq, Tk] float32); arguments as
    in `attention_logits`."""
    weights = tf.nn.softmax(attention_logits(q, k, mask), axis=-1)
    return tf.matmul(tf.cast(weights, v.dtype), v), weights


# ---- forward attention (monotonic reading) -------------------------------------------------
# Forward attention (Zhang et al., 2018): the weights of decoder step s are the content weights
# y_s times a prior that only lets the attention of step s-1 stay or move forward by up to
# FORWARD_JUMP tokens, renormalised. The text is read in order by construction; the content
# weights decide when to move on. Computed in log space (log-sum-exp of the shifted previous
# weights + log-softmax of the logits, renormalised): no division by a sum that can underflow,
# so gradients through the recursion stay finite.
FORWARD_JUMP = 2
_IMPOSSIBLE = -1e4  # log weight of a token the reading cannot be at (exp() is exactly 0)


def forward_initial_state(batch, heads: int, keys) -> tf.Tensor:
    """Log weights [B, H, T_keys] float32 of "all attention on the first token"."""
    first = tf.one_hot(0, keys, on_value=0.0, off_value=_IMPOSSIBLE, dtype=tf.float32)
    return tf.tile(first[None, None], [batch, heads, 1])


def forward_moves(previous: tf.Tensor) -> tf.Tensor:
    """previous [..., T]: log weights of step s-1 → log weight [..., T] of reaching each token
    at step s by staying or moving forward by up to FORWARD_JUMP tokens (unnormalised)."""
    pad = [[0, 0]] * (len(previous.shape) - 1)
    moves = [previous] + [
        tf.pad(previous, pad + [[jump, 0]], constant_values=_IMPOSSIBLE)[..., :-jump]
        for jump in range(1, FORWARD_JUMP + 1)]
    return tf.reduce_logsumexp(tf.stack(moves), axis=0)


def forward_step(previous: tf.Tensor, logits: tf.Tensor) -> tf.Tensor:
    """previous [B, H, T]: step s-1's forward log weights; logits [B, H, T]: step s's masked
    attention logits → step s's forward log weights [B, H, T] (exp() sums to 1)."""
    joint = forward_moves(previous) + tf.nn.log_softmax(logits, axis=-1)
    return tf.maximum(tf.nn.log_softmax(joint, axis=-1), _IMPOSSIBLE)


def forward_weights(logits: tf.Tensor) -> tf.Tensor:
    """Masked logits of all steps [B, H, S, T] → forward attention weights [B, H, S, T]: a scan
    over the S steps (elementwise work only; the expensive attention stays parallel)."""
    shape = tf.shape(logits)
    initial = forward_initial_state(shape[0], logits.shape[1], shape[3])
    steps = tf.scan(forward_step, tf.transpose(logits, [2, 0, 1, 3]), initializer=initial)
    return tf.exp(tf.transpose(steps, [1, 2, 0, 3]))


def stateless_dropout(x: tf.Tensor, rate: float, seed: Optional[tf.Tensor]) -> tf.Tensor:
    """Dropout keyed by `seed` ([2] int32); identity when rate == 0 or seed is None (inference)."""
    if seed is None or rate <= 0.0:
        return x
    return tf.nn.experimental.stateless_dropout(x, rate=rate, seed=seed)


def fold_seed(seed: Optional[tf.Tensor], index: int) -> Optional[tf.Tensor]:
    """A distinct, deterministic seed for sub-layer `index` (None stays None)."""
    if seed is None:
        return None
    return tf.random.experimental.stateless_fold_in(seed, index)


def _length(x: tf.Tensor, axis: int):
    """Static size of an axis when known (one decode step: 1), else dynamic; static sizes keep
    shape ops out of the per-step decode graph."""
    return x.shape[axis] if x.shape[axis] is not None else tf.shape(x)[axis]


def in_xla_context() -> bool:
    """True while tracing a function XLA compiles (tf.function(jit_compile=True)); the decode
    buffers below need a different write op there. TensorFlow's own TensorArray makes the same
    check with this helper."""
    from tensorflow.python.ops import control_flow_util  # no public equivalent
    return control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


_STATIC_BLOCKS = []  # open static_shapes() blocks


@contextlib.contextmanager
def static_shapes() -> Iterator[None]:
    """Functions traced inside the block take the static-shape path XLA takes (scatter writes
    into full-size decode buffers, masks instead of slices): the on-device exporters'
    graphs (myxtts.exporters.edge), whose runtimes want static shapes and lack InplaceUpdate."""
    _STATIC_BLOCKS.append(True)
    try:
        yield
    finally:
        _STATIC_BLOCKS.pop()


def in_static_context() -> bool:
    """True while tracing for XLA (in_xla_context) or inside static_shapes()."""
    return bool(_STATIC_BLOCKS) or in_xla_context()


# ---- decode buffers ------------------------------------------------------------------------
# A decode buffer is slot-major, [S, ...]: slot s holds what decode step s produced. Writing a
# step costs the same whatever S is: under XLA a scatter is updated in place; in a plain graph
# TensorFlow copies a scattered loop variable every step, so the graph path uses InplaceUpdate
# (which writes into its input) on a buffer of its own, created by `slot_buffer` in the same
# call (`Empty` is never constant-folded or shared between buffers).
def slot_buffer(slots: int, shape, dtype) -> tf.Tensor:
    """A new zero buffer [slots, *shape] for `write_slot`; call it once per buffer."""
    shape = tf.concat([[slots], tf.cast(shape, tf.int32)], axis=0)
    if in_static_context():
        return tf.zeros(shape, dtype)
    return tf.raw_ops.Empty(shape=shape, dtype=dtype, init=True)


def write_slot(buffer: tf.Tensor, position, value: tf.Tensor) -> tf.Tensor:
    """buffer [S, ...] from `slot_buffer` with slot `position` (scalar int32) set to value [...].
    The input buffer must not be used after this call (the graph path writes into it)."""
    if in_static_context():
        # XLA's DynamicUpdateSlice: in place under XLA, and LiteRT's DYNAMIC_UPDATE_SLICE
        # copies the buffer once where tensor_scatter_nd_update's lowering (SCATTER_ND into
        # zeros, then SELECT_V2 over the whole buffer) made three passes: 0.039 against 0.145 ms
        # for the cloning recipe's ten buffers a step.
        from tensorflow.compiler.tf2xla.python import xla  # no public equivalent
        start = tf.stack([tf.cast(position, tf.int32)] + [0] * (buffer.shape.rank - 1))
        return xla.dynamic_update_slice(buffer, tf.expand_dims(value, 0), start)
    return tf.raw_ops.InplaceUpdate(x=buffer, i=[position], v=tf.expand_dims(value, 0))


def written_slots(buffer: tf.Tensor, position) -> tf.Tensor:
    """Slots 0..position of a decode buffer, for attending over them. A plain graph takes only
    those slots (a slice along the slot axis is a view, and the work of a step grows with the
    position, not with S); XLA needs static shapes and takes all S slots (mask the rest)."""
    if in_static_context():
        return buffer
    return buffer[:position + 1]


# ---- one decode step on weights read once ---------------------------------------------------
# In a plain graph every op of the while-loop body is dispatched again at every decode step, and
# a Keras layer call reads its variables and reshapes its weights each time (a LayerNormalization
# is ~20 ops). The decode therefore reads every weight once, before its loop (`*_weights` below;
# the body captures the tensors), and runs a step as [B, ...] rows on those tensors with the
# same arithmetic as the layers.
def dense_weights(*layers: keras.layers.Dense) -> Tuple[tf.Tensor, tf.Tensor]:
    """(kernel, bias) of Dense layers without activation, side by side (one matmul computes
    all their outputs), in the layers' compute dtype."""
    dtype = layers[0].compute_dtype
    kernel = tf.concat([tf.cast(tf.convert_to_tensor(l.kernel), dtype) for l in layers], axis=1)
    bias = tf.concat([tf.cast(tf.convert_to_tensor(l.bias), dtype) for l in layers], axis=0)
    return kernel, bias


def apply_dense(x: tf.Tensor, weights: Tuple[tf.Tensor, tf.Tensor]) -> tf.Tensor:
    """x [B, d_in] → [B, d_out] with `dense_weights`."""
    kernel, bias = weights
    return tf.nn.bias_add(tf.matmul(tf.cast(x, kernel.dtype), kernel), bias)


def norm_weights(layer: keras.layers.LayerNormalization):
    """(gamma, beta, epsilon, compute dtype) of a LayerNormalization over the last axis."""
    return (tf.convert_to_tensor(layer.gamma, tf.float32),
            tf.convert_to_tensor(layer.beta, tf.float32), layer.epsilon, layer.compute_dtype)


def apply_norm(x: tf.Tensor, weights) -> tf.Tensor:
    """Layer normalisation of x [B, d] (float32 arithmetic) with `norm_weights`."""
    gamma, beta, epsilon, dtype = weights
    centred = tf.cast(x, tf.float32)
    centred -= tf.reduce_mean(centred, axis=-1, keepdims=True)
    variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)
    return tf.cast(centred * tf.math.rsqrt(variance + epsilon) * gamma + beta, dtype)


def modulate(normed: tf.Tensor, modulation: Optional[tf.Tensor]) -> tf.Tensor:
    """A layer norm's output [B, (T,) d] scaled and shifted per item by modulation [B, 2, d]
    (adaptive layer norm): normed * (1 + scale) + shift; unchanged when modulation is None."""
    if modulation is None:
        return normed
    scale, shift = tf.unstack(tf.cast(modulation, normed.dtype), axis=1)
    if normed.shape.rank == 3:
        scale, shift = scale[:, None], shift[:, None]
    return normed * (1.0 + scale) + shift


def attend_slots(q: tf.Tensor, keys: tf.Tensor, values: tf.Tensor, position) -> tf.Tensor:
    """Attention of one decode step over a slot-major cache, without transposing it: q
    [1, B, H, Dh]; keys, values [S', B, H, Dh] from `written_slots` (slots past `position` are
    masked; a plain graph passes only slots 0..position). Returns [B, H, Dh]."""
    scale = tf.cast(1.0 / math.sqrt(q.shape[-1]), q.dtype)
    logits = tf.cast(tf.reduce_sum(keys * (q * scale), axis=-1), tf.float32)  # [S', B, H]
    if in_static_context():
        visible = tf.reshape(tf.range(_length(keys, 0)) <= position, [-1, 1, 1])
        logits = tf.where(visible, logits, tf.constant(_MASKED_LOGIT, tf.float32))
    # softmax over the slot axis (tf.nn.softmax on axis 0 would transpose twice)
    weights = tf.exp(logits - tf.reduce_max(logits, axis=0, keepdims=True))
    weights = weights / tf.reduce_sum(weights, axis=0, keepdims=True)
    return tf.reduce_sum(tf.expand_dims(tf.cast(weights, values.dtype), -1) * values, axis=0)

def indexed(owner: keras.layers.Layer, prefix: str, layers: list) -> list:
    """Also sets owner.<prefix>_<i> for every layer of a list and returns the list.
    tf.train.Checkpoint follows attributes but not the lists Keras 3 tracks, so without this,
    list-held layers (blocks, convs) would be missing from checkpoints."""
    for i, layer in enumerate(layers):
        setattr(owner, f"{prefix}_{i}", layer)
    return layers


class MultiHeadAttention(keras.layers.Layer):
    """Multi-head attention with separate query and key/value projections.

    The split (`query_heads`, `key_value_heads`, `combine`) lets the decoder project a memory once
    and reuse it at every decode step, and keep a key/value cache for self-attention.
    """

    def __init__(self, d_model: int, num_heads: int, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.num_heads = num_heads
        self.head_dim = d_model // num_heads
        self.wq = keras.layers.Dense(d_model, name="query")
        self.wkv = keras.layers.Dense(2 * d_model, name="key_value")
        self.wo = keras.layers.Dense(d_model, name="output")

    def build(self, input_shape=None):
        self.wq.build((None, None, self.d_model))
        self.wkv.build((None, None, self.d_model))
        self.wo.build((None, None, self.d_model))
        self.built = True

    def _split(self, x: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(x, [-1, _length(x, 1), self.num_heads, self.head_dim])
        return tf.transpose(x, [0, 2, 1, 3])

    def query_heads(self, x: tf.Tensor) -> tf.Tensor:
        return self._split(self.wq(x))

    def key_value_heads(self, memory: tf.Tensor) -> Tuple[tf.Tensor, tf.Tensor]:
        k, v = tf.split(self.wkv(memory), 2, axis=-1)
        return self._split(k), self._split(v)

    def combine(self, heads: tf.Tensor) -> tf.Tensor:
        x = tf.reshape(tf.transpose(heads, [0, 2, 1, 3]), [-1, _length(heads, 2), self.d_model])
        return self.wo(x)

    def call(self, x, memory, mask=None, forward=False):
        """Returns (output [B, Tq, d_model], weights [B, H, Tq, Tk] float32). forward=True:
        forward attention over the Tq queries in order (see `forward_weights`)."""
        k, v = self.key_value_heads(memory)
        if not forward:
            out, weights = attend(self.query_heads(x), k, v, mask)
            return self.combine(out), weights
        weights = forward_weights(attention_logits(self.query_heads(x), k, mask))
        return self.combine(tf.matmul(tf.cast(weights, v.dtype), v)), weights


class FeedForward(keras.layers.Layer):
    def __init__(self, d_model: int, hidden: int, dropout: float, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.hidden, self.dropout = d_model, hidden, dropout
        self.inner = keras.layers.Dense(hidden, activation="gelu", name="inner")
        self.outer = keras.layers.Dense(d_model, name="outer")

    def build(self, input_shape=None):
        self.inner.build((None, None, self.d_model))
        self.outer.build((None, None, self.hidden))
        self.built = True

    def call(self, x, seed=None):
        return self.outer(stateless_dropout(self.inner(x), self.dropout, seed))


def _layer_norm(name: str) -> keras.layers.LayerNormalization:
    return keras.layers.LayerNormalization(epsilon=1e-5, name=name)


class TransformerBlock(keras.layers.Layer):
    """Pre-LN block: x + SelfAttn(LN x) [+ x + CrossAttn(LN x, memory) ...] + FF(LN x).

    `num_memories` cross-attention sub-layers attend, in order, to the memories passed to `call`.
    Returns (x, [cross-attention weights per memory]). `modulation` [B, norm_count, 2, d]
    (optional) scales and shifts each norm's output per item (`modulate`), in the order self,
    cross 0.., feed-forward.
    """

    def __init__(self, d_model: int, num_heads: int, ff_dim: int, dropout: float,
                 num_memories: int = 0, gradient_checkpointing: bool = False,
                 forward_memory: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.forward_memory = forward_memory  # memory read with forward attention (-1: none)
        self.dropout = dropout
        self.gradient_checkpointing = gradient_checkpointing
        self.self_norm = _layer_norm("self_attention_norm")
        self.self_attention = MultiHeadAttention(d_model, num_heads, name="self_attention")
        self.cross_norms = indexed(self, "cross_norm", [
            _layer_norm(f"cross_attention_{i}_norm") for i in range(num_memories)])
        self.cross_attentions = indexed(self, "cross_attention", [
            MultiHeadAttention(d_model, num_heads, name=f"cross_attention_{i}")
            for i in range(num_memories)])
        self.ff_norm = _layer_norm("feed_forward_norm")
        self.feed_forward = FeedForward(d_model, ff_dim, dropout, name="feed_forward")
        self.norm_count = 2 + num_memories

    def build(self, input_shape=None):
        shape = (None, None, self.d_model)
        for layer in [self.self_norm, self.self_attention, *self.cross_norms,
                      *self.cross_attentions, self.ff_norm, self.feed_forward]:
            layer.build(shape)
        self.built = True

    def _residual(self, x, delta, seed):
        return x + stateless_dropout(delta, self.dropout, seed)

    def _forward(self, x, self_mask, memories, memory_masks, seed, modulation=None):
        def norm(i, layer, y):
            return modulate(layer(y), None if modulation is None else modulation[:, i])

        normed = norm(0, self.self_norm, x)
        h, _ = self.self_attention(normed, normed, self_mask)
        x = self._residual(x, h, fold_seed(seed, 0))
        weights = []
        for i, (cross_norm, attention) in enumerate(zip(self.cross_norms,
                                                        self.cross_attentions)):
            h, w = attention(norm(1 + i, cross_norm, x), memories[i], memory_masks[i],
                             forward=i == self.forward_memory)
            x = self._residual(x, h, fold_seed(seed, 1 + i))
            weights.append(w)
        h = self.feed_forward(norm(self.norm_count - 1, self.ff_norm, x), fold_seed(seed, 10))
        return self._residual(x, h, fold_seed(seed, 11)), weights

    def call(self, x, self_mask=None, memories=(), memory_masks=(), seed=None, training=False,
             modulation=None):
        """x [B, T, d]; masks bool (True = may attend); seed [2] int32 for dropout or None;
        modulation [B, norm_count, 2, d] or None."""
        memories, memory_masks = list(memories), list(memory_masks)
        if not (self.gradient_checkpointing and training):
            return self._forward(x, self_mask, memories, memory_masks, seed, modulation)
        # tf.recompute_grad takes tensors only; masks/seeds are closed over (no gradient).
        n = len(memories)
        extra = [] if modulation is None else [modulation]

        def fn(x_, *tensors):
            out, weights = self._forward(x_, self_mask, list(tensors[:n]), memory_masks, seed,
                                         tensors[n] if extra else None)
            return (out, *weights)

        out, *weights = tf.recompute_grad(fn)(x, *memories, *extra)
        return out, list(weights[:n])

    # ---- incremental decoding -------------------------------------------------------------
    def step_weights(self) -> Dict[str, Any]:
        """This block's weights for `step` (read once before a decode loop): query, key and
        value projections as one matrix."""
        sa = self.self_attention
        return {"self_norm": norm_weights(self.self_norm),
                "qkv": dense_weights(sa.wq, sa.wkv), "self_out": dense_weights(sa.wo),
                "cross": [(norm_weights(norm), dense_weights(a.wq), dense_weights(a.wo))
                          for norm, a in zip(self.cross_norms, self.cross_attentions)],
                "ff_norm": norm_weights(self.ff_norm),
                "ff_inner": dense_weights(self.feed_forward.inner),
                "ff_outer": dense_weights(self.feed_forward.outer)}

    def step(self, x, cache_k, cache_v, position, memory_kv, memory_masks, weights,
             forward_state=None, modulation=None):
        """One decode position with a preallocated self-attention cache (inference only).

        x: [B, d]; cache_k/cache_v: slot-major decode buffers [S, B, H, Dh] (see `slot_buffer`;
        the ones passed in must not be used again); position: scalar int32 (slot to write);
        memory_kv: [(k, v)] per memory, already projected; weights: `step_weights()`;
        forward_state: the forward-attention log weights of the previous position [B, H, Tk]
        (when the block has a forward memory); modulation: as in `call`.
        Returns (x, cache_k, cache_v, [cross weights [B, H, 1, Tk]], new forward_state). Only
        slot `position` is written, and in a plain graph only slots 0..position are read, so a
        step's cost does not depend on S.
        """
        heads, head_dim = self.self_attention.num_heads, self.self_attention.head_dim

        def split_heads(y):
            return tf.reshape(y, [-1, heads, head_dim])

        def norm(i, norm_w, y):
            return modulate(apply_norm(y, norm_w),
                            None if modulation is None else modulation[:, i])

        q, k, v = tf.split(apply_dense(norm(0, weights["self_norm"], x), weights["qkv"]),
                           3, axis=-1)
        cache_k = write_slot(cache_k, position, split_heads(k))
        cache_v = write_slot(cache_v, position, split_heads(v))
        out = attend_slots(tf.reshape(q, [1, -1, heads, head_dim]),
                           written_slots(cache_k, position),
                           written_slots(cache_v, position), position)
        x = x + apply_dense(tf.reshape(out, [-1, self.d_model]), weights["self_out"])
        attention_weights = []
        for i, (norm_w, query_w, out_w) in enumerate(weights["cross"]):
            mk, mv = memory_kv[i]
            q = tf.reshape(apply_dense(norm(1 + i, norm_w, x), query_w),
                           [-1, heads, 1, head_dim])
            if i == self.forward_memory:
                forward_state = forward_step(forward_state,
                                             attention_logits(q, mk, memory_masks[i])[:, :, 0])
                w = tf.exp(forward_state)[:, :, None]
                out = tf.matmul(tf.cast(w, mv.dtype), mv)
            else:
                out, w = attend(q, mk, mv, memory_masks[i])
            x = x + apply_dense(tf.reshape(out, [-1, self.d_model]), out_w)
            attention_weights.append(w)
        hidden = self.feed_forward.inner.activation(
            apply_dense(norm(self.norm_count - 1, weights["ff_norm"], x), weights["ff_inner"]))
        x = x + apply_dense(hidden, weights["ff_outer"])
        return x, cache_k, cache_v, attention_weights, forward_state


class TransformerStack(keras.layers.Layer):
    """`num_layers` TransformerBlocks followed by a final LayerNorm (pre-LN convention)."""

    def __init__(self, num_layers: int, d_model: int, num_heads: int, ff_dim: int,
                 dropout: float, num_memories: int = 0, gradient_checkpointing: bool = False,
                 forward_memory: int = -1, **kwargs):
        super().__init__(**kwargs)
        self.d_model = d_model
        self.blocks = indexed(self, "block", [
            TransformerBlock(d_model, num_heads, ff_dim, dropout, num_memories,
                             gradient_checkpointing, forward_memory, name=f"block_{i}")
            for i in range(num_layers)])
        self.final_norm = _layer_norm("final_norm")
        self.norm_count = sum(block.norm_count for block in self.blocks) + 1

    def split_modulation(self, modulation):
        """modulation [B, norm_count, 2, d] or None → (one per block, the final norm's)."""
        if modulation is None:
            return [None] * len(self.blocks), None
        parts = tf.split(modulation, [block.norm_count for block in self.blocks] + [1], axis=1)
        return parts[:-1], parts[-1][:, 0]

    def build(self, input_shape=None):
        for block in self.blocks:
            block.build((None, None, self.d_model))
        self.final_norm.build((None, None, self.d_model))
        self.built = True

    def call(self, x, self_mask=None, memories=(), memory_masks=(), seed=None, training=False,
             modulation=None):
        """modulation: every norm's per-item scale and shift [B, norm_count, 2, d] (blocks in
        order, then the final norm) or None. Returns (x, cross-attention weights: one list per
        block, one [B, H, Tq, Tk] entry per memory)."""
        weights = []
        block_modulations, final_modulation = self.split_modulation(modulation)
        for i, (block, block_modulation) in enumerate(zip(self.blocks, block_modulations)):
            x, block_weights = block(x, self_mask, memories, memory_masks,
                                     seed=fold_seed(seed, i), training=training,
                                     modulation=block_modulation)
            weights.append(block_weights)
        return modulate(self.final_norm(x), final_modulation), weights
