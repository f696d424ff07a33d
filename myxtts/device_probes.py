"""What the configured devices are and can do, once TensorFlow runs (after
`myxtts.devices.configure`): precision support (fp16 / bf16 / TF32), the start-up report of the
device plan, and the self-check that places a tensor on each device.

The plan itself (which physical GPU becomes which logical device) is `myxtts.devices`, which
imports no TensorFlow. This module imports TensorFlow at module level: import it only after
`configure(plan)` (train_main.py does).
"""

from __future__ import annotations

import dataclasses
import os
from typing import List

import tensorflow as tf

from myxtts.devices import DeviceConfigurationError, DevicePlan, get_device_context, gpu_list_text
from myxtts.tfio_support import tensorflow_io_status


@dataclasses.dataclass(frozen=True)
class PrecisionSupport:
    """What a device can do fast: fp16 (tensor cores), bf16, TF32."""

    device: str
    description: str
    fp16: bool
    bf16: bool
    tf32: bool


def precision_support(device: str) -> PrecisionSupport:
    """Detects precision support for a logical device (GPU: compute capability; CPU: flags)."""
    if "GPU" in device.upper():
        index = int(device.rsplit(":", 1)[1])
        physical = tf.config.list_physical_devices("GPU")
        # Logical GPUs of a split map onto physical GPU 0.
        gpu = physical[min(index, len(physical) - 1)]
        details = tf.config.experimental.get_device_details(gpu)
        cc = details.get("compute_capability") or (0, 0)
        name = details.get("device_name", "GPU")
        return PrecisionSupport(device, f"{name}, compute capability {cc[0]}.{cc[1]}",
                                fp16=cc >= (7, 0), bf16=cc >= (8, 0), tf32=cc >= (8, 0))
    flags = _cpu_flags()
    bf16 = bool({"avx512_bf16", "amx_bf16"} & flags)
    return PrecisionSupport(device, "CPU" + (" with AVX512-BF16/AMX" if bf16 else ""),
                            fp16=False, bf16=bf16, tf32=False)


def _cpu_flags() -> set:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def startup_report(plan: DevicePlan) -> str:
    """The startup log block: roles, physical ids, memory settings, precision support."""
    def support(dev):
        p = precision_support(dev)
        yn = lambda b: "yes" if b else "no"  # noqa: E731
        return f"{p.description}; fp16 {yn(p.fp16)}, bf16 {yn(p.bf16)}, TF32 {yn(p.tf32)}"

    def memory(mb):
        return f"limit {mb} MB" if mb else "growth on, no limit" if plan.uses_gpu else "host RAM"

    gpu_ids = plan.physical_model_gpus or (plan.physical_model_gpu,)
    phys = ("-", ["-"] * len(plan.replica_devices)) if not plan.uses_gpu else (
        plan.physical_data_gpu, gpu_ids)
    lines = [
        f"Device plan: {plan.mode}" + (f", {plan.strategy} strategy" if plan.model_devices
                                       else ""),
        f"  {plan.mapping_line()}",
        f"  data device  {plan.data_device}: physical {phys[0]}, {memory(plan.data_memory_mb)}; "
        f"{support(plan.data_device)}",
    ] + [
        f"  model device {device}: physical {gpu}, {memory(plan.model_memory_mb)}; "
        f"{support(device)}" for device, gpu in zip(plan.replica_devices, phys[1])
    ]
    if plan.cluster is not None:
        lines.append(f"  cluster: {plan.cluster.describe()}")
    if plan.gpus_found:
        lines.append("  " + gpu_list_text(plan.gpus_found))
    lines.append(f"  CPU kernels: {cpu_kernels()}")
    lines.append(f"  tensorflow-io: {tensorflow_io_status()[1]}")
    return "\n".join(lines)


def cpu_kernels() -> str:
    """Which CPU kernels this TensorFlow runs: oneDNN's or its own (devices.choose_cpu_kernels)."""
    setting = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    told = f" (TF_ENABLE_ONEDNN_OPTS={setting})" if setting is not None else ""
    # pylint: disable=import-outside-toplevel
    try:  # TensorFlow's own answer, from a module it does not promise to keep
        from tensorflow.python.util import _pywrap_util_port
    except ImportError:
        return "not reported by this TensorFlow" + told
    return ("oneDNN" if _pywrap_util_port.IsMklEnabled() else "TensorFlow's own, not oneDNN") + told


def self_check(plan: DevicePlan) -> List[str]:
    """Places a tensor on each device and copies data → model; returns the report lines."""
    with get_device_context(plan.data_device):
        batch = tf.random.uniform([4, 80])
    lines = [f"tensor on data device:       {batch.device}"]
    ok = batch.device.endswith(plan.data_device.lstrip("/"))
    for device in plan.replica_devices:
        with get_device_context(device):
            on_model = tf.identity(batch)
            weights = tf.Variable(tf.ones([80, 8]), name="self_check_weights")
            result = tf.matmul(on_model, weights)
        lines += [f"copied to model device:      {on_model.device}",
                  f"variable on model device:    {weights.device}",
                  f"matmul result on:            {result.device}"]
        ok = ok and result.device.endswith(device.lstrip("/"))
    lines.append("self-check: OK" if ok else "self-check: FAILED (placements differ from plan)")
    if not ok:
        raise DeviceConfigurationError("Device self-check failed:\n" + "\n".join(lines))
    return lines
