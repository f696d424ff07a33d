"""Reading by durations (model.text_alignment: durations): which tokens each decoder step reads
comes from a hard alignment, not from the decoder's learnt text attention.

    aligner = TextMelAligner(vocab_size, n_mels, channels)        # training only
    log_probs = aligner(tokens, token_lengths, mel, mel_lengths)  # [B, T_mel, T_text]
    frame_tokens = monotonic_alignment(log_probs, token_lengths, mel_lengths)   # [B, T_mel]
    durations = token_durations(frame_tokens, token_lengths, mel_lengths)      # [B, T_text]
    predictor = TokenPredictor(d_model, dropout)
    log_durations = predictor(text, token_lengths)                # log(1 + frames) [B, T_text]
    ends = predicted_token_ends(log_durations, token_lengths)     # [B, T_text] int32
    tokens, places = frame_positions(ends, frames, token_lengths) # [B, K], [B, K, 2]
    mask = step_reading_mask(first, last, token_lengths, T_text)  # [B, 1, S, T_text] bool

In training the aligner (RAD-TTS's unsupervised alignment: "One TTS Alignment To Rule Them
All", Badlani et al. 2022) scores every (mel frame, token) pair by the distance of a
convolutional embedding of each, under a diagonal prior; its forward-sum loss
(losses.alignment_loss over frames) teaches it, and the most likely monotonic path through it
(monotonic alignment search, as Glow-TTS: every frame on one token, each token at least one frame,
in order) gives each token its frames. Decoder step s (frames [s*r, (s+1)*r)) may then attend
only to the tokens its frames are aligned to and READ_CONTEXT tokens on each side. The duration
predictor learns those frame counts from the encoded text, and in decoding the predicted
durations place the same window: the decoder cannot skip, repeat or stall on a word, whatever
its frames look like. The stop head still ends the utterance. With model.decoder_input
aligned_text the decoder's step inputs are the aligned tokens' text and the frames' places in
them (`frame_positions`) instead of the frames before.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from myxtts.models.layers import fold_seed, indexed, length_mask, stateless_dropout

READ_CONTEXT = 1  # tokens each side of a step's aligned tokens that its text attention may see
_TEMPERATURE = 0.0005  # scale of the squared embedding distance (RAD-TTS's)
_IMPOSSIBLE = -1e9  # log probability of a masked token or an unreachable path


def _beta_binomial_log_prior(token_lengths, mel_lengths, t_mel, t_text) -> tf.Tensor:
    """log P(token n | frame t) [B, T_mel, T_text]: RAD-TTS's static alignment prior, a
    beta-binomial over the item's N tokens with alpha = t + 1 and beta = T - t (frames t of T),
    a band along the diagonal that speeds up the aligner's first steps."""
    n_tokens = tf.cast(token_lengths, tf.float32)[:, None, None]
    frames = tf.cast(mel_lengths, tf.float32)[:, None, None]
    k = tf.cast(tf.range(t_text), tf.float32)[None, None, :]
    t = tf.cast(tf.range(t_mel), tf.float32)[None, :, None]
    n = tf.maximum(n_tokens - 1.0, 0.0)
    a, b = t + 1.0, tf.maximum(frames - t, 1.0)
    k_valid = tf.minimum(k, n)

    def log_beta(x, y):
        return tf.math.lgamma(x) + tf.math.lgamma(y) - tf.math.lgamma(x + y)

    log_choose = (tf.math.lgamma(n + 1.0) - tf.math.lgamma(k_valid + 1.0)
                  - tf.math.lgamma(n - k_valid + 1.0))
    return log_choose + log_beta(k_valid + a, n - k_valid + b) - log_beta(a, b)


class TextMelAligner(keras.layers.Layer):
    """Tokens and the recorded mel → log P(token | frame) [B, T_mel, T_text] (float32): the
    negative squared distance of a convolutional token embedding (keys) and frame embedding
    (queries), log-softmaxed over the valid tokens, plus the beta-binomial prior, renormalised.
    Float32 throughout (distances are not fp16-safe)."""

    def __init__(self, vocab_size: int, n_mels: int, channels: int, **kwargs):
        super().__init__(dtype="float32", **kwargs)
        self.n_mels, self.channels = n_mels, channels
        self.token_embedding = keras.layers.Embedding(vocab_size, channels, dtype="float32",
                                                      name="token_embedding")
        self.key_convs = indexed(self, "key_conv", [
            keras.layers.Conv1D(2 * channels, 3, padding="same", activation="relu",
                                dtype="float32", name="key_conv_0"),
            keras.layers.Conv1D(channels, 1, dtype="float32", name="key_conv_1")])
        self.query_convs = indexed(self, "query_conv", [
            keras.layers.Conv1D(2 * channels, 3, padding="same", activation="relu",
                                dtype="float32", name="query_conv_0"),
            keras.layers.Conv1D(channels, 1, activation="relu", dtype="float32",
                                name="query_conv_1"),
            keras.layers.Conv1D(channels, 1, dtype="float32", name="query_conv_2")])

    def build(self, input_shape=None):
        self.token_embedding.build((None,))
        width = self.channels
        for conv in self.key_convs:
            conv.build((None, None, width))
            width = conv.filters
        width = self.n_mels
        for conv in self.query_convs:
            conv.build((None, None, width))
            width = conv.filters
        self.built = True

    def call(self, tokens, token_lengths, mel, mel_lengths):
        t_text, t_mel = tf.shape(tokens)[1], tf.shape(mel)[1]
        token_mask = length_mask(token_lengths, t_text)
        keys = self.token_embedding(tokens) * tf.cast(token_mask, tf.float32)[..., None]
        for conv in self.key_convs:
            keys = conv(keys)
        queries = tf.cast(mel, tf.float32) * tf.cast(
            length_mask(mel_lengths, t_mel), tf.float32)[..., None]
        for conv in self.query_convs:
            queries = conv(queries)
        distance = (tf.reduce_sum(tf.square(queries), -1)[:, :, None]
                    - 2.0 * tf.matmul(queries, keys, transpose_b=True)
                    + tf.reduce_sum(tf.square(keys), -1)[:, None, :])
        valid = token_mask[:, None, :]
        logits = tf.where(valid, -_TEMPERATURE * distance, _IMPOSSIBLE)
        log_probs = (tf.nn.log_softmax(logits, axis=-1)
                     + _beta_binomial_log_prior(token_lengths, mel_lengths, t_mel, t_text))
        return tf.nn.log_softmax(tf.where(valid, log_probs, _IMPOSSIBLE), axis=-1)


def monotonic_alignment(log_probs, token_lengths, mel_lengths) -> tf.Tensor:
    """The most likely monotonic path through log_probs [B, T_mel, T_text]: frame 0 on token 0,
    each frame on the token of the frame before or the next one, frame T_b - 1 on token N_b - 1
    (Viterbi; Glow-TTS's monotonic alignment search). Returns the token of every frame
    [B, T_mel] int32 (N_b - 1 on padding frames). No gradient. An item with fewer frames than
    tokens has no such path; it gets the best path that ends on its last token anyway."""
    log_probs = tf.stop_gradient(tf.cast(log_probs, tf.float32))
    token_lengths = tf.cast(token_lengths, tf.int32)
    mel_lengths = tf.cast(mel_lengths, tf.int32)
    t_mel, t_text = tf.shape(log_probs)[1], tf.shape(log_probs)[2]
    log_probs = tf.where(length_mask(token_lengths, t_text)[:, None, :], log_probs, _IMPOSSIBLE)
    steps = tf.transpose(log_probs, [1, 0, 2])  # [T_mel, B, T_text]
    first = tf.where(tf.range(t_text)[None, :] == 0, steps[0], _IMPOSSIBLE)

    def forward(carry, frame):
        score, _ = carry
        moved = tf.pad(score, [[0, 0], [1, 0]], constant_values=_IMPOSSIBLE)[:, :-1]
        came_from_before = moved > score
        return tf.maximum(score, moved) + frame, came_from_before

    _, moves = tf.scan(forward, steps[1:],
                       initializer=(first, tf.zeros_like(first, tf.bool)))  # [T_mel - 1, B, T]
    last_token = token_lengths - 1

    def backward(token, inputs):
        t, moved = inputs  # the frame t and whether the path entered its token from t - 1's
        stepped = tf.gather(tf.cast(moved, tf.int32), token, axis=1, batch_dims=1)
        before = tf.where(t - 1 >= mel_lengths - 1, last_token, token - stepped)
        return tf.maximum(before, 0)

    frames = tf.range(t_mel - 1, 0, -1)
    earlier = tf.scan(backward, (frames, tf.reverse(moves, [0])), initializer=last_token)
    path = tf.concat([tf.reverse(earlier, [0]), last_token[None]], axis=0)  # [T_mel, B]
    return tf.transpose(path)


def token_durations(frame_tokens, t_text, mel_lengths) -> tf.Tensor:
    """Frames on each token [B, t_text] (float32) of a path `frame_tokens` [B, T_mel], counting
    valid frames only."""
    valid = tf.cast(length_mask(mel_lengths, tf.shape(frame_tokens)[1]), tf.float32)
    return tf.reduce_sum(tf.one_hot(frame_tokens, t_text) * valid[..., None], axis=1)


def predicted_token_ends(log_durations, token_lengths) -> tf.Tensor:
    """Predicted log(1 + frames) [B, T_text] → the frame each token ends at, [B, T_text] int32
    (cumulative, rounded once so the rounding does not add up; padding tokens end with the
    last one)."""
    frames = tf.maximum(tf.exp(tf.cast(log_durations, tf.float32)) - 1.0, 0.0)
    frames *= tf.cast(length_mask(token_lengths, tf.shape(log_durations)[1]), tf.float32)
    return tf.cast(tf.round(tf.cumsum(frames, axis=1)), tf.int32)


def tokens_at(token_ends, frames, token_lengths) -> tf.Tensor:
    """The token each frame of `frames` [B, K] (int32 frame indices) falls on, from token_ends
    [B, T_text]: the number of tokens that ended at or before it, at most N_b - 1."""
    passed = tf.reduce_sum(tf.cast(token_ends[:, None, :] <= frames[:, :, None], tf.int32), -1)
    return tf.minimum(passed, tf.cast(token_lengths, tf.int32)[:, None] - 1)


def frame_positions(token_ends, frames, token_lengths):
    """Where frames `frames` [B, K] (int32 frame indices) fall in the text by token_ends
    [B, T_text]: (their tokens [B, K] int32 as `tokens_at`, float32 [B, K, 2] of how far into
    its token each frame is, (f - start + 0.5) / frames of the token, at most 2 (past the last
    token's end it grows beyond 1), and log(1 + frames of the token))."""
    tokens = tokens_at(token_ends, frames, token_lengths)
    ends = tf.gather(token_ends, tokens, batch_dims=1)
    starts = tf.gather(tf.pad(token_ends, [[0, 0], [1, 0]])[:, :-1], tokens, batch_dims=1)
    span = tf.cast(tf.maximum(ends - starts, 1), tf.float32)
    into = tf.minimum((tf.cast(frames - starts, tf.float32) + 0.5) / span, 2.0)
    return tokens, tf.stack([into, tf.math.log1p(span)], axis=-1)


def step_reading_mask(first, last, token_lengths, t_text) -> tf.Tensor:
    """Bool [B, 1, S, t_text]: decoder step s may attend to tokens first[b, s] - READ_CONTEXT
    .. last[b, s] + READ_CONTEXT (first/last [B, S]: the tokens of its first and last frame)
    among the item's valid tokens."""
    n = tf.range(t_text)[None, None, :]
    window = ((n >= first[:, :, None] - READ_CONTEXT) & (n <= last[:, :, None] + READ_CONTEXT)
              & (n < tf.cast(token_lengths, tf.int32)[:, None, None]))
    return window[:, None]


class TokenPredictor(keras.layers.Layer):
    """Encoded text [B, T_text, d] → `outputs` values of every token (float32; [B, T_text] for
    one output, the log(1 + frames) of the duration predictor, else [B, T_text, outputs], as
    the prosody predictor's pitch and energy): two convolutions over neighbouring tokens (ReLU,
    layer norm, dropout) and a projection, as FastSpeech's duration predictor."""

    def __init__(self, d_model: int, dropout: float, outputs: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.d_model, self.dropout, self.outputs = d_model, dropout, outputs
        self.convs = indexed(self, "conv", [
            keras.layers.Conv1D(d_model, 3, padding="same", activation="relu", name=f"conv_{i}")
            for i in range(2)])
        self.norms = indexed(self, "norm", [
            keras.layers.LayerNormalization(epsilon=1e-5, name=f"norm_{i}") for i in range(2)])
        self.projection = keras.layers.Dense(outputs, dtype="float32", name="projection")

    def build(self, input_shape=None):
        for conv, norm in zip(self.convs, self.norms):
            conv.build((None, None, self.d_model))
            norm.build((None, None, self.d_model))
        self.projection.build((None, None, self.d_model))
        self.built = True

    def call(self, text, token_lengths, seed=None, training=False):
        keep = tf.cast(length_mask(token_lengths, tf.shape(text)[1]), text.dtype)[..., None]
        x = text
        for i, (conv, norm) in enumerate(zip(self.convs, self.norms)):
            x = norm(conv(x * keep))
            x = stateless_dropout(x, self.dropout, fold_seed(seed, i) if training else None)
        values = self.projection(x * keep) * tf.cast(keep, tf.float32)
        return values[..., 0] if self.outputs == 1 else values
