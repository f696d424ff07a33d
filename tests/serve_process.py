"""A real `myxtts-serve` process on 127.0.0.1 for the server tests, over a tiny export.

    export = tiny_export(folder)            # folder/models/myxtts/1, a copy of one made once
                                            #   per test run
    with ServerProcess(folder) as server:   # python -m myxtts.serve --model models/myxtts ...
        httpx.get(server.url + "/health")   #   started in `folder`, relative paths
    ServerProcess(folder, terminal=True)    # the same in a pseudo-terminal of its own, as a
                                            #   user's shell runs it: .interrupt() types Ctrl-C
    ServerProcess(folder, "--model", "models/lite", blocked=("tensorflow",))
                                            # importing those fails in it; .blocked_imports()
                                            #   lists every attempt

The export is an untrained tiny checkpoint (tests.inference_helpers): decodes run to their
length cap, which is what the server's plumbing needs, not speech.
"""

import atexit
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import httpx

from tests.inference_helpers import GRIFFIN_LIM_ITERS, REFERENCE_AUDIO, make_checkpoint

EXPORT = os.path.join("models", "myxtts")  # relative to the folder the server starts in
SERVE_DECODER_STEPS = 40
START_SECONDS = 120  # TensorFlow import + SavedModel load on a busy 2-core machine


def tiny_export(folder: str) -> str:
    """folder/models/myxtts (and the checkpoint it was exported from, folder/runs/tiny): a copy
    of the tiny export made once per test run, so each test module's server has a folder of its
    own. Returns that export path."""
    export_dir = os.path.join(folder, EXPORT)
    if not os.path.isdir(os.path.join(export_dir, "1")):
        shutil.copytree(_shared_export(), folder, dirs_exist_ok=True)
    return export_dir


@functools.lru_cache(maxsize=None)
def _shared_export() -> str:
    """A folder holding runs/tiny (an untrained tiny checkpoint) and its export models/myxtts;
    removed at exit."""
    # pylint: disable=import-outside-toplevel  (TensorFlow only in the tests that need it)
    from myxtts.exporters.registry import exporter
    root = tempfile.mkdtemp(prefix="myxtts-serve-export-")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    checkpoint_dir = os.path.join(root, "runs", "tiny")
    make_checkpoint(checkpoint_dir)
    exporter("tf_serving")(checkpoint_dir, os.path.join(root, EXPORT),
                           max_decoder_steps=SERVE_DECODER_STEPS,
                           griffin_lim_iterations=GRIFFIN_LIM_ITERS)
    return root


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# Run in a new session whose controlling terminal is standard input (the pseudo-terminal), as
# the foreground job of a shell: the terminal's Ctrl-C then sends SIGINT to the command.
_IN_TERMINAL = ("import fcntl, os, sys, termios; fcntl.ioctl(0, termios.TIOCSCTTY, 0); "
                "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])")

# python -c _BLOCKING PACKAGES LOG -m MODULE ARGS: MODULE run with those top-level packages
# unimportable, each attempt appended to LOG.
_BLOCKING = """
import runpy, sys
packages, log = sys.argv[1].split(","), sys.argv[2]
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in packages:
            with open(log, "a") as f:
                print(name, file=f)
            raise ImportError("blocked: " + name)
sys.meta_path.insert(0, Block())
sys.argv = [sys.argv[4]] + sys.argv[5:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


class ServerProcess:
    """`python -m myxtts.serve --model models/myxtts --port P ...extra` started in `folder`
    (stdout and stderr in folder/serve-<port>.log), ready once /health answers. With
    `terminal`, its standard streams are a pseudo-terminal that is its controlling terminal;
    with `blocked`, importing those top-level packages fails in it (`blocked_imports`)."""

    def __init__(self, folder: str, *extra: str, terminal: bool = False,
                 blocked: tuple = ()):
        self.folder, self.extra, self.terminal = folder, list(extra), terminal
        self.blocked = blocked
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(folder, f"serve-{self.port}.log")
        self.blocked_log = os.path.join(folder, f"blocked-imports-{self.port}.txt")
        self.process = None
        self._terminal_fd = self._copier = None

    def start(self) -> "ServerProcess":
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        env.pop("MYXTTS_API_KEY", None)
        command = ["-m", "myxtts.serve", "--model", EXPORT, "--port", str(self.port), *self.extra]
        if self.blocked:
            command = ["-c", _BLOCKING, ",".join(self.blocked), self.blocked_log, *command]
        if self.terminal:
            self._terminal_fd, child = os.openpty()
            self.process = subprocess.Popen(
                [sys.executable, "-c", _IN_TERMINAL, *command], cwd=self.folder, stdin=child,
                stdout=child, stderr=child, env=env, start_new_session=True)
            os.close(child)
            self._copier = threading.Thread(target=self._copy_terminal, daemon=True)
            self._copier.start()
        else:
            with open(self.log_path, "ab") as log:
                self.process = subprocess.Popen([sys.executable, *command], cwd=self.folder,
                                                stdout=log, stderr=subprocess.STDOUT, env=env)
        deadline = time.monotonic() + START_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"myxtts-serve exited with {self.process.returncode}:\n"
                                     f"{self.log()}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.kill()
        raise AssertionError(f"myxtts-serve did not answer /health in {START_SECONDS} s:\n"
                             f"{self.log()}")

    def _copy_terminal(self) -> None:
        """What the server writes to its terminal, into the log, until the terminal closes."""
        with open(self.log_path, "ab") as log:
            while True:
                try:
                    data = os.read(self._terminal_fd, 4096)
                except OSError:  # EIO: the server's end of the terminal is closed
                    return
                if not data:
                    return
                log.write(data)
                log.flush()

    def blocked_imports(self) -> list:
        """The imports of `blocked` packages the server tried, in order."""
        if not os.path.exists(self.blocked_log):
            return []
        with open(self.blocked_log, encoding="utf-8") as f:
            return f.read().split()

    def log(self) -> str:
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def terminate(self, timeout: float = 60) -> int:
        """SIGTERM, then its exit status."""
        self.process.send_signal(signal.SIGTERM)
        return self.wait(timeout)

    def interrupt(self, timeout: float = 60) -> int:
        """Ctrl-C typed on its terminal (`terminal` servers), then its exit status."""
        os.write(self._terminal_fd, b"\x03")
        return self.wait(timeout)

    def wait(self, timeout: float) -> int:
        status = self.process.wait(timeout)
        if self._copier is not None:
            self._copier.join(10)
            os.close(self._terminal_fd)
            self._copier = None
        return status

    def kill(self) -> None:
        """SIGKILL (kill -9)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.wait(30)

    def __enter__(self) -> "ServerProcess":
        return self.start()

    def __exit__(self, *exc) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                self.terminate()
            except subprocess.TimeoutExpired:
                self.kill()


def upload_reference(client: httpx.Client, name: str, path: str = REFERENCE_AUDIO,
                     **headers) -> httpx.Response:
    with open(path, "rb") as f:
        return client.post("/v1/voices", files={"file": (os.path.basename(path), f)},
                           data={"name": name}, headers=headers)
