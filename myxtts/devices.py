"""Device planning and early device configuration, before TensorFlow starts.

This module must stay importable and usable for planning WITHOUT importing TensorFlow:
`train_main.py` builds a `DevicePlan` from its flags and calls `configure(plan)` before
TensorFlow is imported, because visible devices (CUDA_VISIBLE_DEVICES) and memory growth are read
once, when TensorFlow first touches the GPU driver. `configure` imports TensorFlow itself, once
the environment is set, and `get_device_context` at its call. What the configured devices can do
(precision support, the start-up report, the self-check) is `myxtts.device_probes`, which needs
TensorFlow.

Plans (see docs/dual_gpu.md):
  dual      --data-gpu A --model-gpu B, A != B: only physical GPUs A and B are visible, remapped so
            that A is /GPU:0 (data) and B is /GPU:1 (model).
  single    A == B (or no ids on a GPU machine): one GPU holds both roles.
  split     A == B with --split-gpu: one physical GPU split into two logical GPUs with memory limits.
  cpu       no GPU: two logical CPU devices, /CPU:0 data and /CPU:1 model, with a WARNING
            (an error under --require-gpu).
  cpu_multi no GPU, several model devices (or multi_worker): one logical CPU device for the
            data and one per model replica.
  multi     --data-gpu A --model-gpus B,C,...: a tf.distribute strategy over the model GPUs
            (docs/distributed.md). Only A and the model GPUs are visible. MirroredStrategy:
            A is /GPU:0, the model GPUs /GPU:1../GPU:N. MultiWorkerMirroredStrategy takes a
            worker's FIRST local devices as its replicas, so there the model GPUs are
            /GPU:0../GPU:N-1 and A is /GPU:N (without a GPU: model /CPU:0, data /CPU:1).

The strategy (plan.strategy) is "none" for the one-model-device plans (no tf.distribute in the
step), "mirrored" for several model devices on this machine, "multi_worker" for several machines
(TF_CONFIG, or a Slurm job step; myxtts.cluster checks TF_CONFIG before TensorFlow starts).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import platform
import shutil
import subprocess
import sys
from typing import List, Optional, Sequence, Tuple

from myxtts.cluster import Cluster, read_cluster
from myxtts.errors import MyXTTSError

logger = logging.getLogger("myxtts.devices")

ENV_DATA_GPU = "MYXTTS_DATA_GPU"
ENV_MODEL_GPU = "MYXTTS_MODEL_GPU"
STRATEGIES = ("auto", "mirrored", "multi_worker")


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

    mode: str  # "dual" | "single" | "split" | "cpu" | "multi" | "cpu_multi"
    data_device: str  # logical device name after configuration, e.g. "/GPU:0"
    model_device: str  # the (first) model device: it holds validation and the run's metrics
    physical_data_gpu: Optional[int] = None
    physical_model_gpu: Optional[int] = None
    data_memory_mb: Optional[int] = None
    model_memory_mb: Optional[int] = None
    gpus_found: Sequence[GpuInfo] = ()
    strategy: str = "none"  # "none" | "mirrored" | "multi_worker"
    # Under a strategy: every model device (replica) of this machine, and their physical GPUs.
    model_devices: Tuple[str, ...] = ()
    physical_model_gpus: Tuple[int, ...] = ()
    cluster: Optional[Cluster] = None  # multi_worker: this worker's place in the cluster

    @property
    def uses_gpu(self) -> bool:
        return self.mode not in ("cpu", "cpu_multi")

    @property
    def replica_devices(self) -> Tuple[str, ...]:
        """The model devices of this machine (one without a strategy)."""
        return self.model_devices or (self.model_device,)

    @property
    def visible_gpus(self) -> List[int]:
        """Physical GPUs in the order they become /GPU:0, /GPU:1, ..."""
        if self.mode == "multi":
            models = list(self.physical_model_gpus)
            return (models + [self.physical_data_gpu] if self.strategy == "multi_worker"
                    else [self.physical_data_gpu] + models)
        if self.mode == "dual":
            return [self.physical_data_gpu, self.physical_model_gpu]
        return [self.physical_data_gpu]

    def mapping_line(self) -> str:
        """The one line that says what was mapped where."""
        engine = {"mirrored": "MirroredStrategy",
                  "multi_worker": "MultiWorkerMirroredStrategy"}.get(self.strategy)
        if self.mode == "cpu_multi":
            return (f"data → {self.data_device}, model replicas → "
                    f"{', '.join(self.model_devices)} ({len(self.model_devices) + 1} logical CPU "
                    f"devices: no GPU found; {engine})")
        if self.mode == "multi":
            replicas = ", ".join(f"{d} (physical {g})" for d, g in
                                 zip(self.model_devices, self.physical_model_gpus))
            return (f"data → {self.data_device} (physical {self.physical_data_gpu}), model "
                    f"replicas → {replicas} ({engine})")
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


def gpu_list_text(gpus: Sequence[GpuInfo]) -> str:
    """"GPUs found: GPU 0 (...); GPU 1 (...)", for errors and the start-up report."""
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
                 model_gpus: Optional[Sequence[int]] = None,
                 strategy: str = "auto",
                 use_env: bool = True) -> DevicePlan:
    """Decides the device plan. Flags win over MYXTTS_DATA_GPU / MYXTTS_MODEL_GPU.

    `gpus` is the physical inventory (defaults to `discover_gpus()`). `model_gpus` (--model-gpus)
    asks for several model devices; `strategy` (--strategy: auto | mirrored | multi_worker)
    picks the tf.distribute engine, auto = multi_worker when TF_CONFIG is set (read only with
    `use_env`), mirrored for several model devices, none otherwise.
    Raises DeviceConfigurationError with a one-paragraph message for impossible requests.
    """
    if strategy not in STRATEGIES:
        raise DeviceConfigurationError(f"--strategy {strategy} is not one of "
                                       f"{', '.join(STRATEGIES)}.")
    if model_gpus is not None and model_gpu is not None:
        raise DeviceConfigurationError(
            f"--model-gpus {','.join(map(str, model_gpus))} and --model-gpu {model_gpu} both name "
            f"the model devices: pass --model-gpus for several (e.g. --model-gpus 1,2,3) or "
            f"--model-gpu for one, not both.")
    if model_gpus is not None:
        _check_gpu_list(model_gpus)
    if use_env:
        data_gpu = data_gpu if data_gpu is not None else _env_int(ENV_DATA_GPU)
        if model_gpus is None:
            model_gpu = model_gpu if model_gpu is not None else _env_int(ENV_MODEL_GPU)
    cluster = read_cluster(strategy) if use_env else None
    if strategy == "auto":
        strategy = ("multi_worker" if cluster else
                    "mirrored" if model_gpus is not None and len(model_gpus) > 1 else "none")
    elif strategy == "multi_worker" and cluster is None:
        raise DeviceConfigurationError(
            "--strategy multi_worker needs to know the cluster: set TF_CONFIG on every worker "
            "(docs/distributed.md has examples for two machines and Kubernetes) or start the "
            "workers as the tasks of a Slurm job step (srun).")
    if gpus is None:
        gpus = discover_gpus()
    gpus = tuple(gpus)
    if strategy != "none":
        if model_gpus is None:
            model_gpus = [model_gpu if model_gpu is not None else 1 if gpus else 0]
        return _plan_distributed(strategy, data_gpu, list(model_gpus), gpus, cluster,
                                 require_gpu=require_gpu, split_gpu=split_gpu,
                                 data_memory_mb=data_memory_mb, model_memory_mb=model_memory_mb)
    if model_gpus is not None:  # one model device: the plans without a strategy
        model_gpu = model_gpus[0]
    for flag, value in (("--data-gpu", data_gpu), ("--model-gpu", model_gpu)):
        if value is not None and value < 0:
            raise DeviceConfigurationError(
                f"{flag} {value} is not a GPU index: indices start at 0. "
                f"{gpu_list_text(gpus)}. Pass an index from that list, or leave the flag out.")
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
                f"{gpu_list_text(gpus)}. Choose indices between 0 and {count - 1}.")

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


def parse_gpu_list(text: str, flag: str = "--model-gpus") -> List[int]:
    """"1,2,3" → [1, 2, 3]; a clear error for anything else (before TensorFlow starts)."""
    parts = [p.strip() for p in str(text).split(",")]
    if not parts or any(not p.lstrip("-").isdigit() for p in parts):
        raise DeviceConfigurationError(
            f"{flag} {text!r} is not a comma-separated list of GPU indices. Write it like "
            f"{flag} 1,2,3 (no spaces needed), one index per model device.")
    ids = [int(p) for p in parts]
    _check_gpu_list(ids, flag)
    return ids


def _check_gpu_list(ids: Sequence[int], flag: str = "--model-gpus") -> None:
    text = ",".join(map(str, ids))
    if not ids:
        raise DeviceConfigurationError(f"{flag} is empty: name at least one GPU index, e.g. "
                                       f"{flag} 1,2.")
    if len(set(ids)) != len(ids):
        raise DeviceConfigurationError(
            f"{flag} {text} names a GPU twice: each model replica needs its own device. List "
            f"each index once (e.g. {flag} {','.join(map(str, sorted(set(ids))))}).")
    negative = [i for i in ids if i < 0]
    if negative:
        raise DeviceConfigurationError(f"{flag} {text}: {negative[0]} is not a GPU index "
                                       f"(indices start at 0).")


def _plan_distributed(strategy: str, data_gpu: Optional[int], model_gpus: List[int],
                      gpus: Tuple[GpuInfo, ...], cluster: Optional[Cluster], *,
                      require_gpu: bool, split_gpu: bool, data_memory_mb: Optional[int],
                      model_memory_mb: Optional[int]) -> DevicePlan:
    """The plans with a tf.distribute strategy: one data device and len(model_gpus) model
    devices on this machine (see the module docstring for the numbering)."""
    n = len(model_gpus)
    ids = ",".join(map(str, model_gpus))
    if split_gpu:
        raise DeviceConfigurationError(
            f"--split-gpu splits one GPU into a data and a model device; with --strategy "
            f"{strategy} (model devices {ids}) every model replica needs a device of its own. "
            f"Drop --split-gpu.")
    if not gpus:
        if require_gpu:
            raise DeviceConfigurationError(
                "--require-gpu was given but no GPU was found on this machine (nvidia-smi and "
                "TensorFlow list none). Check the NVIDIA driver and CUDA installation with "
                "`nvidia-smi`, or drop --require-gpu to train on logical CPU devices.")
        if strategy == "multi_worker":
            if n > 1:
                raise DeviceConfigurationError(
                    f"--model-gpus {ids}: without a GPU, MultiWorkerMirroredStrategy runs one "
                    f"replica per worker (on /CPU:0), so a worker cannot have {n} model devices. "
                    f"Pass one model device per worker, or run on GPUs.")
            models = ("/CPU:0",)
            data = "/CPU:1"
        else:
            models = tuple(f"/CPU:{i + 1}" for i in range(n))
            data = "/CPU:0"
        logger.warning("No GPU found: the data device and the %d model device(s) are logical "
                       "CPU devices.", n)
        return DevicePlan("cpu_multi", data, models[0], gpus_found=gpus, strategy=strategy,
                          model_devices=models, cluster=cluster)
    count = len(gpus)
    for gpu in model_gpus + ([data_gpu] if data_gpu is not None else []):
        if gpu >= count:
            flag = "--data-gpu" if gpu == data_gpu and gpu not in model_gpus else "--model-gpus"
            raise DeviceConfigurationError(
                f"{flag}: GPU {gpu} does not exist: this machine has {count} GPU(s). "
                f"{gpu_list_text(gpus)}. Choose indices between 0 and {count - 1}.")
    if data_gpu is None:
        free = [g.index for g in gpus if g.index not in model_gpus]
        if not free:
            raise DeviceConfigurationError(
                f"--model-gpus {ids} takes every GPU of this machine, so none is left for the "
                f"data device. Name fewer model GPUs, or the data GPU with --data-gpu. "
                f"{gpu_list_text(gpus)}.")
        data_gpu = free[0]
    if data_gpu in model_gpus:
        raise DeviceConfigurationError(
            f"--data-gpu {data_gpu} is also in --model-gpus {ids}: the data device featurises "
            f"every replica's batch and needs a GPU of its own. Pick a data GPU outside the "
            f"model GPUs. {gpu_list_text(gpus)}.")
    if strategy == "multi_worker":
        models = tuple(f"/GPU:{i}" for i in range(n))
        data = f"/GPU:{n}"
    else:
        models = tuple(f"/GPU:{i + 1}" for i in range(n))
        data = "/GPU:0"
    return DevicePlan("multi", data, models[0], data_gpu, model_gpus[0], data_memory_mb,
                      model_memory_mb, gpus, strategy=strategy, model_devices=models,
                      physical_model_gpus=tuple(model_gpus), cluster=cluster)


# --------------------------------------------------------------------------------------------
# Configuration (before TensorFlow is imported)
# --------------------------------------------------------------------------------------------

def tensorflow_initialized() -> bool:
    """True when TensorFlow's runtime already started (its devices can no longer change)."""
    if "tensorflow" not in sys.modules:
        return False
    from tensorflow.python.eager import context  # pylint: disable=import-outside-toplevel
    return bool(context.context()._initialized)  # pylint: disable=protected-access


def choose_cpu_kernels() -> None:
    """TensorFlow's oneDNN CPU kernels on every x86-64 CPU, unless the user set
    TF_ENABLE_ONEDNN_OPTS. Call before TensorFlow is imported (it reads the setting once).

    TensorFlow turns them on by itself only on CPUs with AVX-512 VNNI or BF16 or AMX. Without
    them (an AMD EPYC of the Zen 3 family, AVX2: docs/training.md) its other kernels ran a
    training step 1.5-1.7 times slower and have no input gradient for a dilated convolution
    called directly (tf.nn.conv1d with dilations > 1)."""
    if platform.machine().lower() in ("x86_64", "amd64"):
        os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "1")


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
        user_filter = _user_visible_filter()
        names = [user_filter[i] if user_filter is not None else str(i)
                 for i in plan.visible_gpus]
        os.environ["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
        os.environ["CUDA_VISIBLE_DEVICES"] = ",".join(names)
        os.environ["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    choose_cpu_kernels()

    import tensorflow as tf  # pylint: disable=import-outside-toplevel

    if plan.mode == "cpu":
        cpu = tf.config.list_physical_devices("CPU")[0]
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()])
        logger.warning("No GPU found: running on two logical CPU devices. %s", plan.mapping_line())
        return plan
    if plan.mode == "cpu_multi":
        cpu = tf.config.list_physical_devices("CPU")[0]
        count = len(plan.model_devices) + 1
        tf.config.set_logical_device_configuration(
            cpu, [tf.config.LogicalDeviceConfiguration() for _ in range(count)])
        logger.warning("No GPU found: running on %d logical CPU devices. %s", count,
                       plan.mapping_line())
        return plan

    gpus = tf.config.list_physical_devices("GPU")
    expected = len(plan.visible_gpus)
    if len(gpus) < expected:
        raise DeviceConfigurationError(
            f"After restricting CUDA_VISIBLE_DEVICES to {os.environ['CUDA_VISIBLE_DEVICES']}, "
            f"TensorFlow sees {len(gpus)} GPU(s) instead of {expected}. Check that this "
            f"TensorFlow build has GPU support (`pip install tensorflow[and-cuda]`) and that "
            f"`nvidia-smi` lists the GPUs. {gpu_list_text(plan.gpus_found)}.")
    if plan.mode == "split":
        tf.config.set_logical_device_configuration(gpus[0], [
            tf.config.LogicalDeviceConfiguration(memory_limit=plan.data_memory_mb),
            tf.config.LogicalDeviceConfiguration(memory_limit=plan.model_memory_mb)])
    elif plan.mode in ("dual", "multi"):
        for gpu, physical in zip(gpus, plan.visible_gpus):
            limit = plan.data_memory_mb if physical == plan.physical_data_gpu else \
                plan.model_memory_mb
            if limit:
                tf.config.set_logical_device_configuration(
                    gpu, [tf.config.LogicalDeviceConfiguration(memory_limit=limit)])
    elif plan.data_memory_mb:
        tf.config.set_logical_device_configuration(
            gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=plan.data_memory_mb)])
    logger.info("Devices configured: %s", plan.mapping_line())
    return plan


# --------------------------------------------------------------------------------------------
# After configuration (TensorFlow is imported at the call, not at this module's import)
# --------------------------------------------------------------------------------------------

def get_device_context(device: Optional[str] = None):
    """A `tf.device` scope: `device` when given, else /GPU:0 when a GPU is visible, else /CPU:0."""
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if device:
        return tf.device(device)
    if tf.config.list_logical_devices("GPU"):
        return tf.device("/GPU:0")
    return tf.device("/CPU:0")
