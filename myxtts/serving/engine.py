"""The speech engine of myxtts-serve: concurrent requests decoded together in batches.

    engine = SpeechEngine(load_model("models/myxtts"), max_batch=8, max_wait_ms=30)
    engine.start()
    job = SpeechJob(sentences, language_id, latents, speed, on_audio, on_end)
    engine.submit(job)          # on_audio(samples) in order from engine threads, then on_end()

Every sentence of every request is one item. A worker takes the oldest waiting item, waits at
most `max_wait_ms` (from that item's arrival) for more to arrive, and decodes up to `max_batch`
items as one batch through the worker's decode backend (`model.runtime()`: a SavedModel's
streaming signatures, or an on-device export's parts, whose batches hold at most its
decode_rows sentences): every
decoder step runs once for the whole batch, which is where concurrency pays on a CPU, whose
cores a single small decode cannot fill. The batch runs a chunk of steps at a time through the one
chunk scheduler (myxtts.decoding.scheduler: the first chunk small, for an early first byte,
then doubling); after each chunk the items that ended (or whose client went away) leave the
batch, so the rest decode at the cost of what is left. Each
item's new frames pass through its own postnet and vocoder windows (streaming.WindowedStage) and
speaking rate (tempo.MelTempo) in a second thread (streaming.ahead), so decoding and vocoding
overlap; the items decode in step, so their windows mostly have one shape and run as one batch
through the postnet_window and vocode_window signatures (`run_windows`). The audio reaches its
request in sentence order with the pause between sentences that Synthesizer.stream puts there.
WORKERS workers run batches side by side, each with its own decoder and vocoder, so a request
that arrives while a batch decodes starts without waiting for it to end.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from myxtts.decoding import scheduler
from myxtts.inference import streaming
from myxtts.inference.tempo import MelTempo
from myxtts.serving import WORKERS

logger = logging.getLogger("myxtts.serving")


class SpeechJob:
    """One request: its sentences' token ids, the language, the voice's latents [L, d] and the
    speed, and an adapted voice's postnet weights (ExportedModel.voice_inputs; None: the
    model's postnet). `on_audio(samples)` gets float32 chunks in order, then `on_end(error)`
    once (None: all audio was given); both are called from engine threads."""

    def __init__(self, sentences: Sequence[Sequence[int]], language_id: int,
                 latents: np.ndarray, speed: float,
                 on_audio: Callable[[np.ndarray], None],
                 on_end: Callable[[Optional[BaseException]], None], sample_rate: int,
                 postnet: Optional[np.ndarray] = None):
        self.sentences = [list(ids) for ids in sentences]
        self.language_id = int(language_id)
        self.latents = np.asarray(latents, np.float32)
        self.speed = float(speed)
        self.postnet = postnet
        self.on_audio, self.on_end = on_audio, on_end
        self.sample_rate = sample_rate
        self.cancelled = threading.Event()  # the client went away: decode no more of it
        self._lock = threading.Lock()
        self._next = 0  # the sentence whose audio is given now
        self._held: Dict[int, List[np.ndarray]] = {}  # audio of later sentences, held back
        self._finished: set = set()
        self._ended = False

    def cancel(self) -> None:
        self.cancelled.set()

    def audio(self, index: int, samples: Optional[np.ndarray], final: bool) -> None:
        """Audio of sentence `index` (its last when `final`); given on in sentence order."""
        with self._lock:
            if self._ended:
                return
            if samples is not None and samples.size:
                self._held.setdefault(index, []).append(samples)
            if final:
                self._finished.add(index)
            while True:
                for chunk in self._held.pop(self._next, []):
                    self.on_audio(chunk)
                if self._next not in self._finished:
                    return
                self._next += 1
                if self._next == len(self.sentences):
                    self._ended = True
                    self.on_end(None)
                    return
                self.on_audio(streaming.pause(self.sample_rate))

    def fail(self, error: BaseException) -> None:
        with self._lock:
            if not self._ended:
                self._ended = True
                self.on_end(error)


class _Item:
    """One sentence of a job waiting for a batch; in one, its postnet, tempo and vocoder
    windows (`stages`, over the worker's decoder and vocoder)."""

    def __init__(self, job: SpeechJob, index: int):
        self.job, self.index = job, index
        self.ids = job.sentences[index]
        self.arrived = time.monotonic()

    def stages(self, decoder, vocoder, hop_length: int) -> None:
        job = self.job
        self.postnet = streaming.WindowedStage(
            lambda mel, first: decoder.postnet(mel, first, job.latents), decoder.postnet_context)
        self.tempo = MelTempo(job.speed)
        self.vocode = streaming.WindowedStage(vocoder.window, vocoder.receptive_field,
                                              hop_length, scheduler.CROSSFADE_SAMPLES)


def run_windows(stages: Sequence[streaming.WindowedStage], frames: Sequence[Optional[np.ndarray]],
                finals: Sequence[bool], batch_function) -> List[Optional[np.ndarray]]:
    """WindowedStage.push of every stage with its frames, the windows of equal shape and first
    frame run as one call of `batch_function(windows [B, T, ...], first_frame, members)`
    (members: the indices of those windows' stages): the items of a batch decode in step, so
    their windows mostly agree."""
    windows = [stage.take(f, final) for stage, f, final in zip(stages, frames, finals)]
    groups: Dict[tuple, List[int]] = {}
    for k, window in enumerate(windows):
        if window is not None:
            groups.setdefault((window[0].shape, window[1]), []).append(k)
    outputs: List[Optional[np.ndarray]] = [None] * len(stages)
    for (_, first_frame), members in groups.items():
        results = batch_function(np.stack([windows[k][0] for k in members]), first_frame,
                                 members)
        for k, result in zip(members, results):
            outputs[k] = stages[k].give(result)
    return outputs


def _by_postnet(items: Sequence[_Item]) -> List[List[int]]:
    """Indices of `items` grouped by their job's postnet weights (None, the model's, or an
    adapted voice's: one array per voice, ExportedModel.voice_inputs), in order."""
    groups: Dict[int, List[int]] = {}
    for k, item in enumerate(items):
        postnet = item.job.postnet
        groups.setdefault(0 if postnet is None else id(postnet), []).append(k)
    return list(groups.values())


class SpeechEngine:
    """Batches the sentences of concurrent jobs (see the module docstring)."""

    def __init__(self, model, max_batch: int = 8, max_wait_ms: float = 30.0,
                 workers: int = WORKERS, chunk_steps: int = scheduler.CHUNK_STEPS,
                 on_batch: Optional[Callable[[int], None]] = None):
        if max_batch < 1 or max_wait_ms < 0:
            raise ValueError(f"max_batch {max_batch} must be >= 1 and max_wait_ms "
                             f"{max_wait_ms} >= 0")
        self.model = model  # myxtts.serving.models: a SavedModel or an on-device export
        # Each worker's own decoder and vocoder (the same signatures for a SavedModel; parts of
        # its own for an on-device export, whose interpreters run one call at a time).
        runtimes = [model.runtime() for _ in range(workers)]
        decoder, vocoder = runtimes[0]
        self.max_batch = min(int(max_batch), decoder.max_rows or int(max_batch))
        self.max_wait = max_wait_ms / 1000.0
        self.chunk_steps = chunk_steps
        self.first_chunk_steps = scheduler.default_first_chunk_steps(
            decoder, vocoder.receptive_field, model.hop_length)
        self.on_batch = on_batch or (lambda size: None)
        self._pending: List[_Item] = []
        self._cond = threading.Condition()
        self._stopping = False
        self._threads = [threading.Thread(target=self._work, args=runtime,
                                          name=f"myxtts-engine-{i}", daemon=True)
                         for i, runtime in enumerate(runtimes)]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def stop(self) -> None:
        """Ends the workers once the batches they run are done; waiting items fail."""
        with self._cond:
            self._stopping = True
            waiting, self._pending = self._pending, []
            self._cond.notify_all()
        for item in waiting:
            item.job.fail(RuntimeError("the server is shutting down"))
        for thread in self._threads:
            thread.join()

    @property
    def queue_depth(self) -> int:
        """Sentences waiting for a batch."""
        return len(self._pending)

    def submit(self, job: SpeechJob) -> None:
        items = [_Item(job, index) for index in range(len(job.sentences))]
        with self._cond:
            if self._stopping:
                raise RuntimeError("the server is shutting down")
            self._pending.extend(items)
            self._cond.notify_all()

    # ---- workers -----------------------------------------------------------------------------
    def _take_batch(self) -> Optional[List[_Item]]:
        """The next batch (None: stopping): the oldest waiting items, once max_batch wait or the
        oldest has waited max_wait."""
        with self._cond:
            while True:
                self._pending = [i for i in self._pending if not i.job.cancelled.is_set()]
                if self._stopping:
                    return None
                if self._pending:
                    remaining = self._pending[0].arrived + self.max_wait - time.monotonic()
                    if len(self._pending) >= self.max_batch or remaining <= 0:
                        batch = self._pending[: self.max_batch]
                        del self._pending[: self.max_batch]
                        return batch
                    self._cond.wait(remaining)
                else:
                    self._cond.wait()

    def _work(self, decoder, vocoder) -> None:
        while True:
            batch = self._take_batch()
            if batch is None:
                return
            self.on_batch(len(batch))
            try:
                self._run(batch, decoder, vocoder)
            except Exception as e:  # pylint: disable=broad-except  (each request gets it)
                logger.exception("A batch of %d sentences failed", len(batch))
                for item in batch:
                    item.job.fail(e)

    def _run(self, batch: List[_Item], decoder, vocoder) -> None:
        for item in batch:
            item.stages(decoder, vocoder, self.model.hop_length)
        state = decoder.start_batch([item.ids for item in batch],
                                    [item.job.language_id for item in batch],
                                    np.stack([item.job.latents for item in batch]))
        chunks = scheduler.decoded_chunks(decoder, state, batch, self.first_chunk_steps,
                                          self.chunk_steps,
                                          leaves=lambda item: item.job.cancelled.is_set())
        for chunk in streaming.ahead(chunks):
            live = [(row.row, row.frames, row.done) for row in chunk
                    if not row.row.job.cancelled.is_set()]
            items = [item for item, _, _ in live]
            finals = [done for _, _, done in live]
            mels: List[Optional[np.ndarray]] = [None] * len(items)
            for members in _by_postnet(items):  # an adapted voice's postnet runs on its own
                postnet = items[members[0]].job.postnet
                outputs = run_windows(
                    [items[k].postnet for k in members], [live[k][1] for k in members],
                    [finals[k] for k in members],
                    lambda windows, first, rows, members=members, postnet=postnet:
                    decoder.postnet_batch(windows, first, np.stack(
                        [items[members[k]].job.latents for k in rows]), postnet))
                for k, output in zip(members, outputs):
                    mels[k] = output
            mels = [item.tempo.push(mel, done) for item, mel, done in zip(items, mels, finals)]
            waveforms = run_windows([item.vocode for item in items], mels, finals,
                                    lambda windows, first, _: vocoder.window_batch(windows, first))
            for item, waveform, done in zip(items, waveforms, finals):
                item.job.audio(item.index, waveform, done)
