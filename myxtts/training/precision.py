"""Precision policy for the model device: float32, mixed float16 (with loss scaling) or mixed
bfloat16 (no loss scaling), plus the TF32 switch.

`resolve_precision` decides from `training.precision` and what the model device supports
(`myxtts.device_probes.precision_support`) and says why in one log line; `apply_precision` sets the
Keras global dtype policy, which layers read when they are CREATED, so it runs before the model
is built.
"""

from __future__ import annotations

import dataclasses
import logging

import keras
import tensorflow as tf

from myxtts.device_probes import precision_support

logger = logging.getLogger("myxtts.training")

POLICIES = {"fp32": "float32", "mixed_float16": "mixed_float16",
            "mixed_bfloat16": "mixed_bfloat16"}


@dataclasses.dataclass(frozen=True)
class PrecisionPlan:
    """The resolved precision: Keras policy name, whether the loss is scaled, TF32, and why."""

    policy: str  # "float32" | "mixed_float16" | "mixed_bfloat16"
    loss_scaling: bool
    tf32: bool
    reason: str


def resolve_precision(requested: str, device: str, allow_tf32: bool = True) -> PrecisionPlan:
    """Maps training.precision (auto | fp32 | mixed_float16 | mixed_bfloat16) onto `device`."""
    support = precision_support(device)
    tf32 = allow_tf32 and support.tf32
    if requested == "auto":
        if support.fp16:
            return PrecisionPlan("mixed_float16", True, tf32,
                                 f"auto: {support.description} has fp16 tensor cores "
                                 f"→ mixed_float16 with dynamic loss scaling")
        return PrecisionPlan("float32", False, tf32,
                             f"auto: {support.description} has no fp16 tensor cores → float32")
    if requested == "mixed_bfloat16" and "GPU" in device.upper() and not support.bf16:
        return PrecisionPlan("float32", False, tf32,
                             f"mixed_bfloat16 requested but {support.description} does not "
                             f"support bf16 (needs compute capability 8.0+) → float32")
    policy = POLICIES[requested]
    fast = {"float32": True, "mixed_float16": support.fp16,
            "mixed_bfloat16": support.bf16}[policy]
    reason = f"{requested} requested on {support.description}"
    if not fast:
        reason += " (runs, but this device has no fast units for it: expect it to be slower " \
                  "than fp32)"
    return PrecisionPlan(policy, policy == "mixed_float16", tf32, reason)


def apply_precision(plan: PrecisionPlan) -> None:
    """Sets the Keras global dtype policy and the TF32 switch, and logs the decision."""
    keras.mixed_precision.set_global_policy(plan.policy)
    tf.config.experimental.enable_tensor_float_32_execution(plan.tf32)
    logger.info("Precision: %s%s, TF32 %s — %s", plan.policy,
                " + loss scaling" if plan.loss_scaling else "",
                "on" if plan.tf32 else "off", plan.reason)
