"""Voice-cloning measures on speaker embeddings, pure numpy (docs/evaluation.md, "Speaker
similarity"). Embeddings are rows [N, D] of any length; every similarity is the cosine (SECS,
speaker-encoder cosine similarity).

    cosine_matrix(a, b)                   SECS of every row of a with every row of b
    centroid_match(...)                   is each embedding nearest its speaker's centroid
    same_and_different_secs(...)          mean SECS of same-speaker and different-speaker pairs
    reference_secs(...)                   SECS to the own reference and to other speakers'
    reference_decides(...)                the same text with two references: each output
                                          nearer its own
    cloning_measures(...)                 all of them for myxtts-evaluate's outputs, with the
                                          same judge on the real recordings (the ceiling)
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np


def unit_rows(embeddings) -> np.ndarray:
    """float64 [N, D] rows scaled to length 1; N >= 1, every row finite and non-zero."""
    x = np.asarray(embeddings, np.float64)
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] == 0:
        raise ValueError(f"embeddings must be [N, D] with N, D > 0, got shape {x.shape}")
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if not np.all(np.isfinite(x)) or np.any(norms == 0):
        raise ValueError("embeddings must be finite and non-zero")
    return x / norms


def cosine_matrix(a, b) -> np.ndarray:
    """[len(a), len(b)]: the cosine of every row of a with every row of b."""
    return unit_rows(a) @ unit_rows(b).T


def _rowwise_cosine(a, b) -> np.ndarray:
    return np.sum(unit_rows(a) * unit_rows(b), axis=1)


def centroid_match(embeddings, targets: Sequence[str], excluded: Sequence[Optional[int]],
                   recordings, recording_speakers: Sequence[str]) -> np.ndarray:
    """bool [N]: embedding n is strictly nearer (cosine) the centroid of speaker targets[n] than
    every other speaker's centroid. A speaker's centroid is the mean of its unit-length
    recording embeddings (recordings [M, D], recording_speakers [M]) without recording
    excluded[n] (None: all of them); a speaker left with no recording has no centroid for that
    embedding (the target must keep one)."""
    out, rec = unit_rows(embeddings), unit_rows(recordings)
    if len(targets) != len(out) or len(excluded) != len(out):
        raise ValueError(f"{len(out)} embeddings need as many targets and exclusions, got "
                         f"{len(targets)} and {len(excluded)}")
    if len(recording_speakers) != len(rec):
        raise ValueError(f"{len(rec)} recordings, {len(recording_speakers)} speaker labels")
    speakers = sorted(set(recording_speakers))
    labels = np.array([speakers.index(s) for s in recording_speakers])
    matched = []
    for n, target in enumerate(targets):
        keep = np.ones(len(rec), bool)
        if excluded[n] is not None:
            keep[excluded[n]] = False
        similarity = np.full(len(speakers), -np.inf)
        for k in range(len(speakers)):
            members = rec[keep & (labels == k)]
            if len(members):
                centroid = members.mean(axis=0)
                similarity[k] = out[n] @ centroid / np.linalg.norm(centroid)
        t = speakers.index(target) if target in speakers else None
        if t is None or similarity[t] == -np.inf:
            raise ValueError(f"speaker {target!r} has no recording left for a centroid")
        matched.append(bool(similarity[t] > np.max(np.delete(similarity, t), initial=-np.inf)))
    return np.array(matched, bool)


def same_and_different_secs(recordings, speakers: Sequence[str], of: Optional[str] = None
                            ) -> Tuple[Optional[float], Optional[float]]:
    """(mean SECS over pairs of distinct recordings of one speaker, mean SECS over pairs of
    recordings of two speakers); with `of`, only the pairs with a recording of speaker `of`.
    None where there is no such pair."""
    similarity = cosine_matrix(recordings, recordings)
    labels = np.asarray(speakers)
    rows = (labels == of if of is not None else np.ones(len(labels), bool))[:, None]
    same = labels[:, None] == labels[None, :]
    distinct = ~np.eye(len(labels), dtype=bool)
    same_values, different_values = similarity[rows & same & distinct], similarity[rows & ~same]
    return (float(same_values.mean()) if same_values.size else None,
            float(different_values.mean()) if different_values.size else None)


def reference_secs(outputs, own_references: Sequence[int], targets: Sequence[str], references,
                   reference_speakers: Sequence[str]) -> Tuple[np.ndarray, np.ndarray]:
    """(own [N], others [N]): output n's SECS to its reference references[own_references[n]],
    and its mean SECS to the references of every speaker other than targets[n] (NaN when there
    is none)."""
    similarity = cosine_matrix(outputs, references)
    labels = np.asarray(reference_speakers)
    own = similarity[np.arange(len(similarity)), np.asarray(own_references, int)]
    others = np.array([similarity[n, labels != target].mean() if np.any(labels != target)
                       else np.nan for n, target in enumerate(targets)])
    return own, others


def reference_decides(own_outputs, cross_outputs, own_references, cross_references) -> np.ndarray:
    """bool [P]. Pair p is one text synthesised twice: with own_references[p] (own_outputs[p])
    and with cross_references[p], a reference of another speaker (cross_outputs[p]). True where
    both outputs are strictly nearer (cosine) their own reference than the pair's other one."""
    own_holds = (_rowwise_cosine(own_outputs, own_references)
                 > _rowwise_cosine(own_outputs, cross_references))
    cross_holds = (_rowwise_cosine(cross_outputs, cross_references)
                   > _rowwise_cosine(cross_outputs, own_references))
    return own_holds & cross_holds


@dataclasses.dataclass(frozen=True)
class ClonePair:
    """One evaluated sentence as the judge heard it: indices into the recordings (the sentence's
    own recording, its reference and the other speaker's reference) and the embeddings of the
    two outputs (the text with each reference)."""

    recording: int
    own_reference: int
    cross_reference: int
    own_output: np.ndarray
    cross_output: np.ndarray


def _mean(values) -> Optional[float]:
    values = [v for v in values if v is not None and not np.isnan(v)]
    return float(np.mean(values)) if values else None


def _gap(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return None if a is None or b is None else a - b


def cloning_measures(pairs: Sequence[ClonePair], recordings,
                     speakers: Sequence[str]) -> Tuple[List[dict], dict]:
    """(fields per pair, summary) for myxtts-evaluate. recordings [M, D] are the real recordings
    the pairs index (each sentence's own recording and every reference), speakers [M] their
    speakers; at least two speakers.

    Per pair: secs_own / secs_others (own output to its reference / to the other speakers'
    references), speaker_match (own output nearest its speaker's centroid, the sentence's own
    recording left out of the centroids), the same three for the cross output (cross_...; its
    speaker is the other reference's) and reference_decides. Summary: their means (speaker_match
    over all outputs), chance = 1/speakers, the ceiling on the recordings (leave-one-out
    centroid match, same- and different-speaker SECS), the outputs' own-vs-other SECS gap and
    its ratio to the recordings' same-vs-different gap, and the same per speaker."""
    recordings = unit_rows(recordings)
    names = sorted(set(speakers))
    if len(names) < 2:
        raise ValueError(f"cloning measures need two speakers, got {names}")
    labels = list(speakers)
    # Rows: every own output, then every cross output; each sounds like its reference.
    outputs = np.stack([p.own_output for p in pairs] + [p.cross_output for p in pairs])
    references = [p.own_reference for p in pairs] + [p.cross_reference for p in pairs]
    targets = [labels[r] for r in references]
    excluded = [p.recording for p in pairs] * 2
    matched = centroid_match(outputs, targets, excluded, recordings, labels)
    reference_ids = sorted(set(references))
    own, others = reference_secs(outputs, [reference_ids.index(r) for r in references], targets,
                                 recordings[reference_ids], [labels[r] for r in reference_ids])
    decides = reference_decides(outputs[: len(pairs)], outputs[len(pairs):],
                                recordings[[p.own_reference for p in pairs]],
                                recordings[[p.cross_reference for p in pairs]])
    n = len(pairs)
    fields = [{"secs_own": float(own[i]), "secs_others": _optional(others[i]),
               "speaker_match": bool(matched[i]),
               "cross_secs_own": float(own[n + i]), "cross_secs_others": _optional(others[n + i]),
               "cross_speaker_match": bool(matched[n + i]),
               "reference_decides": bool(decides[i])} for i in range(n)]
    ceiling_match = centroid_match(recordings, labels, range(len(labels)), recordings, labels)
    summary = {"speakers": names, "chance": 1.0 / len(names), "outputs": len(outputs),
               **_summary(own, others, matched, ceiling_match, recordings, labels),
               "reference_decides": float(np.mean(decides))}
    summary["per_speaker"] = {}
    for name in names:
        mine = np.array([t == name for t in targets])
        theirs = np.array([s == name for s in labels])
        summary["per_speaker"][name] = {
            "outputs": int(mine.sum()),
            **_summary(own[mine], others[mine], matched[mine], ceiling_match[theirs],
                       recordings, labels, speaker=name)}
    return fields, summary


def _optional(value: float) -> Optional[float]:
    return None if np.isnan(value) else float(value)


def _summary(own, others, matched, ceiling_match, recordings, labels,
             speaker: Optional[str] = None) -> Dict[str, Optional[float]]:
    """Means of the outputs' measures next to the recordings' (of one `speaker`, or all)."""
    same, different = same_and_different_secs(recordings, labels, speaker)
    output_gap, real_gap = _gap(_mean(own), _mean(others)), _gap(same, different)
    return {"secs_own": _mean(own), "secs_others": _mean(others), "secs_gap": output_gap,
            "speaker_match": float(np.mean(matched)),
            "real": {"recordings": int(len(ceiling_match)),
                     "leave_one_out_match": float(np.mean(ceiling_match)),
                     "secs_same_speaker": same, "secs_different_speaker": different,
                     "secs_gap": real_gap},
            "gap_ratio": (output_gap / real_gap if output_gap is not None and real_gap
                          else None)}
