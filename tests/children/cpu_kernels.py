"""Child process of tests/test_cpu_kernels.py: configures the devices as train_main.py does
(TF_ENABLE_ONEDNN_OPTS comes from the environment it is given), then takes one gradient of the
reading probe, whose convolutions are dilated, and reports on stdout's last line (JSON) which CPU
kernels ran and whether the gradient came out finite.

    python -m tests.children.cpu_kernels
"""

import json

from myxtts import devices


def main() -> None:
    devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the devices)
    import tensorflow as tf

    from myxtts import device_probes
    from myxtts.models.reading_probe import ReadingProbe

    probe = ReadingProbe(vocab_size=12, n_mels=16, channels=8)
    mel = tf.random.stateless_normal([2, 40, 16], seed=[1, 2])
    with tf.GradientTape() as tape:
        tape.watch(mel)
        loss = tf.reduce_sum(tf.square(probe(mel)))
    gradients = tape.gradient(loss, [mel] + probe.trainable_weights)
    finite = all(bool(tf.reduce_all(tf.math.is_finite(g))) for g in gradients)
    print(json.dumps({"kernels": device_probes.cpu_kernels(), "finite": finite}))


if __name__ == "__main__":
    main()
