"""Free-running evaluation of a trained model, the library behind `myxtts-evaluate`:
synthesising the chosen sentences (sentence_choice.py) without teacher forcing; the
per-utterance measures (length ratio, stop head, attention focus/monotonicity/coverage, DTW
mel-cepstral distortion to the own and the other sentences' recordings, text match, word error
rates) and, with a speaker judge, the voice-cloning measures (speaker_measures.py); their means
and the tables. docs/evaluation.md.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Dict, List, Optional, Sequence, Tuple

import numpy as np

from myxtts.atomic_write import atomic_write
from myxtts.evaluation import metrics, speaker_measures
from myxtts.evaluation.sentence_choice import Pick

if TYPE_CHECKING:  # TensorFlow (and torch) wait until the arguments are checked
    from myxtts.evaluation.speaker_judge import ResemblyzerJudge
    from myxtts.inference.synthesizer import Synthesizer

logger = logging.getLogger("myxtts")


# ---- measuring ---------------------------------------------------------------------------------

def _wer_fields(recognizer, text: str, language: str, audio: Dict[str, np.ndarray],
                rate: int) -> dict:
    """What the recogniser heard in each of `audio`'s waveforms, and its word and character
    errors against `text` (None without a recogniser)."""
    out = {}
    for name, samples in audio.items():
        fields = ("wer", "cer", "heard", "word_errors", "char_errors")
        if recognizer is None:
            out.update({f"{field}_{name}": None for field in fields})
            continue
        heard = recognizer.transcribe(samples, rate, language)
        errors, count = metrics.word_errors(text, heard, language)
        char_errors, chars = metrics.character_errors(text, heard, language)
        out.update({f"wer_{name}": errors / count if count else None,
                    f"cer_{name}": char_errors / chars if chars else None,
                    f"heard_{name}": heard, f"word_errors_{name}": errors,
                    f"char_errors_{name}": char_errors})
    return out


# What the recogniser hears: the free-running output ("synth"), the recording's mel through the
# same vocoder (the ceiling), the recording itself, and the model's teacher-forced output (fed
# the recording's own frames, as in training; no decode-time voice mapping): a diagnostic of
# whether the model says the words when its timing is given, never the judged figure.
WER_KINDS = ("synth", "gt_vocoded", "recording", "teacher_forced")
# Per utterance, with a speaker judge and two or more speakers (None otherwise): the other
# speaker's reference and speaker_measures.cloning_measures' fields.
SPEAKER_FIELDS = ("cross_speaker", "cross_reference_id", "cross_reference_audio", "secs_own",
                  "secs_others", "speaker_match", "cross_secs_own", "cross_secs_others",
                  "cross_speaker_match", "reference_decides")


def _vocoded(synth: "Synthesizer", mel: np.ndarray) -> np.ndarray:
    """The waveform of mel [T, n_mels] through the synthesizer's vocoder."""
    wave, length = synth.vocoder(mel[None], [mel.shape[0]])
    return wave[0, : int(length[0])].numpy()


def evaluate(synth: "Synthesizer", picks: Sequence[Pick], recognizer,
             judge: Optional["ResemblyzerJudge"] = None,
             match_among: Optional[int] = None,
             adapt_steps: int = 0,
             adapt_learning_rate: Optional[float] = None,
             adapt_part: str = "all"
             ) -> Tuple[List[dict], Optional[dict]]:
    """Synthesises every pick free-running and measures it. Returns one dict per utterance and,
    with a `judge` (and picks with cross references), the voice-cloning summary: each text is
    also synthesised with its cross reference, and the judge hears both outputs and the real
    recordings (speaker_measures.cloning_measures). Text-match tells each output from the
    other sentences of its group (metrics.match_groups(len(picks), match_among)): all of them
    by default. With `adapt_steps`, every reference first adapts the model to its voice
    (Synthesizer.adapt: that many steps at `adapt_learning_rate`, default
    voice_adaptation.ADAPT_LEARNING_RATE, of the weights of `adapt_part`, on the reference and
    its transcript), and each
    output is spoken with the weights of its reference; the model has the checkpoint's
    weights again at the end."""
    # pylint: disable=import-outside-toplevel
    from myxtts.data.cache import load_samples
    from myxtts.evaluation.speaker_judge import HeardRecordings
    from myxtts.inference.synthesizer import TOKEN_PADDING
    from myxtts.inference.voice_adaptation import ADAPT_LEARNING_RATE
    adapt_learning_rate = adapt_learning_rate or ADAPT_LEARNING_RATE
    d = synth.config.data
    # One padded token length for every sentence: one compiled decode serves them all (and
    # decoding texts of several padded lengths in one process trips a tf.while_loop shape
    # check in XTTSModel.decode).
    padded = max(len(p.item.tokens) for p in picks)
    padded = -(-padded // TOKEN_PADDING) * TOKEN_PADDING
    heard = HeardRecordings(judge, d.sample_rate) if judge else None
    rows, synth_cepstra, gt_cepstra, pairs, paired_rows = [], [], [], [], []
    forced_cepstra = []
    adapted: Dict[tuple, object] = {}

    def reference_latents(reference, samples):
        """The latents of a reference and, with adapt_steps, the weights adapted to it put in
        the model (each reference adapted once)."""
        latents = synth.speaker_latents_from_mel(synth.reference_mel_of(samples))
        if adapt_steps:
            if reference.clip not in adapted:
                started = time.monotonic()
                adapted[reference.clip] = synth.adapt(
                    latents, [synth.adaptation_recording(samples, reference.tokens,
                                                         reference.language_id)],
                    adapt_steps, adapt_learning_rate, adapt_part)
                losses = adapted[reference.clip].losses
                logger.info("Adapted to %s's reference %s: mel loss %.3f -> %.3f (%.1f s)",
                            reference.speaker, reference.id, losses[0], losses[-1],
                            time.monotonic() - started)
            synth.use_weights(adapted[reference.clip])
        return latents

    for number, pick in enumerate(picks, start=1):
        started = time.monotonic()
        item = pick.item
        samples = load_samples(item, d)
        gt_mel = synth.log_mel(samples[None])[0].numpy()
        # The reference's own samples: a piece of a longer recording (split_long) must not
        # hand over the start of its file, which may be the sentence itself.
        reference_samples = load_samples(pick.reference, d)
        reference_mel = synth.reference_mel_of(reference_samples)
        latents = reference_latents(pick.reference, reference_samples)
        result = synth.synthesize_detailed(list(item.tokens), item.language_id, latents,
                                           padded_length=padded)
        forced_mel = synth.teacher_forced_mel(list(item.tokens), item.language_id,
                                              reference_mel, gt_mel)
        row = {"id": item.id, "speaker": item.speaker, "text": pick.text,
               "language": synth.languages[item.language_id],
               "reference_id": pick.reference.id, "reference_audio": pick.reference.audio_path,
               "tokens": len(item.tokens), "gt_frames": int(gt_mel.shape[0]),
               "synth_frames": int(result.mel.shape[0]), "max_frames": result.max_frames,
               "length_ratio": result.mel.shape[0] / gt_mel.shape[0],
               "ended_by_stop": bool(result.ended_by_stop),
               **metrics.alignment_measures(result.alignment)}
        row.update(_wer_fields(recognizer, pick.text, synth.languages[item.language_id], {
            "synth": result.waveform,
            "gt_vocoded": _vocoded(synth, gt_mel) if recognizer else None,
            "recording": samples,
            "teacher_forced": _vocoded(synth, forced_mel) if recognizer else None},
            d.sample_rate))
        synth_cepstra.append(metrics.mel_cepstra(result.mel))
        gt_cepstra.append(metrics.mel_cepstra(gt_mel))
        forced_cepstra.append(metrics.mel_cepstra(forced_mel))
        row.update(dict.fromkeys(SPEAKER_FIELDS))
        if heard is not None and pick.cross_reference is not None:
            cross = pick.cross_reference
            cross_samples = load_samples(cross, d)
            cross_result = synth.synthesize_detailed(
                list(item.tokens), item.language_id,
                reference_latents(cross, cross_samples),
                padded_length=padded)
            pairs.append(speaker_measures.ClonePair(
                recording=heard.index(item, samples),
                own_reference=heard.index(pick.reference, reference_samples),
                cross_reference=heard.index(cross, cross_samples),
                own_output=heard.embed(result.waveform),
                cross_output=heard.embed(cross_result.waveform)))
            row.update(cross_speaker=cross.speaker, cross_reference_id=cross.id,
                       cross_reference_audio=cross.audio_path)
            paired_rows.append(row)
        row["seconds"] = round(time.monotonic() - started, 2)
        rows.append(row)
        logger.info("%d/%d %s: %d frames (recording %d), %s, focus %.2f (%.1f s)", number,
                    len(picks), item.id, row["synth_frames"], row["gt_frames"],
                    "stop head" if row["ended_by_stop"] else "length cap", row["focus"],
                    row["seconds"])
    synth.use_weights(None)
    cloning = None
    if pairs:
        fields, cloning = speaker_measures.cloning_measures(pairs, np.stack(heard.embeddings),
                                                            heard.speakers)
        for row, measured in zip(paired_rows, fields):
            row.update(measured)
    for number, group in enumerate(metrics.match_groups(len(rows), match_among)):
        _match_group([rows[i] for i in group], [synth_cepstra[i] for i in group],
                     [forced_cepstra[i] for i in group], [gt_cepstra[i] for i in group], number)
    return rows, cloning


def _match_group(rows: Sequence[dict], synth_cepstra, forced_cepstra, gt_cepstra,
                 number: int) -> None:
    """Text-match, and the DTW MCD to the own and the other recordings, within one group."""
    distances = metrics.dtw_mcd_matrix(synth_cepstra, gt_cepstra)
    several = len(rows) > 1
    matched = metrics.text_match(distances) if several else [None]
    # What the measure gives this model with the recording's timing and frames: its
    # teacher-forced outputs matched the same way.
    forced = (metrics.text_match(metrics.dtw_mcd_matrix(forced_cepstra, gt_cepstra))
              if several else [None])
    for i, row in enumerate(rows):
        row["match_group"], row["match_among"] = number, len(rows)
        row["text_match_teacher_forced"] = None if forced[i] is None else bool(forced[i])
        row["mcd_own"] = float(distances[i, i])
        row["mcd_others"] = float(np.mean(np.delete(distances[i], i))) if several else None
        row["text_match"] = None if matched[i] is None else bool(matched[i])


def summarize(rows: Sequence[dict]) -> dict:
    """Means over utterances; WER (CER) as total word (character) errors / total reference
    words (characters)."""
    def mean(key):
        values = [r[key] for r in rows if r[key] is not None]
        return float(np.mean(values)) if values else None

    summary = {key: mean(key) for key in ("length_ratio", "focus", "monotonicity", "coverage",
                                           "mcd_own", "mcd_others")}
    summary["ended_by_stop"] = float(np.mean([r["ended_by_stop"] for r in rows]))
    summary["text_match"] = mean("text_match")
    summary["text_match_teacher_forced"] = mean("text_match_teacher_forced")
    summary["text_match_chance"] = (float(np.mean([1.0 / r["match_among"] for r in rows]))
                                    if len(rows) > 1 else None)
    groups = sorted({r["match_group"] for r in rows})
    per_group = [float(np.mean([r["text_match"] for r in rows if r["match_group"] == g]))
                 for g in groups] if len(rows) > 1 else []
    summary["text_match_groups"] = per_group
    # The spread of the mean over groups: how far another draw of groups may move the figure.
    summary["text_match_standard_error"] = (float(np.std(per_group, ddof=1) / np.sqrt(len(groups)))
                                            if len(groups) > 1 else None)
    words = sum(len(metrics.words(r["text"], r["language"])) for r in rows)
    chars = sum(len(" ".join(metrics.words(r["text"], r["language"]))) for r in rows)
    for kind in WER_KINDS:
        errors = [r[f"word_errors_{kind}"] for r in rows]
        summary[f"wer_{kind}"] = None if None in errors or not words else sum(errors) / words
        errors = [r[f"char_errors_{kind}"] for r in rows]
        summary[f"cer_{kind}"] = None if None in errors or not chars else sum(errors) / chars
    return summary


COLUMNS = (("id", "id", None), ("ratio", "length_ratio", "{:.2f}"),
           ("stop", "ended_by_stop", None), ("focus", "focus", "{:.2f}"),
           ("mono", "monotonicity", "{:.2f}"), ("cover", "coverage", "{:.2f}"),
           ("mcd_own", "mcd_own", "{:.2f}"), ("mcd_oth", "mcd_others", "{:.2f}"),
           ("match", "text_match", None), ("wer_syn", "wer_synth", "{:.2f}"),
           ("wer_voc", "wer_gt_vocoded", "{:.2f}"), ("wer_rec", "wer_recording", "{:.2f}"),
           ("cer_syn", "cer_synth", "{:.2f}"))


def _cell(value, fmt) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "yes" if value else "no"
    return fmt.format(value) if fmt else str(value)


def _aligned(header: Sequence[str], lines: Sequence[Sequence[str]]) -> str:
    """Columns padded to one width (the first left-aligned), a rule above the last line."""
    widths = [max(len(x) for x in column) for column in zip(header, *lines)]
    out = [" ".join(h.ljust(w) if i == 0 else h.rjust(w)
                    for i, (h, w) in enumerate(zip(cells, widths)))
           for cells in [header, *lines]]
    out.insert(-1, "-" * len(out[0]))
    return "\n".join(out)


def format_table(rows: Sequence[dict], summary: dict) -> str:
    """Per-utterance rows and a mean row (stop and match as shares there)."""
    mean_row = {**summary, "id": "mean"}
    lines = [[_cell(r[key], fmt) for _, key, fmt in COLUMNS] for r in rows]
    lines.append([_cell(mean_row[key], fmt or "{:.2f}") for _, key, fmt in COLUMNS])
    return _aligned([name for name, _, _ in COLUMNS], lines)


SPEAKER_HEADER = ("speaker", "outputs", "secs_own", "secs_oth", "gap", "match", "real_loo",
                  "real_same", "real_diff", "real_gap", "ratio")


def _speaker_line(name: str, measures: dict) -> List[str]:
    real = measures["real"]
    return [name, str(measures["outputs"]), *(_cell(v, "{:.2f}") for v in (
        measures["secs_own"], measures["secs_others"], measures["secs_gap"],
        measures["speaker_match"], real["leave_one_out_match"], real["secs_same_speaker"],
        real["secs_different_speaker"], real["secs_gap"], measures["gap_ratio"]))]


def format_speaker_table(cloning: dict) -> str:
    """One row per speaker (the outputs in that voice, its recordings) and an `all` row, then
    the reference-decides rate."""
    lines = [_speaker_line(name, m) for name, m in cloning["per_speaker"].items()]
    lines.append(_speaker_line("all", cloning))
    return (f"{_aligned(SPEAKER_HEADER, lines)}\nreference decides "
            f"{cloning['reference_decides']:.2f} of {cloning['outputs'] // 2} sentences (each "
            f"said with its speaker's and another speaker's reference); speaker-match chance "
            f"{cloning['chance']:.2f}")


HEARD_EXAMPLES = 3


def format_heard(rows: Sequence[dict], summary: dict, recognizer_name: str) -> str:
    """The error rates against their ceilings, then what the recogniser heard in the first few
    outputs (to read, not only the mean)."""
    def rate(kind):
        return "-" if summary[kind] is None else f"{summary[kind]:.2f}"
    lines = [f"Heard by {recognizer_name}: WER {rate('wer_synth')} (CER {rate('cer_synth')}) "
             f"for the outputs, {rate('wer_gt_vocoded')} ({rate('cer_gt_vocoded')}) for the "
             f"recordings' mels through the same vocoder (the ceiling), "
             f"{rate('wer_recording')} ({rate('cer_recording')}) for the recordings; "
             f"{rate('wer_teacher_forced')} ({rate('cer_teacher_forced')}) teacher-forced (fed "
             f"the recording's own frames: a diagnostic, not the judged figure)."]
    for row in rows[:HEARD_EXAMPLES]:
        lines.append(f"  {row['id']}: said  {row['text']!r}\n  {' ' * len(row['id'])}  heard "
                     f"{row['heard_synth']!r}")
    return "\n".join(lines)


def write_json(path: str, report: dict) -> None:
    atomic_write(path, json.dumps(report, indent=2, ensure_ascii=False))
