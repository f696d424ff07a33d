"""What the user sees while training: TensorBoard (scalars, mel/alignment images, Griffin-Lim
audio), a tqdm progress bar on a terminal, and log lines with throughput, data-wait and
per-device memory figures.
"""

from __future__ import annotations

import contextlib
import logging
import os
import resource
import time
from typing import Dict, Optional

import numpy as np
import tensorflow as tf
from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

logger = logging.getLogger("myxtts.training")


class Throughput:
    """Frames per second and the share of wall time the training loop waited for data, over the
    window since the last `reset`.

    The frames are counted on the model device (`frames`, XTTSTrainer.frames) and read only when
    the figures are asked for, at log time: the loop never waits for a step to finish just to
    count it. The wait is the time the loop blocked on the feeder; on an accelerator that runs
    behind the host it is an upper bound of the time the device sat idle.
    """

    def __init__(self, frames: tf.Variable):
        self._frames = frames
        self.reset()

    def reset(self) -> None:
        self.started = time.monotonic()
        self.wait = 0.0
        self._frames_at_start = int(self._frames.numpy())

    def add_wait(self, seconds: float) -> None:
        self.wait += seconds

    def figures(self) -> Dict[str, float]:
        """{"frames_per_second", "data_wait_fraction"} of the window (reads the frame count)."""
        elapsed = max(time.monotonic() - self.started, 1e-9)
        frames = int(self._frames.numpy()) - self._frames_at_start
        return {"frames_per_second": frames / elapsed,
                "data_wait_fraction": min(1.0, self.wait / elapsed)}


def _host_memory() -> tuple:
    """(current, peak) resident memory of this process in bytes."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    try:
        with open("/proc/self/statm", encoding="ascii") as f:
            current = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        current = peak
    return current, peak


def memory_figures(devices) -> Dict[str, float]:
    """{"memory/<device>/current_mb", "memory/<device>/peak_mb"} for every device in
    `devices`: a GPU's allocator (tf.config.experimental.get_memory_info, peak since start);
    CPU devices, logical ones included, share the process's resident memory ("host")."""
    out: Dict[str, float] = {}
    for device in devices:
        spec = tf.DeviceSpec.from_string(device)
        if (spec.device_type or "CPU").upper() == "GPU":
            name = f"GPU{spec.device_index or 0}"
            info = tf.config.experimental.get_memory_info(f"GPU:{spec.device_index or 0}")
            current, peak = info["current"], info["peak"]
        else:
            name = "host"
            current, peak = _host_memory()
        out[f"memory/{name}/current_mb"] = current / 2 ** 20
        out[f"memory/{name}/peak_mb"] = peak / 2 ** 20
    return out


def _memory_text(scalars: Dict[str, float]) -> str:
    names = [k.split("/")[1] for k in scalars if k.startswith("memory/") and
             k.endswith("/current_mb")]
    return ", ".join(f"{name} {scalars[f'memory/{name}/current_mb']:,.0f}/"
                     f"{scalars[f'memory/{name}/peak_mb']:,.0f} MB" for name in names)


def duration_text(seconds: float) -> str:
    """'1h02m', '12m30s' or '45s'."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def _image(matrix: np.ndarray) -> np.ndarray:
    """[rows, cols] → [1, rows, cols, 1] in [0, 1], row 0 at the bottom (low mel bands low)."""
    m = np.asarray(matrix, np.float32)
    lo, hi = float(np.min(m)), float(np.max(m))
    m = (m - lo) / max(hi - lo, 1e-6)
    return m[::-1, :, None][None]


class TrainingMonitor:
    """TensorBoard writers (tensorboard/train, tensorboard/val) and the terminal progress bar.
    `memory_devices`: the devices whose memory each training log line reports."""

    def __init__(self, directory: str, total_steps: Optional[int], initial_step: int,
                 sample_rate: int, memory_devices=(), minutes_left: Optional[float] = None,
                 ends_by: str = "max_steps"):
        """`total_steps`: the step the run ends at, `ends_by` what ends it there ("max_steps",
        "epoch 100"); with `minutes_left`, training.max_minutes may end it first."""
        self.sample_rate = sample_rate
        self.total_steps = total_steps
        self.ends_by = ends_by
        # The ETA's clock starts at the first step done (tracing and compiling excluded);
        # with training.max_minutes, the run ends by `deadline` at the latest.
        self._clock: Optional[tuple] = None  # (monotonic time, step)
        self._step = initial_step  # a disabled bar does not count
        self.deadline = time.monotonic() + 60.0 * minutes_left if minutes_left else None
        self.memory_devices = list(memory_devices)
        self.train_writer = tf.summary.create_file_writer(os.path.join(directory, "train"))
        self.val_writer = tf.summary.create_file_writer(os.path.join(directory, "val"))
        # disable=None: a bar on terminals only. While it is shown, log records go through
        # tqdm.write, which clears the bar, writes the line and draws the bar again below it.
        self.bar = tqdm(total=total_steps, initial=initial_step, unit="step", disable=None,
                        dynamic_ncols=True, mininterval=0.5)
        self._redirect = contextlib.ExitStack()
        if not self.bar.disable:
            self._redirect.enter_context(logging_redirect_tqdm())

    def progress(self) -> None:
        """One optimizer step done (the figures next to the bar change at log time)."""
        self.bar.update(1)
        self._step += 1
        if self._clock is None:
            self._clock = (time.monotonic(), self._step)

    def eta(self, step: int) -> str:
        """'ETA 12m30s to step 200 (max_steps)' (or '(epoch 100)'), or to the max_minutes
        deadline when that comes first: the steps left at the pace since the first step (validation included); '' before
        there is a pace or an end."""
        now = time.monotonic()
        if self._clock is None or step <= self._clock[1]:
            return ""
        left = None
        if self.total_steps:
            pace = (now - self._clock[0]) / (step - self._clock[1])
            left = max(0, self.total_steps - step) * pace
            end = f"step {self.total_steps} ({self.ends_by})"
        if self.deadline is not None and (left is None or self.deadline - now < left):
            left, end = max(0.0, self.deadline - now), "training.max_minutes"
        return "" if left is None else f"ETA {duration_text(left)} to {end}"

    def log_train(self, step: int, epoch: int, scalars: Dict[str, float]) -> None:
        scalars = {**scalars, **memory_figures(self.memory_devices)}
        self.bar.set_postfix_str(f"loss {scalars['loss/total']:.4f} | "
                                 f"{scalars['frames_per_second']:,.0f} frames/s | data wait "
                                 f"{scalars['data_wait_fraction']:.0%}", refresh=False)
        with self.train_writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
        self.train_writer.flush()
        text = (f"step {step} (epoch {epoch + 1}): loss {scalars['loss/total']:.4f}, "
                f"mel {scalars.get('loss/mel', float('nan')):.4f}, "
                f"lr {scalars['learning_rate']:.2e}, grad norm {scalars['grad_norm']:.3f}, "
                f"{scalars['frames_per_second']:,.0f} frames/s, "
                f"data wait {scalars['data_wait_fraction']:.1%} of step time")
        if scalars.get("loss/discriminator"):  # the vocoder's GAN
            text += (f", discriminator {scalars['loss/discriminator']:.3f}, adversarial "
                     f"{scalars['loss/adversarial']:.3f}")
        if scalars.get("loss_scale", 1.0) != 1.0:
            text += f", loss scale {scalars['loss_scale']:g}"
        if scalars.get("nonfinite_steps"):
            text += f", {int(scalars['nonfinite_steps'])} non-finite steps skipped so far"
        if self.memory_devices:
            text += f"; memory (current/peak) {_memory_text(scalars)}"
        eta = self.eta(step)
        logger.info("%s", text + (f"; {eta}" if eta else ""))

    def log_validation(self, step: int, scalars: Dict[str, float], images: Dict[str, np.ndarray],
                       audio: Dict[str, np.ndarray], improved: bool) -> None:
        with self.val_writer.as_default(step=step):
            for name, value in scalars.items():
                tf.summary.scalar(name, value)
            for name, matrix in images.items():
                tf.summary.image(name, _image(matrix))
            for name, wave in audio.items():
                tf.summary.audio(name, np.asarray(wave, np.float32)[None, :, None],
                                 self.sample_rate)
        self.val_writer.flush()
        text = (f"validation at step {step}: objective {scalars['loss/objective']:.4f}, "
                f"mel {scalars.get('loss/mel', float('nan')):.4f}")
        if "teacher_forced/focus" in scalars:
            text += (f"; attention focus/coverage teacher-forced "
                     f"{scalars['teacher_forced/focus']:.2f}/"
                     f"{scalars['teacher_forced/coverage']:.2f}")
        if "free_running/focus" in scalars:
            text += (f", free-running {scalars['free_running/focus']:.2f}/"
                     f"{scalars['free_running/coverage']:.2f} (ended by stop "
                     f"{scalars['free_running/ended_by_stop']:.0%}, length ratio "
                     f"{scalars['free_running/length_ratio']:.2f})")
        if "free_running/text_match" in scalars:
            text += (f"; text-match {scalars['free_running/text_match']:.2f} (own DTW MCD "
                     f"{scalars['free_running/mcd_own']:.1f} dB)")
        if "free_running/wer" in scalars:
            text += (f"; heard WER {scalars['free_running/wer']:.2f} (CER "
                     f"{scalars['free_running/cer']:.2f})")
        logger.info("%s", text + (" (best so far)" if improved else ""))

    def close(self) -> None:
        self.bar.close()
        self._redirect.close()
        self.train_writer.close()
        self.val_writer.close()
