"""DeviceFeeder: the explicit data-device → model-device handoff, overlapped with the model step.

A background thread pulls batches from a tf.data iterator (whose last stage prefetched them onto
the data device), runs the featurizer under the data device, copies the result to the model
device with tf.identity under tf.device(model_device) and puts it in a small bounded queue. The
training loop takes batches from the queue, so the data device computes batch n+1 while the model
device runs step n; the queue bound keeps model-device memory small.

    with pipeline.train_batches(epoch, model_device) as feeder:
        feeder.wait_until_filled(timeout=config.training.model_start_delay)
        for batch in feeder:          # dict of tensors on the model device
            step(batch)
        waiting = feeder.wait_seconds  # time the consumer spent blocked on an empty queue

Under a tf.distribute strategy `model_device` is a myxtts.training.distribution.Distribution: the
featurized batch (this machine's share of the global batch) is split into one slice per model
replica, each copied to its replica's device (`Distribution.distribute_batch`).

Iteration ends at the end of the dataset; an exception in the producer thread is re-raised in
the consumer; close() (or leaving the `with` block) stops the thread.
"""

from __future__ import annotations

import queue
import threading
import time
from typing import Callable, Dict, Optional

import tensorflow as tf

from myxtts.errors import MyXTTSError

_END = object()


class DataStalled(MyXTTSError):
    """The producer delivered no batch within the feeder's `stall_seconds`."""


class _Failure:
    def __init__(self, error: BaseException):
        self.error = error


class DeviceFeeder:
    """Iterator of featurized batches (dicts of tensors) that live on `model_device`."""

    def __init__(self, dataset: tf.data.Dataset,
                 featurize: Callable[[Dict[str, tf.Tensor]], Dict[str, tf.Tensor]],
                 data_device: str, model_device, capacity: int = 2,
                 name: str = "batches", stall_seconds: Optional[float] = None,
                 stall_message: str = "", count: Optional[int] = None):
        if capacity < 1:
            raise ValueError("DeviceFeeder capacity must be >= 1")
        self.data_device, self.model_device = data_device, model_device
        self.capacity = capacity
        # no batch for this long raises DataStalled(stall_message) in the consumer (None: wait)
        self.stall_seconds, self._stall_message = stall_seconds, stall_message
        self.wait_seconds = 0.0
        self.batches = 0
        # the dataset's exact number of batches when known (None: until the input ends)
        self.count = count
        self._dataset, self._featurize = dataset, featurize
        self._queue: "queue.Queue" = queue.Queue(maxsize=capacity)
        self._stop = threading.Event()
        self._exhausted = threading.Event()
        self._finished = False
        self._thread = threading.Thread(target=self._produce, name=f"DeviceFeeder-{name}",
                                        daemon=True)
        self._thread.start()

    # ---- producer (background thread) ----------------------------------------------------------
    def _put(self, item) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _produce(self) -> None:
        try:
            self._produce_from(iter(self._dataset))
        except BaseException as e:  # pylint: disable=broad-except  # re-raised in the consumer
            self._put(_Failure(e))

    def _produce_from(self, iterator) -> None:
        """Puts every batch, then _END. After `count` batches it does not ask the input for
        another, and the input is released only after _END is queued: asking a shuffled,
        interleaved, bucketed tf.data input for its end, or releasing it with work in flight,
        took ~30 s at some training epoch ends, which the model device spent waiting
        (docs/history.md, "Epoch ends")."""
        for produced, element in enumerate(iterator, start=1):
            if self._stop.is_set():
                return
            with tf.device(self.data_device):
                features = self._featurize(element)
            if isinstance(self.model_device, str):
                with tf.device(self.model_device):
                    on_model = {k: tf.identity(v) for k, v in features.items()}
            else:
                on_model = self.model_device.distribute_batch(features)
            if not self._put(on_model):
                return
            if produced == self.count:
                break
        self._exhausted.set()
        self._put(_END)

    # ---- consumer ------------------------------------------------------------------------------
    @property
    def queued(self) -> int:
        """Featurized batches waiting on the model device."""
        return self._queue.qsize()

    @property
    def exhausted(self) -> bool:
        """True once the data device has featurized the dataset's last batch (the batches may
        still be queued): the moment to start the next epoch's feeder."""
        return self._exhausted.is_set()

    @property
    def fill_fraction(self) -> float:
        """queued / capacity, in [0, 1] (1 = the model device has all it can hold)."""
        return min(1.0, self._queue.qsize() / self.capacity)

    def wait_until_filled(self, timeout: float) -> float:
        """Blocks until the queue is full, the data ran out, or `timeout` seconds passed;
        returns the fill fraction reached (for --model-start-delay)."""
        deadline = time.monotonic() + max(0.0, timeout)
        while (self.fill_fraction < 1.0 and self._thread.is_alive()
               and time.monotonic() < deadline):
            time.sleep(0.01)
        return self.fill_fraction

    def __iter__(self) -> "DeviceFeeder":
        return self

    def __next__(self) -> Dict[str, tf.Tensor]:
        if self._finished:
            raise StopIteration
        start = time.perf_counter()
        try:
            item = self._queue.get(timeout=self.stall_seconds)
        except queue.Empty:
            self._finished = True
            raise DataStalled(f"No batch for {self.stall_seconds:g} s. "
                              f"{self._stall_message}".strip()) from None
        self.wait_seconds += time.perf_counter() - start
        if item is _END:
            self._finished = True
            raise StopIteration
        if isinstance(item, _Failure):
            self._finished = True
            raise item.error
        self.batches += 1
        return item

    def close(self, timeout: Optional[float] = 10.0) -> None:
        """Stops the producer and drops queued batches; safe to call twice. A producer that
        gave every batch may still be releasing its input (seconds, _produce_from): it is not
        waited for."""
        self._stop.set()
        self._finished = True
        while True:
            try:
                self._queue.get_nowait()
            except queue.Empty:
                break
        if not self._exhausted.is_set():
            self._thread.join(timeout)

    def __enter__(self) -> "DeviceFeeder":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
