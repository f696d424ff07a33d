"""Where an on-device export's synthesis time goes: seconds in each part over bench_edge.py's
sentences, one process, no TensorFlow.

    python benchmarks/bench_edge_parts.py --model /tmp/bench-edge/litert-fp32 \
        --reference corpora/voices25_unseen2/wavs/U00001.wav [--threads 1] [--repeats 3]

(`bench_edge.py --out /tmp/bench-edge` leaves its exports there.) Prints, for the best of
--repeats whole syntheses of bench_edge.TEXTS: the total and its real-time factor, then per
part the seconds and calls: `decode_steps` timed inside the runtime (`invoke`) and with the
host's carrying of the slot rows (`decode_steps+carry`, myxtts.lite.resident), the other parts
around their calls; `host` is the rest (text front end, windowing, joining). With an export
made with --decode-rows B, then: the decode alone (no postnet or vocoder) of B of the sentences
one by one (the one-row parts) against together (the B-row parts), best of --repeats each, and
their ratio.
"""

import argparse
import collections
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.bench_edge import TEXTS  # noqa: E402
from myxtts.decoding import scheduler  # noqa: E402
from myxtts.lite.synthesizer import LiteSynthesizer  # noqa: E402


class PartTimes:
    """Seconds and calls per part name, from wrappers around the synthesizer's parts."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self.calls = collections.Counter()

    def clear(self):
        self.seconds.clear()
        self.calls.clear()

    def timed(self, name, function):
        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1
        return call


def instrument(synth: LiteSynthesizer, times: PartTimes) -> None:
    """Wraps the parts the synthesizer holds (private attributes: this is a measurement)."""
    # pylint: disable=protected-access
    decoder, vocoder = synth.decoder, synth.vocoder
    parts = decoder.decode_parts[0]  # one sentence at a time: the one-row decode parts
    parts.start = times.timed("decode_start", parts.start)
    decoder._postnet = times.timed("postnet", decoder._postnet)
    vocoder._parts = [(frames, times.timed(f"vocoder ({frames} frames)", part))
                      for frames, part in vocoder._parts]
    loop = parts.loop
    loop.run = times.timed("decode_steps+carry", loop.run)
    if hasattr(loop, "_invoke"):  # LiteRT
        loop._invoke = times.timed("decode_steps", loop._invoke)
    else:  # ONNX Runtime
        loop.session.run_with_iobinding = times.timed("decode_steps",
                                                      loop.session.run_with_iobinding)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="an on-device export (or a version folder)")
    p.add_argument("--reference", required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    synth = LiteSynthesizer(args.model, threads=args.threads)
    times = PartTimes()
    instrument(synth, times)
    latents = synth.speaker_latents(args.reference)
    for text in TEXTS:  # warm-up
        synth.synthesize(text, "en", latents)
    best = None
    for _ in range(args.repeats):
        times.clear()
        start, seconds = time.perf_counter(), 0.0
        for text in TEXTS:
            seconds += len(synth.synthesize(text, "en", latents)[0]) / synth.sample_rate
        total = time.perf_counter() - start
        if best is None or total < best[0]:
            best = (total, seconds, dict(times.seconds), dict(times.calls))
    total, seconds, part_seconds, calls = best
    print(f"{synth.folder}, {args.threads} thread(s), {len(TEXTS)} sentences, "
          f"{seconds:.2f} s of audio, best of {args.repeats}")
    print(f"total {total * 1000:.1f} ms, RTF {total / seconds:.4f}")
    parts = sum(value for name, value in part_seconds.items() if name != "decode_steps")
    for name in sorted(part_seconds):
        print(f"  {name:<26} {part_seconds[name] * 1000:7.1f} ms  {calls[name]:4d} calls  "
              f"{part_seconds[name] / calls[name] * 1000:6.3f} ms a call")
    print(f"  {'host':<26} {(total - parts) * 1000:7.1f} ms")
    if synth.decoder.max_rows > 1:
        batch_decode(synth, latents, args.repeats)
    return 0


def batch_decode(synth: LiteSynthesizer, latents, repeats: int) -> None:
    """Prints the decode of decode_rows sentences one by one against together."""
    decoder, rows = synth.decoder, synth.decoder.max_rows
    language_id = synth.front_end.language_id("en")
    sentences = [synth.sentences(text, "en")[0][0] for text in (TEXTS * rows)[:rows]]

    def decode(batch):
        state = decoder.start_batch(batch, [language_id] * len(batch), latents)
        for _ in scheduler.decoded_chunks(decoder, state, range(len(batch)), 1):
            pass

    def best(run):
        run()  # warm-up
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            seconds.append(time.perf_counter() - start)
        return min(seconds)

    alone = best(lambda: [decode([ids]) for ids in sentences])
    together = best(lambda: decode(sentences))
    print(f"decode of {rows} sentences: one by one {alone * 1000:.1f} ms, together "
          f"{together * 1000:.1f} ms ({alone / together:.2f}x)")


if __name__ == "__main__":
    sys.exit(main())
