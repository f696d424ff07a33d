"""The Prometheus metrics of myxtts-serve (GET /metrics, text format), in a registry of their
own (two servers in one process do not share counts)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST

_SECONDS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)


class ServerMetrics:
    """Requests by endpoint and status, speech latency and time to first byte, the engine's
    queue depth and batch sizes, and the audio seconds made."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self):
        self.registry = CollectorRegistry()
        self.requests = Counter("myxtts_requests", "HTTP requests by endpoint and status",
                                ["endpoint", "method", "status"], registry=self.registry)
        self.latency = Histogram("myxtts_speech_latency_seconds",
                                 "POST /v1/audio/speech: request to last byte",
                                 buckets=_SECONDS, registry=self.registry)
        self.first_byte = Histogram("myxtts_speech_time_to_first_byte_seconds",
                                    "POST /v1/audio/speech: request to first audio byte",
                                    buckets=_SECONDS, registry=self.registry)
        self.queue_depth = Gauge("myxtts_queue_depth", "Sentences waiting for a batch",
                                 registry=self.registry)
        self.batch_size = Histogram("myxtts_batch_size", "Sentences decoded in one batch",
                                    buckets=(1, 2, 3, 4, 6, 8, 12, 16, 24, 32),
                                    registry=self.registry)
        self.audio_seconds = Counter("myxtts_audio_seconds", "Seconds of audio made",
                                     registry=self.registry)

    def text(self) -> bytes:
        return generate_latest(self.registry)
