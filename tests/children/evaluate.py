"""Child process of tests/test_evaluate.py: runs myxtts-evaluate's guarded_main(ARGS) in a fresh
interpreter, then prints its exit code and whether TensorFlow had been imported.

    python -m tests.children.evaluate ARGS
    2 False
"""

import sys

from myxtts.evaluate import guarded_main


def main() -> None:
    code = guarded_main(sys.argv[1:])
    print(code, "tensorflow" in sys.modules)


if __name__ == "__main__":
    main()
