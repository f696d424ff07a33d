"""Device planning and early device configuration.

This module must stay importable WITHOUT importing TensorFlow: `train_main.py` builds a
`DevicePlan` from its flags and calls `configure(plan)` before TensorFlow is imported, because
visible devices (CUDA_VISIBLE_DEVICES) and memory growth are read once, when TensorFlow first
touches the GPU driver.

Plans (see docs/dual_gpu.md):
  dual      --data-gpu A --model-gpu B, A != B: only physical GPUs A and B are visible, remapped so
            that A is /GPU:0 (data) and B is /GPU:1 (model).
  single    A == B (or no ids on a GPU machine): one GPU holds both roles.
  split     A == B with --split-gpu: one physical GPU split into two logical GPUs with memory limits.
  cpu       no GPU: two logical CPU devices, /CPU:0 data and /CPU:1 model, with a WARNING
            (an error under --require-gpu).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import subprocess
import sys
from typing import List, Optional, Sequence

from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.devices")

ENV_DATA_GPU = "MYXTTS_DATA_GPU"
ENV_MODEL_GPU = "MYXTTS_MODEL_GPU"


class DeviceConfigurationError(MyXTTSError, RuntimeError):
    """A device request that cannot be satisfied; the message says what to change."""


@dataclasses.dataclass(frozen=True)
class GpuInfo:
    """One physical GPU as the driver enumerates it (PCI bus order)."""

    index: int
    name: str = "GPU"
    memory_mb: Optional[int] = None

    def describe(self) -> str:
        mem = f", {self.memory_mb} MB" if self.memory_mb else ""
        return f"GPU {self.index} ({self.name}{mem})"


@dataclasses.dataclass(frozen=True)
class DevicePlan:
    """Where data work and model work run, decided before TensorFlow starts."""

    mode: str  # "dual" | "single" | "split" | "cpu"
    data_device: str  # logical device name after configuration, e.g. "/GPU:0"
    model_device: str
    physical_data_gpu: Optional[int] = None
    physical_model_gpu: Optional[int] = None
    data_memory_mb: Optional[int] = None
    model_memory_mb: Optional[int] = None
    gpus_found: Sequence[GpuInfo] = ()

    @property
    def uses_gpu(self) -> bool:
        return self.mode != "cpu"

    def mapping_line(self) -> str:
        """The one line that says what was mapped where."""
        if self.mode == "cpu":
            return (f"data → {self.data_device}, model → {self.model_device} "
                    "(two logical CPU devices: no GPU found)")
        if self.mode == "single":
            return (f"data → {self.data_device}, model → {self.model_device} "
                    f"(single-GPU mode: physical GPU {self.physical_model_gpu} holds both roles)")
        if self.mode == "split":
            return (f"data → {self.data_device}, model → {self.model_device} "
                    f"(physical GPU {self.physical_model_gpu} split into two logical GPUs)")
        return (f"data → {self.data_device} (physical {self.physical_data_gpu}), "
                f"model → {self.model_device} (physical {self.physical_model_gpu})")


# --------------------------------------------------------------------------------------------
# Discovery (no TensorFlow in this process)
# --------------------------------------------------------------------------------------------

def _user_visible_filter() -> Optional[List[str]]:
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip() != ""]


def discover_gpus() -> List[GpuInfo]:
    """Lists physical GPUs without importing TensorFlow in this process.

    Uses `nvidia-smi` (present wherever the NVIDIA driver is) with PCI bus order, the order CUDA
    uses once CUDA_DEVICE_ORDER=PCI_BUS_ID is set. Without nvidia-smi but with GPU device nodes, a
    short-lived subprocess asks TensorFlow. If the user already restricted CUDA_VISIBLE_DEVICES,
    ids are positions within that list, as CUDA numbers them.
    """
    gpus: List[GpuInfo] = []
    if shutil.which("nvidia-smi"):
        try:
            out = subprocess.run(
                ["nvidia-smi", "--query-gpu=index,name,memory.total",
                 "--format=csv,noheader,nounits"],
                capture_output=True, text=True, timeout=30, check=True).stdout
        except (subprocess.SubprocessError, OSError):
            out = ""
        for line in out.strip().splitlines():
            parts = [p.strip() for p in line.split(",")]
            if len(parts) >= 3 and parts[0].isdigit():
                mem = int(float(parts[2])) if parts[2].replace(".", "").isdigit() else None
                gpus.append(GpuInfo(int(parts[0]), parts[1], mem))
    elif _gpu_device_nodes_present():
        gpus = _discover_with_tensorflow_subprocess()
        return gpus  # TF already applied any CUDA_VISIBLE_DEVICES
    visible = _user_visible_filter()
    if visible is not None:
        by_index = {str(g.index): g for g in gpus}
        gpus = [dataclasses.replace(by_index[v], index=i)
                for i, v in enumerate(visible) if v in by_index]
    return gpus


def _gpu_device_nodes_present() -> bool:
    return any(os.path.exists(p) for p in ("/dev/nvidia0", "/dev/dxg", "/dev/kfd"))


def _discover_with_tensorflow_subprocess() -> List[GpuInfo]:
    code = ("import tensorflow as tf\n"
            "for i, g in enumerate(tf.config.list_physical_devices('GPU')):\n"
            "    d = tf.config.experimental.get_device_details(g)\n"
            "    print(i, d.get('device_name', 'GPU'), sep='\\t')\n")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, env=env).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    gpus = []
    for line in out.strip().splitlines():
        idx, _, name = line.partition("\t")
        if idx.isdigit():
            gpus.append(GpuInfo(int(idx), name or "GPU"))
    return gpus


# --------------------------------------------------------------------------------------------
# Planning (pure: testable with any inventory)
# --------------------------------------------------------------------------------------------

def _env_int(name: str) -> Optional[int]:
    value = os.environ.get(name)
    if value is None or value.strip() == "":
        return None
    try:
        return int(value)
    except ValueError:
        raise DeviceConfigurationError(
            f"Environment variable {name}={value!r} is not a GPU index. Set it to a whole number "
            f"such as 0 or 1, or unset it.") from None


def _gpu_list_text(gpus: Sequence[GpuInfo]) -> str:
    if not gpus:
        return "no GPUs were found on this machine"
    return "GPUs found: " + "; ".join(g.describe() for g in gpus)


def plan_devices(data_gpu: Optional[int] = None,
                 model_gpu: Optional[int] = None,
                 gpus: Optional[Sequence[GpuInfo]] = None,
                 *,
                 split_gpu: bool = False,
                 require_gpu: bool = False,
                 data_memory_mb: Optional[int] = None,
                 model_memory_mb: Optional[int] = None,
                 use_env: bool = True) -> DevicePlan:
    """Decides the device plan. Flags win over MYXTTS_DATA_GPU / MYXTTS_MODEL_GPU.

    `gpus` is the physical inventory (defaults to `discover_gpus()`).
    Raises DeviceConfigurationError with a one-paragraph message for impossible requests.
    """
    if use_env:
        data_gpu = data_gpu if data_gpu is not None else _env_int(ENV_DATA_GPU)
        model_gpu = model_gpu if model_gpu is not None else _env_int(ENV_MODEL_GPU)
    if gpus is None:
        gpus = discover_gpus()
    gpus = tuple(gpus)
    for flag, value in (("--data-gpu", data_gpu), ("--model-gpu", model_gpu)):
        if value is not None and value < 0:
            raise DeviceConfigurationError(
                f"{flag} {value} is not a GPU index: indices start at 0. "
                f"{_gpu_list_text(gpus)}. Pass an index from that list, or leave the flag out.")
    for flag, value in (("--data-gpu-memory", data_memory_mb),
                        ("--model-gpu-memory", model_memory_mb)):
        if value is not None and value <= 0:
            raise DeviceConfigurationError(
                f"{flag} {value} must be a positive number of megabytes (e.g. 4096), "
                f"or left out for no limit.")

    if not gpus:
        if require_gpu:
            raise DeviceConfigurationError(
                "--require-gpu was given but no GPU was found on this machine (nvidia-smi and "
                "TensorFlow list none). Check the NVIDIA driver and CUDA installation with "
                "`nvidia-smi`, or drop --require-gpu to train on two logical CPU devices.")
        for flag, value in (("--data-gpu", data_gpu), ("--model-gpu", model_gpu)):
            if value is not None and value > 1:
                raise DeviceConfigurationError(
                    f"{flag} {value} does not exist: no GPUs were found on this machine. Without "
                    f"a GPU, indices 0 and 1 stand for the two logical CPU devices that replace "
                    f"the data and model GPUs; use those, or check `nvidia-smi` if this machine "
                    f"should have GPUs.")
        requested = [v for v in (data_gpu, model_gpu) if v is not None]
        if requested:
            logger.warning("GPU %s requested but no GPU was found: the data and model roles go "
                           "to two logical CPU devices.", ", ".join(str(r) for r in requested))
        return DevicePlan("cpu", "/CPU:0", "/CPU:1", gpus_found=gpus)

    count = len(gpus)
    for flag, value in (("--data-gpu", data_gpu), ("--model-gpu", model_gpu)):
        if value is not None and value >= count:
            raise DeviceConfigurationError(
                f"{flag} {value} does not exist: this machine has {count} GPU(s). "
                f"{_gpu_list_text(gpus)}. Choose indices between 0 and {count - 1}.")

    if data_gpu is None and model_gpu is None:
        data_gpu = model_gpu = 0
    elif data_gpu is None:
        data_gpu = model_gpu
    elif model_gpu is None:
        model_gpu = data_gpu

    if data_gpu != model_gpu:
        if split_gpu:
            raise DeviceConfigurationError(
                f"--split-gpu splits ONE GPU into two logical GPUs, but --data-gpu {data_gpu} and "
                f"--model-gpu {model_gpu} name two different GPUs. Drop --split-gpu, or pass the "
                f"same index to both flags.")
        return DevicePlan("dual", "/GPU:0", "/GPU:1", data_gpu, model_gpu,
                          data_memory_mb, model_memory_mb, gpus)

    if split_gpu:
        total = gpus[model_gpu].memory_mb
        if data_memory_mb is None or model_memory_mb is None:
            if total is None:
                raise DeviceConfigurationError(
                    f"--split-gpu needs --data-gpu-memory and --model-gpu-memory (MB) because the "
                    f"memory of GPU {model_gpu} could not be read. Example: "
                    f"--data-gpu-memory 2048 --model-gpu-memory 8192.")
            data_memory_mb = data_memory_mb or max(512, total // 4)
            model_memory_mb = model_memory_mb or max(512, int(total * 0.9) - data_memory_mb)
        return DevicePlan("split", "/GPU:0", "/GPU:1", data_gpu, model_gpu,
                          data_memory_mb, model_memory_mb, gpus)
    if data_memory_mb and model_memory_mb:
        memory = data_memory_mb + model_memory_mb
    else:
        memory = data_memory_mb or model_memory_mb
    return DevicePlan("single", "/GPU:0", "/GPU:0", data_gpu, model_gpu,
                      memory, memory, gpus)


# --------------------------------------------------------------------------------------------
# Configuration (before TensorFlow is imported)
# --------------------------------------------------------------------------------------------

def tensorflow_initialized() -> bool:
    """True when TensorFlow's runtime already started (its devices can no longer change)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return bool(context.context()._initialized)  # pylint: disable=protected-access


def configure(plan: DevicePlan) -> DevicePlan:
    """Applies `plan` to this process. Call before anything imports TensorFlow.

    Sets CUDA_VISIBLE_DEVICES (remapping data GPU → /GPU:0, model GPU → /GPU:1) and memory growth
    through the environment, then imports TensorFlow and applies memory limits or the logical
    split. Returns the plan; logs the mapping line.
    """
    if tensorflow_initialized():
        raise DeviceConfigurationError(
            "TensorFlow is already initialised in this process, so its devices can no longer be "
            "changed (TensorFlow would say 'Physical devices cannot be modified after being "
            "initialized'). Call myxtts.devices.configure() before any TensorFlow operation - in "
            "a script, before importing modules that build tensors or models.")
    if not plan.uses_gpu and _user_visible_filter() is None:
        os.environ["CUDA_VISIBLE_DEVICES"] = ""  # no GPU in the plan: do not probe for one
    if plan.uses_gpu:
        if "tensorflow" in sys.modules:
            raise DeviceConfigurationError(
                "TensorFlow was imported before the GPUs were configured, so CUDA_VISIBLE_DEVICES "
                "can no longer remap them. Call myxtts.devices.configure() before "
                "`import tensorflow` (train_main.py does this for you).")
        physical = [plan.physical_data_gpu] if plan.mode != "dual" else [
            plan.physical_data_gpu, plan.physical_model_gpu]
        user_filter = _user_visible_filter()
        names = [user_filter[i] if user_filter is not None else str(i) for i in physical]
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(names)
        os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if plan.mode == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        logger.warning("No GPU found: running on two logical CPU devices. %s", plan.mapping_line())
        return plan

    gpus = tf.config.list_physical_devices("GPU")
    expected = 2 if plan.mode == "dual" else 1
    if len(gpus) < expected:
        raise DeviceConfigurationError(
            f"After restricting CUDA_VISIBLE_DEVICES to {os.environ['CUDA_VISIBLE_DEVICES']}, "
            f"TensorFlow sees {len(gpus)} GPU(s) instead of {expected}. Check that this "
            f"TensorFlow build has GPU support (`pip install tensorflow[and-cuda]`) and that "
            f"`nvidia-smi` lists the GPUs. {_gpu_list_text(plan.gpus_found)}.")
    if plan.mode == "split":
        tf.config.set_logical_device_configuration(gpus[0], [
            tf.config.LogicalDeviceConfiguration(memory_limit=plan.data_memory_mb),
            tf.config.LogicalDeviceConfiguration(memory_limit=plan.model_memory_mb)])
    elif plan.mode == "dual":
        for gpu, limit in ((gpus[0], plan.data_memory_mb), (gpus[1], plan.model_memory_mb)):
            if limit:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
    elif plan.data_memory_mb:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=plan.data_memory_mb)])
    logger.info("Devices configured: %s", plan.mapping_line())
    return plan


# --------------------------------------------------------------------------------------------
# After configuration
# --------------------------------------------------------------------------------------------

def get_device_context(device: Optional[str] = None):
    """A `tf.device` scope: `device` when given, else /GPU:0 when a GPU is visible, else /CPU:0."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if device:
        return tf.device(device)
    if tf.config.list_logical_devices("GPU"):
        return tf.device("/GPU:0")
    return tf.device("/CPU:0")


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
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
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

    phys = {"cpu": ("-", "-")}.get(plan.mode, (plan.physical_data_gpu, plan.physical_model_gpu))
    lines = [
        f"Device plan: {plan.mode}",
        f"  {plan.mapping_line()}",
        f"  data device  {plan.data_device}: physical {phys[0]}, {memory(plan.data_memory_mb)}; "
        f"{support(plan.data_device)}",
        f"  model device {plan.model_device}: physical {phys[1]}, {memory(plan.model_memory_mb)}; "
        f"{support(plan.model_device)}",
    ]
    if plan.gpus_found:
        lines.append("  " + _gpu_list_text(plan.gpus_found))
    from myxtts.tfio_support import tensorflow_io_status  # pylint: disable=import-outside-toplevel
    lines.append(f"  tensorflow-io: {tensorflow_io_status()[1]}")
    return "\n".join(lines)


def self_check(plan: DevicePlan) -> List[str]:
    """Places a tensor on each device and copies data → model; returns the report lines."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    with get_device_context(plan.data_device):
        batch = tf.random.uniform([4, 80])
    with get_device_context(plan.model_device):
        on_model = tf.identity(batch)
        with tf.device(plan.model_device):
            weights = tf.Variable(tf.ones([80, 8]), name="self_check_weights")
        result = tf.matmul(on_model, weights)
    lines = [f"tensor on data device:       {batch.device}",
             f"copied to model device:      {on_model.device}",
             f"variable on model device:    {weights.device}",
             f"matmul result on:            {result.device}"]
    ok = (batch.device.endswith(plan.data_device.lstrip("/"))
          and result.device.endswith(plan.model_device.lstrip("/")))
    lines.append("self-check: OK" if ok else "self-check: FAILED (placements differ from plan)")
    if not ok:
        raise DeviceConfigurationError("Device self-check failed:\n" + "\n".join(lines))
    return lines
