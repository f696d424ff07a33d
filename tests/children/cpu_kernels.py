"""Child process of tests/test_cpu_kernels.py: configures the devices as train_main.py does
(TF_ENABLE_ONEDNN_OPTS comes from the environment it is given), then takes one gradient of the
reading probe, whose convolutions are dilated, from seeded weights and input, and reports on
stdout's last line (JSON) which CPU kernels ran and the gradient (input's and weights', flattened),
so that the parent can compare the kernel sets.

    python -m tests.children.cpu_kernels
"""

import json

from myxtts import devices


def main() -> None:
    devices.configure(devices.plan_devices(0, 1, gpus=[], use_env=False))
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the devices)
    import keras
    import tensorflow as tf

    from myxtts import device_probes
    from myxtts.models.reading_probe import ReadingProbe

    keras.utils.set_random_seed(0)
    probe = ReadingProbe(vocab_size=12, n_mels=16, channels=8)
    mel = tf.random.stateless_normal([2, 40, 16], seed=[1, 2])
    with tf.GradientTape() as tape:
        tape.watch(mel)
        loss = tf.reduce_sum(tf.square(probe(mel)))
    gradients = tape.gradient(loss, [mel] + probe.trainable_weights)
    flat = tf.concat([tf.reshape(g, [-1]) for g in gradients], axis=0)
    print(json.dumps({"kernels": device_probes.cpu_kernels(),
                      "gradient": [float(v) for v in flat.numpy()]}))


if __name__ == "__main__":
    main()
