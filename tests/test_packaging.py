"""Dependencies are written once: requirements.txt and requirements-dev.txt list what
pyproject.toml's dependencies and `dev` extra list, and the runtime distribution
(packaging/myxtts-lite) takes its requirements from pyproject.toml and packages only modules that
do not import TensorFlow."""

import ast
import importlib.util
import os
import sys
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _project():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
        return tomllib.load(f)["project"]


def _requirements(name):
    with open(os.path.join(REPO, name), encoding="utf-8") as f:
        return [line.strip() for line in f
                if line.strip() and not line.lstrip().startswith(("#", "-r"))]


def _lite_setup():
    # setup.py calls setup() at import; its helpers are what the build uses.
    path = os.path.join(REPO, "packaging", "myxtts-lite", "setup.py")
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read())
    tree.body = [node for node in tree.body if not (isinstance(node, ast.Expr) and
                                                    isinstance(node.value, ast.Call))]
    namespace = {"__file__": path}
    exec(compile(tree, path, "exec"), namespace)  # pylint: disable=exec-used
    return namespace


def test_requirements_files_list_what_pyproject_lists():
    project = _project()
    assert _requirements("requirements.txt") == project["dependencies"]
    assert _requirements("requirements-dev.txt") == project["optional-dependencies"]["dev"]


def test_the_runtime_distribution_takes_pyprojects_versions_and_no_tensorflow_module():
    lite = _lite_setup()
    dependencies = lite["dependencies"]()
    assert set(dependencies) <= set(_project()["dependencies"])
    assert not any(d.lower().startswith(("tensorflow", "keras", "librosa")) for d in dependencies)
    modules = lite["runtime_modules"]()
    assert "myxtts.lite.synthesizer" in modules and "myxtts.data.text" in modules
    for module in modules:
        origin = importlib.util.find_spec(module).origin
        with open(origin, encoding="utf-8") as f:
            tree = ast.parse(f.read())
        imported = {alias.name.split(".")[0] for node in ast.walk(tree)
                    if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module.split(".")[0] for node in ast.walk(tree)
                     if isinstance(node, ast.ImportFrom) and node.module and node.level == 0}
        assert not imported & {"tensorflow", "keras", "librosa"}, module
        # Optional imports the runtime guards: phonemizer (use_phonemes), tflite_runtime (the
        # older LiteRT package).
        assert imported - {"myxtts"} <= set(sys.stdlib_module_names) | set(
            lite["DISTRIBUTIONS"]) | {"phonemizer", "tflite_runtime"}, (module, imported)
