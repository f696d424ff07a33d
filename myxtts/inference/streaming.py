"""Streaming synthesis: waveform chunks while the decoder is still running.

One driver, `stream_decode`, runs the model's decode a chunk of steps at a time
(myxtts.decoding.scheduler) through a decode backend (myxtts.decoding.backend:
myxtts.inference.model_decoder.ModelDecoder, a checkpoint's XTTSModel;
myxtts.inference.exported_model.ExportedDecoder, the streaming signatures of an exported
SavedModel; myxtts.lite, a LiteRT or ONNX export) and passes each chunk's new frames through
two windowed stages, the postnet and the vocoder:

    decoder steps ──frames──▶ postnet window ──mel──▶ vocoder window ──samples──▶ yield

A stage's output for frame i depends on its input frames [i - c, i + c] (c = the stage's
receptive field: `model.postnet.receptive_field`, the vocoder's `receptive_field`), so a stage
emits the outputs of the frames that have c frames of right context, running on a window that
starts c frames before the first of them; the window's edges fall where the outputs are not
used. With the postnet and a neural vocoder the joined chunks therefore equal whole-utterance
synthesis up to float rounding; vocoder windows are still joined with a short linear
crossfade (scheduler.CROSSFADE_SAMPLES) over samples both windows computed, which hides what a
too-small context would leave (Griffin-Lim, whose phases depend on all the frames a window
holds). The last
chunk comes when the stop head or the length cap ends the item: its window runs to the end.
A vocoder may bring its own stateful stage instead (`vocoder_stage`: Vocos's VocosStream keeps
each convolution's last input frames between chunks, so no context is recomputed).

The first chunk is small (`first_chunk_steps`, by default just enough frames for the two
stages' context plus a few frames of audio: scheduler.default_first_chunk_steps) to get audio
out early; each later chunk has twice the steps of the one before, up to `chunk_steps`, for
throughput (every window recomputes its stages' context, a share that falls as chunks grow).

Imports no TensorFlow: the decoders bring their own runtime.
"""

from __future__ import annotations

import queue
import threading
from typing import Iterator, List, NamedTuple, Optional, Sequence, Tuple

import numpy as np

from myxtts.decoding import scheduler

SENTENCE_PAUSE_SECONDS = 0.25  # silence between the sentences of one text


class WindowedStage:
    """A stage `function(inputs [T, ...], first_frame) -> outputs [T * per_frame (+ a tail)]`
    whose output for input frame i depends on inputs [i - context, i + context] only, run over
    a growing input one window at a time (`push`). Frame i's outputs are elements
    [i * per_frame, (i + 1) * per_frame) of the whole input's outputs, and of a window's
    outputs counted from its first frame; after the last frame a stage may give a few more
    (Griffin-Lim's last window). Consecutive windows' outputs are joined with a linear
    crossfade of `crossfade` elements, which both windows computed with full context (so for
    an exact stage the crossfade changes nothing)."""

    def __init__(self, function, context: int, per_frame: int = 1, crossfade: int = 0):
        self.function = function
        self.context = int(context)
        self.per_frame = int(per_frame)
        self.crossfade = int(crossfade)
        self.tail_frames = -(-self.crossfade // self.per_frame)
        self.buffer: Optional[np.ndarray] = None  # input frames [base, base + len(buffer))
        self.base = 0
        self.emitted = 0  # input frames whose outputs were given
        self.tail: Optional[np.ndarray] = None  # the last window's outputs past `emitted`
        self._taken: Tuple[int, int, bool] = (0, 0, False)  # (start, ready, final) of `take`

    def push(self, frames: Optional[np.ndarray], final: bool) -> Optional[np.ndarray]:
        """Adds input frames (None: none); returns the outputs that are now final (all the
        rest once `final`: no more input follows), None while there are none."""
        window = self.take(frames, final)
        if window is None:
            return None
        return self.give(self.function(*window))

    def take(self, frames: Optional[np.ndarray], final: bool
             ) -> Optional[Tuple[np.ndarray, int]]:
        """The first half of `push`: adds the frames and returns the window to run the function
        on, (inputs, first frame), or None; `give` takes the function's outputs. Windows of
        several stages can so be run as one batch (myxtts.serving)."""
        if frames is not None:
            frames = np.asarray(frames)
            self.buffer = frames if self.buffer is None else \
                np.concatenate([self.buffer, frames])
        if self.buffer is None:
            return None
        total = self.base + len(self.buffer)
        # Outputs are given up to where the crossfade tail after them still has its full
        # right context: for an exact stage the crossfade then blends equal samples.
        ready = total if final else total - self.context - self.tail_frames
        if ready <= self.emitted and not final:
            return None
        start = max(0, self.emitted - self.context)
        stop = total if final else ready + self.tail_frames + self.context
        self._taken = (start, ready, final)
        return self.buffer[start - self.base: stop - self.base], start

    def give(self, out) -> np.ndarray:
        """The second half of `push`: the final outputs of the window `take` returned."""
        start, ready, final = self._taken
        out = np.asarray(out)
        low = (self.emitted - start) * self.per_frame
        high = len(out) if final else (ready - start) * self.per_frame
        chunk = out[low:high].copy()
        if self.tail is not None:
            n = min(len(self.tail), len(chunk))
            fade = (np.arange(1, n + 1, dtype=np.float32) / (n + 1)).reshape(
                (n,) + (1,) * (chunk.ndim - 1))
            chunk[:n] = self.tail[:n] * (1.0 - fade) + chunk[:n] * fade
        self.tail = None if final or not self.crossfade else out[high: high + self.crossfade]
        self.emitted = ready
        keep = max(0, ready - self.context) - self.base  # frames no later window reads
        self.buffer, self.base = self.buffer[keep:], self.base + keep
        return chunk


def pause(sample_rate: int) -> np.ndarray:
    """The silence between two sentences of a text, float32 samples."""
    return np.zeros(int(round(SENTENCE_PAUSE_SECONDS * sample_rate)), np.float32)


class StreamEnd(NamedTuple):
    """How a streamed sentence ended: its mel frames, and whether the stop head ended it (else
    the length cap)."""

    frames: int
    ended_by_stop: bool


def postnet_chunks(decoder, ids, language_id: int, latents, first_chunk_steps: int,
                   chunk_steps: int) -> Iterator[Tuple[Optional[np.ndarray], bool, int, bool]]:
    """The decode of one token sequence a chunk at a time (scheduler.decoded_chunks), through
    the postnet: (the mel frames that are final now (None: none yet), ended, frames so far
    (the item's length once ended), ended by the stop head)."""
    postnet = WindowedStage(lambda mel, first: decoder.postnet(mel, first, latents),
                            decoder.postnet_context)
    state = decoder.start_batch([ids], [language_id], latents)
    for (item,) in scheduler.decoded_chunks(decoder, state, [ids], first_chunk_steps,
                                             chunk_steps):
        yield postnet.push(item.frames, item.done), item.done, item.length, item.by_stop


def vocoder_stage(vocoder, hop_length: int, crossfade: int):
    """The stage that vocodes one streamed sentence: the vocoder's own stateful one when it has
    one (`streaming_stage()`, e.g. Vocos's, which recomputes no context), else WindowedStage
    over its `window`."""
    own = getattr(vocoder, "streaming_stage", None)
    stage = own() if own is not None else None
    if stage is None:
        stage = WindowedStage(vocoder.window, vocoder.receptive_field, hop_length, crossfade)
    return stage


def ahead(chunks: Iterator, depth: int = 2) -> Iterator:
    """The items of `chunks`, produced by a background thread up to `depth` items ahead of the
    consumer: the decoder and the postnet run the next chunk while the vocoder works on the
    last one (each TensorFlow call releases the GIL, so the two keep two cores busy). An
    exception in the thread is raised here; closing this generator stops the thread after its
    current item."""
    items: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    done = object()

    def offer(entry) -> bool:
        """Puts `entry` once there is room; False when the consumer has stopped."""
        while not stop.is_set():
            try:
                items.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce():
        try:
            for item in chunks:
                if not offer((item, None)):
                    return
        except BaseException as e:  # pylint: disable=broad-except  (re-raised by the consumer)
            offer((done, e))
            return
        offer((done, None))

    thread = threading.Thread(target=produce, name="myxtts-decode-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, error = items.get()
            if error is not None:
                raise error
            if item is done:
                return
            yield item
    finally:
        stop.set()
        thread.join()


def stream_decode(decoder, vocoder, sample_rate: int, hop_length: int,
                  sentences: Sequence[Sequence[int]], language_id: int, latents, *, first_chunk_steps: Optional[int] = None,
                  chunk_steps: int = scheduler.CHUNK_STEPS,
                  crossfade: int = scheduler.CROSSFADE_SAMPLES,
                  ends: Optional[List[StreamEnd]] = None) -> Iterator[np.ndarray]:
    """Float32 waveform chunks of each token sequence of `sentences` in turn, as the decoder
    produces its frames, a `pause` between two sentences. The decoder and the postnet run in a
    thread one chunk `ahead` of the vocoder, across sentences too (the next sentence decodes
    while the last one's end is vocoded). `vocoder` has `window(mel [T, n_mels], first_frame)
    -> waveform` and `receptive_field`; `ends` (optional) gets a StreamEnd per sentence as each
    ends."""
    first = first_chunk_steps
    if first is None:
        first = scheduler.default_first_chunk_steps(decoder, vocoder.receptive_field,
                                                    hop_length)
    if chunk_steps < 1 or first < 1:  # raised here, not in the decode-ahead thread
        raise ValueError(f"chunk sizes must be at least one decoder step (got first "
                         f"{first}, then {chunk_steps})")

    def every_sentence():
        for index, ids in enumerate(sentences):
            for item in postnet_chunks(decoder, ids, language_id, latents, first, chunk_steps):
                yield index, item

    vocode, current = None, None
    for index, (mel, done, length, by_stop) in ahead(every_sentence()):
        if index != current:
            if current is not None:
                yield pause(sample_rate)
            vocode = vocoder_stage(vocoder, hop_length, crossfade)
            current = index
        waveform = vocode.push(mel, done)
        if waveform is not None and waveform.size:
            yield waveform.astype(np.float32)
        if done and ends is not None:
            ends.append(StreamEnd(length, by_stop))
