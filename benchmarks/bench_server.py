"""myxtts-serve under concurrent clients: throughput, latency and time to first byte.

    python benchmarks/bench_server.py --model models/myxtts [models/myxtts-tflite ...]
        --reference speaker.wav [--clients 1,4,8,16] [--requests 4] [--max-batch 16]
        [--max-wait-ms 30] [--workers 2] [--stream] [--port 0]

Starts the real server (`python -m myxtts.serve`, its own process, a fresh voices folder in a
temporary directory) on 127.0.0.1, makes the voice from --reference with POST /v1/voices, warms
up (one request per text, alone, then one round of the largest client count, so tracing and
first-call costs are out of every figure), then for each client count C runs C client threads,
each sending --requests requests one after another (a closed loop: a client sends its next
request when the last answer has fully arrived). Each request is one sentence of TEXTS (the
clients start at different sentences), response_format pcm; with --stream, stream: true, so the
first byte comes while the rest is decoded. Per client count the table gives:
  requests, lost   requests sent, and those not answered 200 with audio,
  audio s          seconds of audio received (pcm bytes / 2 / sample rate),
  wall s           from the first request sent to the last answer received,
  throughput       audio s / wall s (seconds of speech made per second),
  p50/p95 latency  request sent → last byte, seconds,
  p50/p95 TTFB     request sent → first body byte, seconds,
  mean batch       sentences per decoded batch in that round (from /metrics).
Then the goal of the speech-server issue: at 8 clients, throughput >= 3x one-at-a-time (the
1-client row) and p95 latency <= 3x the single-request latency (1-client p50), no request lost;
and the server's peak resident memory (VmHWM of its process, read before it stops). With several
--model exports (a SavedModel and an on-device one, say) each is served and measured in turn,
and each one's peak memory is given as a share of the first's. All figures come from this one
run.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time

import httpx
import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from tests.serve_process import free_port  # noqa: E402

# Harvard sentences (public domain), one request each.
TEXTS = [
    "The birch canoe slid on the smooth planks.",
    "Glue the sheet to the dark blue background.",
    "It's easy to tell the depth of a well.",
    "These days a chicken leg is a rare dish.",
    "Rice is often served in round bowls.",
    "The juice of lemons makes fine punch.",
    "The box was thrown beside the parked truck.",
    "The hogs were fed chopped corn and garbage.",
    "Four hours of steady work faced us.",
    "A large size in stockings is hard to sell.",
    "The boy was there when the sun rose.",
    "A rod is used to catch pink salmon.",
    "The source of the huge river is the clear spring.",
    "Kick the ball straight and follow through.",
    "Help the woman get back to her feet.",
    "A pot of tea helps to pass the evening.",
]


def start_server(model: str, port: int, max_batch: int, max_wait_ms: float, workers: int,
                 folder: str):
    log = open(os.path.join(folder, "server.log"), "wb")  # pylint: disable=consider-using-with
    process = subprocess.Popen(
        [sys.executable, "-m", "myxtts.serve", "--model", os.path.abspath(model), "--port",
         str(port), "--voices-dir", os.path.join(folder, "voices"), "--max-batch",
         str(max_batch), "--max-wait-ms", str(max_wait_ms), "--workers", str(workers)],
        stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the server exited:\n{open(log.name).read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("the server did not start in 180 s")


def one_request(client: httpx.Client, text: str, stream: bool, rate: int) -> dict:
    started = time.monotonic()
    first, size, status = None, 0, None
    try:
        with client.stream("POST", "/v1/audio/speech", json={
                "input": text, "voice": "bench", "response_format": "pcm",
                "stream": stream}) as response:
            status = response.status_code
            for chunk in response.iter_raw():
                if first is None and chunk:
                    first = time.monotonic() - started
                size += len(chunk)
    except httpx.HTTPError as e:
        status = repr(e)
    done = time.monotonic() - started
    return {"ok": status == 200 and size > 0, "latency": done, "ttfb": first or done,
            "audio": size / 2 / rate}


def batch_totals(client: httpx.Client):
    values = {}
    for line in client.get("/metrics").text.splitlines():
        for name in ("myxtts_batch_size_sum", "myxtts_batch_size_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[1])
    return values.get("myxtts_batch_size_sum", 0.0), values.get("myxtts_batch_size_count", 0.0)


def run_round(url: str, clients: int, requests: int, stream: bool, rate: int) -> dict:
    results, lock = [], threading.Lock()

    def client_loop(index: int):
        with httpx.Client(base_url=url, timeout=600) as client:
            for k in range(requests):
                result = one_request(client, TEXTS[(index * requests + k) % len(TEXTS)],
                                     stream, rate)
                with lock:
                    results.append(result)

    with httpx.Client(base_url=url, timeout=60) as probe:
        sum_before, count_before = batch_totals(probe)
        threads = [threading.Thread(target=client_loop, args=(i,)) for i in range(clients)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        wall = time.monotonic() - started
        sum_after, count_after = batch_totals(probe)
    ok = [r for r in results if r["ok"]]
    latency = np.array([r["latency"] for r in ok]) if ok else np.array([np.nan])
    ttfb = np.array([r["ttfb"] for r in ok]) if ok else np.array([np.nan])
    audio = sum(r["audio"] for r in ok)
    batches = count_after - count_before
    return {"clients": clients, "requests": len(results), "lost": len(results) - len(ok),
            "audio": audio, "wall": wall, "throughput": audio / wall,
            "p50": float(np.percentile(latency, 50)), "p95": float(np.percentile(latency, 95)),
            "ttfb50": float(np.percentile(ttfb, 50)), "ttfb95": float(np.percentile(ttfb, 95)),
            "batch": (sum_after - sum_before) / batches if batches else float("nan")}


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident set (VmHWM) in MB."""
    with open(f"/proc/{pid}/status", encoding="utf-8") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def measure(model: str, args, counts):
    """(rows, the served model's /v1/models entry, the server's peak RSS in MB)."""
    with tempfile.TemporaryDirectory(prefix="bench-server-") as folder:
        process, url = start_server(model, args.port or free_port(), args.max_batch,
                                    args.max_wait_ms, args.workers, folder)
        try:
            with httpx.Client(base_url=url, timeout=600) as client:
                with open(args.reference, "rb") as f:
                    made = client.post("/v1/voices", files={"file": (
                        os.path.basename(args.reference), f)}, data={"name": "bench"})
                made.raise_for_status()
                info = client.get("/v1/models").json()["data"][0]
                rate = info["sample_rate"]
                for text in TEXTS:
                    one_request(client, text, args.stream, rate)
            run_round(url, max(counts), 1, args.stream, rate)
            rows = [run_round(url, c, args.requests, args.stream, rate) for c in counts]
            peak = peak_rss_mb(process.pid)
        finally:
            process.terminate()
            process.wait(120)
    return rows, info, peak


def report(model: str, args, rows, info, peak) -> None:
    print(f"model {model} (vocoder {info['vocoder']}), {os.cpu_count()} CPUs, "
          f"max-batch {args.max_batch}, max-wait-ms {args.max_wait_ms:g}, workers {args.workers}, "
          f"{'streamed' if args.stream else 'whole'} pcm, {args.requests} requests per client; "
          f"peak RSS {peak:,.0f} MB")
    print(f"{'clients':>7} {'requests':>8} {'lost':>4} {'audio s':>8} {'wall s':>7} "
          f"{'thru':>6} {'p50 s':>6} {'p95 s':>6} {'ttfb50':>6} {'ttfb95':>6} {'batch':>5}")
    for r in rows:
        print(f"{r['clients']:>7} {r['requests']:>8} {r['lost']:>4} {r['audio']:>8.1f} "
              f"{r['wall']:>7.1f} {r['throughput']:>6.2f} {r['p50']:>6.2f} {r['p95']:>6.2f} "
              f"{r['ttfb50']:>6.2f} {r['ttfb95']:>6.2f} {r['batch']:>5.1f}")
    by_clients = {r["clients"]: r for r in rows}
    if 1 in by_clients and 8 in by_clients:
        one, eight = by_clients[1], by_clients[8]
        speedup = eight["throughput"] / one["throughput"]
        p95_ratio = eight["p95"] / one["p50"]
        lost = sum(r["lost"] for r in rows)
        print(f"8 clients: throughput {speedup:.2f}x one-at-a-time (goal >= 3), p95 latency "
              f"{p95_ratio:.2f}x the single-request latency (goal <= 3), {lost} requests lost "
              f"(goal 0): {'met' if speedup >= 3 and p95_ratio <= 3 and not lost else 'missed'}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, nargs="+",
                   help="What myxtts-export wrote; several: each served in turn.")
    p.add_argument("--reference", required=True, help="A recording for the voice.")
    p.add_argument("--clients", default="1,4,8,16")
    p.add_argument("--requests", type=int, default=4, help="Requests per client per round.")
    p.add_argument("--max-batch", type=int, default=16)
    p.add_argument("--max-wait-ms", type=float, default=30.0)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--stream", action="store_true", help="stream: true (pcm chunks).")
    p.add_argument("--port", type=int, default=0, help="0: a free port.")
    args = p.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    peaks = []
    for model in args.model:
        rows, info, peak = measure(model, args, counts)
        report(model, args, rows, info, peak)
        peaks.append(peak)
    for model, peak in zip(args.model[1:], peaks[1:]):
        print(f"peak RSS of {model}: {peak / peaks[0]:.0%} of {args.model[0]}'s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
