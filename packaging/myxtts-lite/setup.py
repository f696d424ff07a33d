"""Builds myxtts-lite from the repository's own tree: the modules are those `myxtts.lite`
imports, found by reading the imports (so a new import is packaged without a list to update),
and the dependencies are the root pyproject.toml's requirements of the packages they import
(so a version is written once)."""

import ast
import os
import re
import tempfile
import tomllib

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
# Import name → distribution name, for the runtime's third-party imports.
DISTRIBUTIONS = {"numpy": "numpy", "soundfile": "soundfile", "soxr": "soxr", "yaml": "PyYAML",
                 "ai_edge_litert": "ai-edge-litert", "onnxruntime": "onnxruntime"}


def _path(module: str) -> str:
    base = os.path.join(ROOT, *module.split("."))
    return os.path.join(base, "__init__.py") if os.path.isdir(base) else base + ".py"


def runtime_modules() -> list:
    """Every myxtts module `myxtts.lite` (and each of its modules) imports, transitively."""
    todo = ["myxtts.lite"] + [f"myxtts.lite.{name[:-3]}" for name in
                              os.listdir(os.path.join(ROOT, "myxtts", "lite"))
                              if name.endswith(".py") and name != "__init__.py"]
    seen = set()
    while todo:
        module = todo.pop()
        if module in seen or not os.path.exists(_path(module)):
            continue
        seen.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]
        with open(_path(module), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and \
                    (node.module or "").split(".")[0] == "myxtts":
                todo.append(node.module)
                todo += [f"{node.module}.{alias.name}" for alias in node.names]
            elif isinstance(node, ast.Import):
                todo += [a.name for a in node.names if a.name.split(".")[0] == "myxtts"]
    return sorted(seen)


def dependencies() -> list:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)["project"]
    by_name = {re.split(r"[<>=!~ \[;]", r, maxsplit=1)[0].lower(): r
               for r in project["dependencies"]}
    return [by_name[name.lower()] for name in DISTRIBUTIONS.values()]


def version() -> str:
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]["version"]


# Dotted py_modules bring their packages' __init__.py and nothing else of those folders: the
# trainer's modules (which import TensorFlow) stay out.
# Built in a fresh folder each time, so a module removed from the tree never lingers in a wheel.
setup(version=version(), install_requires=dependencies(),
      options={"build": {"build_base": tempfile.mkdtemp(prefix="myxtts-lite-build-")},
               "egg_info": {"egg_base": tempfile.mkdtemp(prefix="myxtts-lite-egg-")}},
      package_dir={"": os.path.relpath(ROOT, HERE)},
      py_modules=[m for m in runtime_modules()
                  if not os.path.isdir(os.path.join(ROOT, *m.split(".")))])
