"""Child process of tests/test_cli_start.py: runs train_main.py as `python train_main.py ARGS`
would (from the repository), then reports on stdout's last line whether TensorFlow had been
imported when it exited.

    python -m tests.children.cli_start ARGS
    ...
    tensorflow imported: False
"""

import runpy
import sys


def main() -> None:
    sys.argv = ["train_main.py"] + sys.argv[1:]
    try:
        runpy.run_path("train_main.py", run_name="__main__")
    finally:
        print("tensorflow imported:", "tensorflow" in sys.modules)


if __name__ == "__main__":
    main()
