"""Child process of tests/test_multi_worker.py: one worker, `train_main.py ARGS` as a user runs
it (TF_CONFIG from the environment), with a line when `fit` returns:

    python -m tests.children.multi_worker ARGS
    ...
    WORKER_RESULT {"digest": sha256 of the trained weights, "step": ..., "directory": where
                   this worker wrote, "run_directory": --checkpoint-dir}
"""

import hashlib
import json
import sys

import numpy as np

from myxtts.training.trainer import XTTSTrainer

fit = XTTSTrainer.fit


def observed_fit(self, pipeline):
    summary = fit(self, pipeline)
    weights = b"".join(np.ascontiguousarray(v.numpy()).tobytes()
                       for v in self.model.trainable_variables)
    print("WORKER_RESULT " + json.dumps({
        "digest": hashlib.sha256(weights).hexdigest(), "step": summary.step,
        "directory": self.directory, "run_directory": self.run_directory}), flush=True)
    return summary


def main() -> None:
    XTTSTrainer.fit = observed_fit
    sys.argv = ["train_main.py"] + sys.argv[1:]
    import train_main  # pylint: disable=import-outside-toplevel
    train_main.run()


if __name__ == "__main__":
    main()
