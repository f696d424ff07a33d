"""A tf.data service dispatcher or worker, for `train_main.py --data-service HOST:PORT`.

    python -m myxtts.data_service dispatcher --port 5050 [--work-dir DIR]
    python -m myxtts.data_service worker --dispatcher HOST:5050 [--port 5051] [--host NAME]

Each runs until SIGTERM or SIGINT (Ctrl-C), then stops its server and exits with status 0.
Workers read the feature cache's shards by the paths the training client gives, so they must
see the same filesystem (docs/data.md, "tf.data service"). The logic is in
myxtts/data/service.py.
"""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from typing import Optional, Sequence

from myxtts.cli import UsageError, entry_point, flag_hint, quiet_tensorflow_start
from myxtts.data import service

logger = logging.getLogger("myxtts")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-data-service", description=__doc__.split("\n")[0])
    p.add_argument("--verbose", action="store_true",
                   help="Show TensorFlow's C++ start-up and log lines.")
    sub = p.add_subparsers(dest="role", required=True)
    d = sub.add_parser("dispatcher", help="The service's dispatcher (one per service): "
                                          "registers workers and hands out the epochs' shards.")
    d.add_argument("--port", type=int, required=True,
                   help="Port to listen on (clients pass --data-service HOST:PORT).")
    d.add_argument("--work-dir", default=None,
                   help="Journal the dispatcher's state here, so a restarted dispatcher "
                        "recovers its workers and jobs (fault-tolerant mode).")
    w = sub.add_parser("worker", help="A worker: runs the training input pipeline and serves "
                                      "its batches to the training client.")
    w.add_argument("--dispatcher", required=True, help="The dispatcher's HOST:PORT.")
    w.add_argument("--port", type=int, default=0,
                   help="Port to listen on (default: any free port; the log says which).")
    w.add_argument("--host", default=None,
                   help="The name training clients reach this worker by (default: localhost "
                        "when the dispatcher is on 127.0.0.1/localhost, else this machine's "
                        "host name).")
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    if not 0 <= args.port < 65536 or (args.role == "dispatcher" and args.port == 0):
        raise UsageError(f"--port {args.port} is not a port to listen on: pass a number from "
                         f"1 to 65535{' (or 0 for any free port)' if args.role == 'worker' else ''}.")
    if args.role == "worker":
        with flag_hint(f"(--dispatcher {args.dispatcher})", service.DataServiceError):
            service.parse_address(args.dispatcher)
    stop = threading.Event()
    received = []

    def on_signal(signum, _frame):
        received.append(signal.Signals(signum).name)
        stop.set()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, on_signal)
    with quiet_tensorflow_start(args.verbose):
        if args.role == "dispatcher":
            server = service.start_dispatcher(args.port, args.work_dir)
        else:
            server = service.start_worker(args.dispatcher, args.port, args.host)
    port = service.bound_port(server)
    if args.role == "dispatcher":
        logger.warning("tf.data service dispatcher LISTENING on port %d (all interfaces)%s. "
                       "Start workers with `python -m myxtts.data_service worker --dispatcher "
                       "<this host>:%d`; train with `--data-service <this host>:%d`.", port,
                       f", journal in {args.work_dir}" if args.work_dir else "", port, port)
    else:
        logger.warning("tf.data service worker LISTENING on port %d (clients reach it at "
                       "%s:%d), registered with the dispatcher at %s.", port,
                       service.worker_host(args.dispatcher, args.host), port, args.dispatcher)
    logger.info("Running until SIGTERM or SIGINT (Ctrl-C).")
    while not stop.wait(0.5):
        pass
    logger.warning("%s received: stopping the tf.data service %s on port %d.", received[0],
                   args.role, port)
    server.stop()
    logger.info("Stopped.")
    return 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
