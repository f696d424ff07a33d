"""Child process of tests/test_config.py: imports MODULES in a fresh interpreter and exits with
status 1 if that imported TensorFlow (0 otherwise).

    python -m tests.children.config MODULE...
"""

import importlib
import sys


def main() -> None:
    for name in sys.argv[1:]:
        importlib.import_module(name)
    sys.exit(1 if "tensorflow" in sys.modules else 0)


if __name__ == "__main__":
    main()
