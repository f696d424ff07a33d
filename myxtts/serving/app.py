"""The HTTP API of myxtts-serve (FastAPI on uvicorn); docs/serving.md shows every endpoint.

    POST   /v1/audio/speech     OpenAI-compatible text → audio (whole file, or streamed PCM/WAV)
    POST   /v1/voices           a reference recording (multipart `file`, optional `name`) → voice
    GET    /v1/voices           the stored voices
    DELETE /v1/voices/{id}      forget one
    GET    /v1/models           the served model
    GET    /health              liveness (never needs the API key)
    GET    /metrics             Prometheus text
    GET    /                    the web page (static files from myxtts/serving/static)
    GET    /docs                OpenAPI docs (served from the fastapi-offline package, no CDN)

Every error is a 4xx (or 5xx) with an OpenAI-style JSON body, {"error": {"message", "type",
"param", "code"}}, `param` naming the field at fault. With an API key, every path needs
`Authorization: Bearer KEY` except /health and the static shells that hold no data: the page
(/, /static/...) and the API description (/docs, /openapi.json and their assets); the page asks
for the key and sends it with each call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import hmac
import logging
import os
import re
import tempfile
import time
from typing import Optional

import numpy as np
import soundfile as sf
from fastapi import File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from myxtts.inference.reference_audio import ReferenceAudioError, ReferenceTooShortError
from myxtts.inference.tempo import MAX_SPEED, MIN_SPEED
from myxtts.inference.text_front_end import UnknownCharactersError, UnknownLanguageError
from myxtts.inference.wav_stream import pcm16, wav_header
from myxtts.serving import audio_formats
from myxtts.serving.engine import SpeechEngine, SpeechJob
from myxtts.serving.metrics import ServerMetrics
from myxtts.serving.voice_store import (UnknownVoiceError, VoiceExistsError, VoiceIdError,
                                        VoiceStore, check_voice_id)

logger = logging.getLogger("myxtts.serving")

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static")
MAX_INPUT_CHARACTERS = 4096
PUBLIC_PATHS = ("/health", "/", "/docs", "/docs/oauth2-redirect", "/openapi.json")
PUBLIC_PREFIXES = ("/static/", "/static-offline-docs/")


@dataclasses.dataclass(frozen=True)
class UploadLimits:
    """What POST /v1/voices accepts."""

    max_bytes: int = 20 * 1024 * 1024
    max_seconds: float = 60.0


class ApiError(Exception):
    """An answer other than 200: status, message, the field at fault, a short code."""

    def __init__(self, status: int, message: str, param: Optional[str] = None,
                 code: Optional[str] = None):
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


def error_body(status: int, message: str, param: Optional[str], code: Optional[str]) -> dict:
    kind = "invalid_request_error" if status < 500 else "server_error"
    if status == 401:
        kind = "authentication_error"
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


def _error_response(status: int, message: str, param: Optional[str] = None,
                    code: Optional[str] = None) -> JSONResponse:
    return JSONResponse(error_body(status, message, param, code), status_code=status)


class SpeechRequest(BaseModel):
    """POST /v1/audio/speech. `model` is accepted and ignored (one model is served)."""

    model_config = ConfigDict(extra="ignore")

    input: str
    voice: str
    model: Optional[str] = None
    response_format: str = "mp3"
    speed: float = 1.0
    language: Optional[str] = None
    stream: bool = False


class _End:
    def __init__(self, error: Optional[BaseException]):
        self.error = error


class ApiKeyAndMetrics:
    """ASGI middleware: the API key check (hmac.compare_digest; the key is never logged) and
    the request counts by endpoint and status. Pure ASGI, so streamed bodies pass untouched."""

    def __init__(self, app, api_key: Optional[str], metrics: ServerMetrics,
                 upload_limit: int):
        self.app, self.api_key, self.metrics = app, api_key, metrics
        self.expected = f"Bearer {api_key}".encode("utf-8") if api_key else None
        self.upload_limit = upload_limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path, method = scope["path"], scope["method"]
        status = {"code": 500}

        async def counting_send(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            headers = dict(scope["headers"])
            if self.expected and not (path in PUBLIC_PATHS or path.startswith(PUBLIC_PREFIXES)) \
                    and not hmac.compare_digest(headers.get(b"authorization", b""),
                                                self.expected):
                response = _error_response(401, "This server needs an API key: send the header "
                                           "'Authorization: Bearer <key>'.", "authorization",
                                           "invalid_api_key")
                await response(scope, receive, counting_send)
                return
            length = headers.get(b"content-length", b"")
            if path == "/v1/voices" and method == "POST" and length.isdigit() and \
                    int(length) > self.upload_limit + 64 * 1024:
                response = _error_response(
                    413, f"The upload is {int(length)} bytes; at most {self.upload_limit} are "
                    f"accepted. Send a shorter recording (a few seconds of speech is enough).",
                    "file", "upload_too_large")
                await response(scope, receive, counting_send)
                return
            await self.app(scope, receive, counting_send)
        finally:
            self.metrics.requests.labels(_endpoint(path), method, str(status["code"])).inc()


def _endpoint(path: str) -> str:
    """The metrics label of a path (ids folded, unknown paths as 'other')."""
    if path.startswith("/v1/voices/"):
        return "/v1/voices/{id}"
    if path in ("/v1/audio/speech", "/v1/voices", "/v1/models", "/health", "/metrics", "/",
                "/docs", "/openapi.json"):
        return path
    return "/static" if path.startswith(PUBLIC_PREFIXES) else "other"


def _voice_json(voice_id: str, voice, store: VoiceStore) -> dict:
    try:
        created = int(os.path.getmtime(store.path(voice_id)))
    except OSError:
        created = 0
    return {"id": voice_id, "object": "voice", "references": list(voice.references),
            "created_at": created}


def _unique_id(filename: str, store: VoiceStore) -> str:
    """A voice id from an upload's file name (when the client gave no `name`)."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", os.path.splitext(os.path.basename(filename))[0])
    stem = re.sub(r"\.{2,}", ".", stem).strip("-._")[:56] or "voice"
    taken = {voice_id for voice_id, _ in store.list()}
    candidate, n = stem, 2
    while candidate in taken:
        candidate, n = f"{stem}-{n}", n + 1
    return candidate


def create_app(model, store: VoiceStore, engine: SpeechEngine,
               metrics: ServerMetrics, model_name: str, api_key: Optional[str] = None,
               limits: UploadLimits = UploadLimits()):
    """The FastAPI application; its lifespan starts and stops `engine`."""
    data = model.config.data
    languages = list(data.languages)

    @contextlib.asynccontextmanager
    async def lifespan(_app):
        engine.start()
        try:
            yield
        finally:
            await run_in_threadpool(engine.stop)

    app = FastAPIOffline(title="myxtts-serve", version="1", redoc_url=None, lifespan=lifespan,
                         description="Text to speech with stored voices (myxtts).")
    metrics.queue_depth.set_function(lambda: engine.queue_depth)

    @app.exception_handler(ApiError)
    async def api_error(_request, e: ApiError):
        return _error_response(e.status, e.message, e.param, e.code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request, e: RequestValidationError):
        first = e.errors()[0] if e.errors() else {}
        location = [str(part) for part in first.get("loc", ()) if part != "body"]
        if first.get("type") == "json_invalid":
            return _error_response(400, f"The body is not valid JSON "
                                   f"({first.get('ctx', {}).get('error', 'parse error')}).",
                                   "body", "invalid_json")
        param = ".".join(location) or "body"
        return _error_response(400, f"{param}: {first.get('msg', 'invalid')}.", param,
                               "invalid_value")

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request, e: StarletteHTTPException):
        return _error_response(e.status_code, str(e.detail), None, None)

    # ---- speech ------------------------------------------------------------------------------
    @app.post("/v1/audio/speech", response_class=Response,
              responses={200: {"content": {f.media_type: {} for f in
                                           audio_formats.FORMATS.values()}}})
    async def speech(body: SpeechRequest, request: Request):
        """Text → audio in `voice` (a stored voice id). `stream: true` sends the audio as it is
        made (response_format pcm, or wav: one header, then PCM)."""
        started = time.monotonic()
        job_args, postnet = await run_in_threadpool(_prepare, body)
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue = asyncio.Queue()

        def deliver(item):
            with contextlib.suppress(RuntimeError):  # the loop has closed: nobody listens
                loop.call_soon_threadsafe(queue.put_nowait, item)

        job = SpeechJob(*job_args, on_audio=deliver, on_end=lambda e: deliver(_End(e)),
                        sample_rate=model.sample_rate, postnet=postnet)
        try:
            engine.submit(job)
        except RuntimeError as e:
            raise ApiError(503, f"Not accepting requests: {e}.", None, "shutting_down") from None
        headers = {"X-Sample-Rate": str(model.sample_rate)}
        fmt = audio_formats.FORMATS[body.response_format]
        if body.stream:
            return StreamingResponse(_streamed(job, queue, body.response_format, started),
                                     media_type=fmt.media_type, headers=headers)
        chunks = []
        try:
            while True:
                try:
                    item = await asyncio.wait_for(queue.get(), 1.0)
                except asyncio.TimeoutError:
                    if await request.is_disconnected():
                        return Response(status_code=499)  # nobody reads it; decoding stops
                    continue
                if isinstance(item, _End):
                    if item.error is not None:
                        raise ApiError(500, f"Synthesis failed: {item.error}", None,
                                       "synthesis_failed")
                    break
                chunks.append(item)
        finally:
            job.cancel()  # no-op once done; stops the decode when the client left
        samples = np.concatenate(chunks) if chunks else np.zeros(0, np.float32)
        content = await run_in_threadpool(audio_formats.encode, samples, model.sample_rate,
                                          body.response_format)
        seconds = time.monotonic() - started
        metrics.first_byte.observe(seconds)
        metrics.latency.observe(seconds)
        metrics.audio_seconds.inc(len(samples) / model.sample_rate)
        return Response(content, media_type=fmt.media_type, headers=headers)

    def _prepare(body: SpeechRequest):
        """((sentences, language id, latents, speed), the voice's adapted postnet or None) of a
        request, or ApiError."""
        text = body.input
        if not text.strip():
            raise ApiError(400, "input is empty: pass the text to speak.", "input",
                           "empty_input")
        if len(text) > MAX_INPUT_CHARACTERS:
            raise ApiError(400, f"input has {len(text)} characters; at most "
                           f"{MAX_INPUT_CHARACTERS} are accepted. Split the text into several "
                           f"requests.", "input", "input_too_long")
        if body.response_format not in audio_formats.FORMATS:
            raise ApiError(400, f"response_format {body.response_format!r} is not one of "
                           f"{', '.join(audio_formats.FORMATS)}.", "response_format",
                           "unsupported_format")
        if body.stream and body.response_format not in audio_formats.STREAMED:
            raise ApiError(400, f"stream: true sends {' or '.join(audio_formats.STREAMED)}; "
                           f"response_format {body.response_format!r} is sent whole. Pass "
                           f"response_format 'pcm' or 'wav', or stream: false.", "stream",
                           "unsupported_stream_format")
        if not MIN_SPEED <= body.speed <= MAX_SPEED:
            raise ApiError(400, f"speed {body.speed} is outside {MIN_SPEED}-{MAX_SPEED}.",
                           "speed", "invalid_speed")
        language = body.language or data.default_language
        try:
            voice = store.get(body.voice)
        except VoiceIdError as e:
            raise ApiError(400, str(e), "voice", "invalid_voice") from None
        except UnknownVoiceError as e:
            raise ApiError(400, str(e), "voice", "voice_not_found") from None
        try:
            sentences, language_id = model.sentences(text, language)
        except UnknownLanguageError as e:
            raise ApiError(400, str(e), "language", "unknown_language") from None
        except UnknownCharactersError as e:
            raise ApiError(400, str(e), "input", "unknown_characters") from None
        latents, postnet = model.voice_inputs(voice)
        return (sentences, language_id, latents, body.speed), postnet

    async def _streamed(job: SpeechJob, queue: asyncio.Queue, response_format: str,
                        started: float):
        samples = 0
        first = True
        try:
            while True:
                item = await queue.get()
                if isinstance(item, _End):
                    if item.error is not None:
                        logger.error("A streamed request failed: %s", item.error)
                        raise item.error  # ends the chunked body early: the client sees it
                    break
                body = pcm16(item)
                if first:
                    metrics.first_byte.observe(time.monotonic() - started)
                    if response_format == "wav":
                        body = wav_header(model.sample_rate) + body
                    first = False
                samples += len(item)
                yield body
            if first and response_format == "wav":
                yield wav_header(model.sample_rate)
            metrics.latency.observe(time.monotonic() - started)
        finally:
            job.cancel()
            metrics.audio_seconds.inc(samples / model.sample_rate)

    # ---- voices ------------------------------------------------------------------------------
    @app.post("/v1/voices", status_code=201)
    async def add_voice(file: UploadFile = File(..., description="A recording of the speaker"),
                        name: Optional[str] = Form(None, description="The voice's id")):
        """A voice from a reference recording (any format soundfile reads; m4a/webm with
        ffmpeg): its latents are computed once and stored as a voice file."""
        if name is not None:
            try:
                check_voice_id(name)
            except VoiceIdError as e:
                raise ApiError(400, str(e), "name", "invalid_voice_id") from None
        suffix = os.path.splitext(file.filename or "")[1].lower()
        suffix = suffix if re.fullmatch(r"\.[a-z0-9]{1,5}", suffix) else ".audio"
        with tempfile.TemporaryDirectory(prefix="myxtts-upload-") as folder:
            path = os.path.join(folder, "reference" + suffix)
            size = 0
            with open(path, "wb") as out:
                while chunk := await file.read(1 << 20):
                    size += len(chunk)
                    if size > limits.max_bytes:
                        raise ApiError(413, f"The upload is over {limits.max_bytes} bytes. Send "
                                       f"a shorter recording (a few seconds of speech is "
                                       f"enough).", "file", "upload_too_large")
                    out.write(chunk)
            if size == 0:
                raise ApiError(400, "The uploaded file is empty: send a recording of the "
                               "speaker.", "file", "empty_upload")
            voice_id = name or _unique_id(file.filename or "voice", store)
            voice = await run_in_threadpool(_make_voice, path, file.filename or "upload")
            try:
                store.add(voice_id, voice)
            except VoiceExistsError as e:
                raise ApiError(409, str(e), "name", "voice_exists") from None
        logger.info("Voice %s made from %s", voice_id, file.filename)
        return _voice_json(voice_id, store.get(voice_id), store)

    def _make_voice(path: str, filename: str):
        with contextlib.suppress(RuntimeError, sf.LibsndfileError):  # ffmpeg formats
            seconds = sf.info(path).duration
            if seconds > limits.max_seconds:
                raise ApiError(413, f"{filename} lasts {seconds:.1f} s; at most "
                               f"{limits.max_seconds:g} s are accepted (the model reads the "
                               f"first {data.ref_max_seconds:g} s).", "file", "audio_too_long")
        try:
            return model.voice(path, name=filename)
        except ReferenceAudioError as e:
            code = "audio_too_short" if isinstance(e, ReferenceTooShortError) else "invalid_audio"
            raise ApiError(400, str(e), "file", code) from None

    @app.get("/v1/voices")
    async def list_voices():
        return {"object": "list",
                "data": [_voice_json(voice_id, voice, store) for voice_id, voice in store.list()]}

    @app.delete("/v1/voices/{voice_id}")
    async def delete_voice(voice_id: str):
        try:
            store.delete(voice_id)
        except VoiceIdError as e:
            raise ApiError(400, str(e), "voice_id", "invalid_voice_id") from None
        except UnknownVoiceError as e:
            raise ApiError(404, str(e), "voice_id", "voice_not_found") from None
        return {"id": voice_id, "object": "voice", "deleted": True}

    # ---- model, health, metrics, page --------------------------------------------------------
    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{
            "id": model_name, "object": "model", "owned_by": "myxtts",
            "created": int(os.path.getmtime(model.path)), "languages": languages,
            "default_language": data.default_language, "sample_rate": model.sample_rate,
            "response_formats": list(audio_formats.FORMATS),
            "stream_formats": list(audio_formats.STREAMED),
            "vocoder": model.vocoder_name,
            "max_input_characters": MAX_INPUT_CHARACTERS}]}

    @app.get("/health")
    async def health():
        return {"status": "ok", "model": model_name, "voices": len(store.list()),
                "queue_depth": engine.queue_depth}

    @app.get("/metrics", include_in_schema=False)
    async def prometheus():
        return Response(metrics.text(), media_type=metrics.content_type)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(os.path.join(STATIC, "index.html"))

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return ApiKeyAndMetrics(app, api_key, metrics, limits.max_bytes)

