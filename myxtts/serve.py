"""Serve an exported model over HTTP: an OpenAI-compatible speech API, stored voices and a page.

    myxtts-serve --model models/myxtts                  # then open http://127.0.0.1:8000/
    python -m myxtts.serve --model models/myxtts/3 --port 9000 --voices-dir voices \
        --api-key "$KEY" --max-batch 8 --max-wait-ms 30

--model is what myxtts-export wrote: the export folder (its newest version is served) or one
version folder, a SavedModel (TensorFlow) or an on-device LiteRT/ONNX export (`--format
tflite|onnx`: served without TensorFlow, which need not be installed). Voices are voice files
in --voices-dir (default voices/, created if needed): uploads land there, and files
`myxtts-synthesize --save-voice voices/NAME.npz` wrote with the same checkpoint are served as
NAME. docs/serving.md has the API. SIGTERM or Ctrl+C stop taking requests, finish the ones in
flight, then exit: status 0 after SIGTERM, 130 after Ctrl+C (the shell's status for an
interrupted command), without a traceback.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
from typing import Optional, Sequence

from myxtts.cli import UsageError, entry_point, quiet_tensorflow_start, require_path
from myxtts.serving import WORKERS

logger = logging.getLogger("myxtts")

GRACEFUL_SHUTDOWN_SECONDS = 120  # the longest SIGTERM waits for requests in flight


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-serve", description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True,
                   help="The export folder myxtts-export wrote (newest version served) or one "
                        "of its version folders: a SavedModel, or an on-device LiteRT/ONNX "
                        "export (served without TensorFlow).")
    p.add_argument("--host", default="127.0.0.1",
                   help="Address to listen on (0.0.0.0: every interface; then set --api-key).")
    p.add_argument("--port", type=int, default=8000, help="TCP port.")
    p.add_argument("--voices-dir", default="voices",
                   help="Folder of voice files (.npz): uploads are stored here.")
    p.add_argument("--api-key", default=os.environ.get("MYXTTS_API_KEY"),
                   help="Require 'Authorization: Bearer KEY' on every endpoint but /health and "
                        "the page (default: $MYXTTS_API_KEY; none: no key needed).")
    p.add_argument("--max-batch", type=int, default=8,
                   help="Most sentences decoded together.")
    p.add_argument("--max-wait-ms", type=float, default=30.0,
                   help="Longest a request waits for others to share its batch.")
    p.add_argument("--workers", type=int, default=WORKERS,
                   help="Batches decoded side by side (each decodes up to --max-batch "
                        "sentences; a request arriving while one batch runs starts in another).")
    p.add_argument("--max-upload-mb", type=float, default=20.0,
                   help="Largest reference recording POST /v1/voices accepts.")
    p.add_argument("--verbose", action="store_true",
                   help="Show TensorFlow's C++ start-up and log lines (hidden by default).")
    return p


def check_args(args: argparse.Namespace) -> None:
    require_path("--model", args.model, "dir",
                 "the folder myxtts-export wrote (e.g. models/myxtts) or one of its version "
                 "folders")
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} must be 0-65535.")
    if args.max_batch < 1:
        raise UsageError(f"--max-batch {args.max_batch} must be 1 or more.")
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers} must be 1 or more.")
    if args.max_wait_ms < 0:
        raise UsageError(f"--max-wait-ms {args.max_wait_ms} must be 0 or more.")
    if args.max_upload_mb <= 0:
        raise UsageError(f"--max-upload-mb {args.max_upload_mb} must be more than 0.")
    if args.api_key is not None and not args.api_key.strip():
        raise UsageError("--api-key is empty: pass a key, or leave the flag out for none.")


def model_name(path: str) -> str:
    """The served model's name: the export folder's (the parent of a version folder)."""
    path = os.path.normpath(os.path.abspath(path))
    name = os.path.basename(path)
    return os.path.basename(os.path.dirname(path)) if name.isdigit() else name


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    with quiet_tensorflow_start(args.verbose):
        import uvicorn
        from myxtts.serving.app import UploadLimits, create_app
        from myxtts.serving.engine import SpeechEngine
        from myxtts.serving.metrics import ServerMetrics
        from myxtts.serving.models import load_model
        from myxtts.serving.voice_store import VoiceStore
        model = load_model(args.model)
    store = VoiceStore(args.voices_dir, model.require_fingerprint(), model.checkpoint,
                       model.decoder_fingerprint if model.speaks_adapted else None)
    metrics = ServerMetrics()
    engine = SpeechEngine(model, max_batch=args.max_batch, max_wait_ms=args.max_wait_ms,
                          workers=args.workers, on_batch=metrics.batch_size.observe)
    name = model_name(args.model)
    app = create_app(model, store, engine, metrics, name, api_key=args.api_key,
                     limits=UploadLimits(max_bytes=int(args.max_upload_mb * 1024 * 1024)))
    logger.info("Serving %s (%s) on http://%s:%d/ : the page there, the API at "
                "/v1/audio/speech, docs at /docs; voices in %s (%d stored%s); batches of up "
                "to %d sentences waiting up to %g ms; API key %s.", name, model.describe(),
                args.host, args.port, args.voices_dir, len(store.list()),
                "" if store.list() else ": upload one on the page or POST /v1/voices",
                engine.max_batch, args.max_wait_ms, "required" if args.api_key else "not required")
    return serve_until_stopped(uvicorn.Config(
        app, host=args.host, port=args.port, log_level="info",
        timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_SECONDS))


def serve_until_stopped(config) -> int:
    """Runs uvicorn with `config` until SIGTERM or SIGINT has shut it down gracefully; the exit
    status: 0 after SIGTERM (a requested stop), 130 after SIGINT (Ctrl+C, as shells report an
    interrupted command). uvicorn itself re-raises the caught signal once it has stopped, which
    after Ctrl+C ends the process with a KeyboardInterrupt traceback out of asyncio."""
    # pylint: disable=import-outside-toplevel  (uvicorn only when serving)
    import uvicorn
    caught = []

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            with super().capture_signals():
                yield
                caught.extend(self._captured_signals)
                self._captured_signals.clear()  # stopped already: nothing left to re-raise

    Server(config).run()
    return 128 + signal.SIGINT if signal.SIGINT in caught else 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
