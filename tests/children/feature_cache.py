"""Child process of tests/test_feature_cache.py: builds the feature cache of a dataset folder
with 2 utterances per shard and is killed with SIGKILL while it writes shard KILL_AT.

    python -m tests.children.feature_cache DATASET_DIR CACHE_DIR KILL_AT

The kill comes from the build itself (no timing): the first record of shard KILL_AT is written
to its temporary file, then the process kills itself.
"""

import os
import signal
import sys


def main() -> None:
    dataset, cache_dir, kill_at = sys.argv[1], sys.argv[2], int(sys.argv[3])
    # pylint: disable=import-outside-toplevel
    from myxtts.config import XTTSConfig
    from myxtts.data import cache as cache_lib
    from myxtts.data.prepare import prepare_dataset

    config = XTTSConfig.from_yaml("configs/tiny.yaml")
    config.override({"data.feature_mode": "cached", "data.val_fraction": 0.0,
                     "data.num_workers": 1}, source="test")
    items = prepare_dataset(config, dataset).items["train"]
    cache_lib.ITEMS_PER_SHARD = 2
    example = cache_lib._example  # pylint: disable=protected-access

    def example_or_die(uid, position, mel):
        if position == kill_at * 2 + 1:  # the shard's first record is in its temporary file
            os.kill(os.getpid(), signal.SIGKILL)
        return example(uid, position, mel)

    cache_lib._example = example_or_die  # pylint: disable=protected-access
    cache_lib.ensure_cache(items, "train", config.data, cache_dir, "/CPU:0")
    raise AssertionError("the child should have been killed")


if __name__ == "__main__":
    main()
