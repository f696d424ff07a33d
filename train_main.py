"""Train an XTTS-style text-to-speech model on a data device and a model device.

    python train_main.py --data-gpu 0 --model-gpu 1 --train-data DIR --val-data DIR \
        --batch-size 32 --epochs 100
    python train_main.py --device-check --data-gpu 0 --model-gpu 1
    python train_main.py --data-gpu 0 --model-gpus 1,2,3 ...     # MirroredStrategy
    TF_CONFIG='{...}' python train_main.py --data-gpu 0 --model-gpus 1,2 ...   # several machines

Device flags are parsed and applied BEFORE TensorFlow is imported (this file imports no
TensorFlow at module level; myxtts.devices.configure() does, after setting visible devices).
`python train_main.py --helpfull` documents every flag.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
from typing import Iterator, Optional

import yaml
from absl import app, flags

from myxtts import devices
from myxtts.cli import UsageError, flag_hint, quiet_tensorflow_start, run_guarded, setup_logging
from myxtts.config import TrainingConfig, XTTSConfig
from myxtts.data import service
from myxtts.data import corpora
from myxtts.data.metadata import DatasetError
from myxtts.errors import MyXTTSError
from myxtts.source_run import (RESUME_CONFLICT, Source, SourceRunError, continued_run,
                               locate_source, warm_start_config)
from myxtts.model_info import read_model_info
from myxtts.run_directory import (CONFIG_FILE, GTA_DIR, MODEL_INFO_FILE, TENSORBOARD_DIR,
                                  VOCAB_FILE)

FLAGS = flags.FLAGS
logger = logging.getLogger("myxtts")
REPO_DIR = os.path.dirname(os.path.abspath(__file__))

# ---- devices: parsed before TensorFlow is imported --------------------------------------------
flags.DEFINE_integer("data-gpu", None, "Physical GPU index for data loading and feature "
                     "computation (becomes /GPU:0). Env: MYXTTS_DATA_GPU; the flag wins.")
flags.DEFINE_integer("model-gpu", None, "Physical GPU index for the model, optimizer and "
                     "training step (becomes /GPU:1). Env: MYXTTS_MODEL_GPU; the flag wins.")
flags.DEFINE_string("model-gpus", None, "Several model GPUs, comma-separated (e.g. 1,2,3): "
                    "a tf.distribute.MirroredStrategy over them, the data device featurising "
                    "every replica's slice of the batch (docs/distributed.md). Without a GPU, "
                    "one logical CPU device per model replica. Replaces --model-gpu.")
flags.DEFINE_enum("strategy", "auto", list(devices.STRATEGIES), "auto: multi_worker when "
                  "TF_CONFIG is set, mirrored with several --model-gpus, else none; mirrored: "
                  "MirroredStrategy on this machine; multi_worker: MultiWorkerMirroredStrategy "
                  "across machines (TF_CONFIG or a Slurm job step; docs/distributed.md).")
flags.DEFINE_integer("data-gpu-memory", None, "Memory limit of the data device in MB "
                     "(default: memory growth, no limit).")
flags.DEFINE_integer("model-gpu-memory", None, "Memory limit of the model device in MB "
                     "(default: memory growth, no limit).")
flags.DEFINE_boolean("split-gpu", False, "When --data-gpu equals --model-gpu, split that GPU "
                     "into two logical GPUs (limits from --data-gpu-memory/--model-gpu-memory, "
                     "default 1/4 of its memory for data).")
flags.DEFINE_boolean("require-gpu", False, "Fail instead of falling back to two logical CPU "
                     "devices when no GPU is found.")
flags.DEFINE_boolean("device-check", False, "Configure devices, place a tensor on each, copy "
                     "data → model device, print the placements and exit.")
flags.DEFINE_boolean("verbose", False, "Show TensorFlow's C++ start-up and log lines (oneDNN, "
                     "CUDA probing, E0000 ...), hidden by default.")

# ---- configuration ----------------------------------------------------------------------------
flags.DEFINE_string("config", "configs/base.yaml", "YAML preset (configs/tiny.yaml, small.yaml, "
                    "base.yaml); flags below override it.")

# ---- data ---------------------------------------------------------------------------------------
flags.DEFINE_string("train-data", None, "Training dataset folder: metadata.csv (or "
                    "metadata_train.csv + metadata_eval.csv) and wavs/ (see docs/data.md).")
flags.DEFINE_string("val-data", None, "Validation dataset folder (default: metadata_eval.csv "
                    "next to metadata_train.csv, else a seeded split of --train-data).")
flags.DEFINE_integer("batch-size", None, "Utterances per batch in the longest length bucket "
                     "(data.batch_size).")
flags.DEFINE_integer("buffer-size", None, "Batches prefetched onto the data device "
                     "(data.buffer_size).")
flags.DEFINE_integer("num-workers", None, "Parallel tf.data map calls; 0 = AUTOTUNE "
                     "(data.num_workers).")
flags.DEFINE_string("data-service", None, "HOST:PORT of a tf.data service dispatcher: the "
                    "training batches are made by its workers (python -m myxtts.data_service "
                    "dispatcher|worker; needs data.feature_mode: cached; validation stays local; "
                    "docs/data.md, 'tf.data service'). Sets data.data_service.")
flags.DEFINE_boolean("validate-only", False, "Validate the dataset(s), print the summary table "
                     "and statistics and exit: 0 when enough usable rows remain, non-zero with "
                     "the reason. The statistics are saved to model_info.json only in a "
                     "checkpoint directory you name (--checkpoint-dir or training.checkpoint_dir).")
flags.DEFINE_boolean("check-transcripts", False, "With --validate-only: the recogniser (Whisper, "
                     "pip install 'myxtts[eval]') hears every usable English row and lists the "
                     "rows whose transcript disagrees with what it heard far more than the "
                     "corpus's other rows do, worst first; their ids go to "
                     "<cache_dir>/suspect_transcripts.txt for data.exclude_rows (docs/data.md, "
                     "'Transcript check').")

# ---- training -----------------------------------------------------------------------------------
flags.DEFINE_string("checkpoint-dir", None, "Checkpoints, best/, tensorboard/, config.yaml, "
                    "vocab.json, model_info.json (training.checkpoint_dir). Training resumes "
                    "from the latest checkpoint found there.")
flags.DEFINE_integer("epochs", None, "Passes over the training set (training.epochs).")
flags.DEFINE_integer("max-steps", None, "Stop after N optimizer steps in total, counting resumed "
                     "ones, then save (training.max_steps; 0 = no limit).")
flags.DEFINE_enum("precision", None, ["auto", "fp32", "mixed_float16", "mixed_bfloat16"],
                  "Model-device precision (training.precision); auto = mixed_float16 on GPUs "
                  "with fp16 tensor cores, else fp32.")
flags.DEFINE_boolean("xla", None, "XLA-compile the training step; --noxla to turn it off "
                     "(training.xla).")
flags.DEFINE_integer("grad-accum", None, "Micro-batches accumulated per optimizer step "
                     "(training.grad_accum_steps).")
flags.DEFINE_float("lr", None, "Peak learning rate (training.learning_rate).")
flags.DEFINE_float("model-start-delay", None, "Wait up to this many seconds for the data device "
                   "to fill the queue of featurized batches before the first step, and log how "
                   "full it got (training.model_start_delay).")
flags.DEFINE_string("resume-from", None, "Resume from this checkpoint (a prefix like "
                    "DIR/ckpt-1000, or a directory for its latest) instead of the latest in "
                    "--checkpoint-dir; newer checkpoints there are archived, not deleted.")
flags.DEFINE_boolean("reset-training", False, "Start over at step 0: earlier checkpoints in "
                     "--checkpoint-dir are moved to archive/<time>/ (nothing is deleted).")
flags.DEFINE_string("init-from", None, "Start a new run from the model weights of a trained run "
                    "(its --checkpoint-dir for the latest checkpoint, DIR/best, or a prefix "
                    "DIR/ckpt-N): its config decides the model, its vocabulary and languages "
                    "are kept and extended; fresh optimizer, step 0, saved in --checkpoint-dir. "
                    "The source run is only read (docs/finetuning.md).")

# ---- stage ------------------------------------------------------------------------------------
flags.DEFINE_enum("stage", "acoustic", ["acoustic", "vocoder"], "What to train: the acoustic "
                  "model (text → mel) or the HiFi-GAN vocoder (mel → waveform; docs/vocoder.md). "
                  "With vocoder, --batch-size and --lr set vocoder.batch_size and "
                  "vocoder.learning_rate.")
flags.DEFINE_string("vocoder-init", None, "--stage vocoder: fine-tune, starting a new run in "
                    "--checkpoint-dir from the generator and discriminator weights of this "
                    "vocoder checkpoint directory (or ckpt prefix).")
flags.DEFINE_string("gta-from", None, "--stage vocoder: train on the teacher-forced mels this "
                    "acoustic checkpoint directory predicts for the training set (with the "
                    "matching audio), computed once into <checkpoint-dir>/gta/.")

# Flags that override a config field: flag name → dotted config key.
CONFIG_FLAGS = {
    "batch-size": "data.batch_size",
    "buffer-size": "data.buffer_size",
    "num-workers": "data.num_workers",
    "data-service": "data.data_service",
    "checkpoint-dir": "training.checkpoint_dir",
    "epochs": "training.epochs",
    "max-steps": "training.max_steps",
    "precision": "training.precision",
    "xla": "training.xla",
    "grad-accum": "training.grad_accum_steps",
    "lr": "training.learning_rate",
    "model-start-delay": "training.model_start_delay",
}


def _config_path(path: str) -> str:
    """A relative --config that is not found from the working directory is looked up in the
    repository, so `--config configs/tiny.yaml` works from anywhere."""
    if os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(REPO_DIR, path)
    return candidate if os.path.exists(candidate) else path


def load_config() -> XTTSConfig:
    """The YAML preset with flag overrides applied (the resolved config that gets saved)."""
    config = XTTSConfig.from_yaml(_config_path(FLAGS.config))
    keys = dict(CONFIG_FLAGS)
    if FLAGS["stage"].value == "vocoder":
        keys.update({"batch-size": "vocoder.batch_size", "lr": "vocoder.learning_rate"})
    return config.override({key: FLAGS[flag].value for flag, key in keys.items()},
                           source="command-line flags",
                           names={key: f"--{flag}" for flag, key in keys.items()})


def check_inputs(config: XTTSConfig) -> Optional[Source]:
    """Cheap checks, before TensorFlow is imported: there is something to do, the dataset
    folders hold metadata, the --resume-from and --init-from paths exist, and what earlier runs
    left in --checkpoint-dir can be read. Returns the --init-from run (None without)."""
    for flag in ("vocoder-init", "gta-from"):
        if FLAGS[flag].value and FLAGS["stage"].value != "vocoder":
            raise UsageError(f"--{flag} trains the vocoder: add --stage vocoder (see "
                             f"docs/vocoder.md).")
    if FLAGS["init-from"].value and FLAGS["stage"].value == "vocoder":
        raise UsageError("--init-from warm-starts the acoustic model; for the vocoder use "
                         "--vocoder-init (see docs/vocoder.md).")
    if FLAGS["check-transcripts"].value and not FLAGS["validate-only"].value:
        raise UsageError("--check-transcripts runs with --validate-only: add it (the check hears "
                         "every row, then exits without training).")
    if not FLAGS["train-data"].value:
        if FLAGS["validate-only"].value:
            raise UsageError("--validate-only needs --train-data DIR (a folder with metadata.csv "
                             "and wavs/).")
        raise UsageError("Nothing to do: pass --train-data DIR to train (see "
                         "docs/training.md), --validate-only to check a dataset, or "
                         "--device-check to check the devices.")
    _check_data_service(config)
    for flag, role in (("train-data", "train"), ("val-data", "val")):
        if FLAGS[flag].value:
            with flag_hint(f"(--{flag} {FLAGS[flag].value})", DatasetError):
                corpora.check_source(FLAGS[flag].value, role, config.data.format)
    resume_from = FLAGS["resume-from"].value
    if resume_from and not (os.path.exists(resume_from) or os.path.exists(resume_from + ".index")):
        raise UsageError(f"--resume-from {resume_from} does not exist. Pass a checkpoint prefix "
                         f"such as DIR/ckpt-1000, or a checkpoint directory.")
    _check_run_files(config.training.checkpoint_dir)
    if not FLAGS["init-from"].value:
        return None
    if resume_from:
        raise UsageError(f"{RESUME_CONFLICT} (--init-from {FLAGS['init-from'].value} asks for a "
                         f"warm start, --resume-from {resume_from} for a resume.)")
    with flag_hint(f"(--init-from {FLAGS['init-from'].value})", SourceRunError):
        source = locate_source(FLAGS["init-from"].value)
    work_dir = os.path.abspath(config.training.checkpoint_dir)
    if work_dir == os.path.abspath(source.directory):
        raise UsageError(f"--init-from {FLAGS['init-from'].value} is the run in --checkpoint-dir "
                         f"{config.training.checkpoint_dir} itself: a warm start writes a new run "
                         f"and never into the source. Pass a new --checkpoint-dir (to go on "
                         f"training that run, leave out --init-from).")
    return source


def _check_data_service(config: XTTSConfig) -> None:
    """--data-service (or data.data_service): a HOST:PORT where a dispatcher answers, for the
    acoustic model's training; checked before the dataset is validated and cached."""
    address = config.data.data_service
    if not address or FLAGS["validate-only"].value:
        return
    flag = "--data-service" if FLAGS["data-service"].value else "data.data_service"
    if FLAGS["stage"].value == "vocoder":
        raise UsageError(f"{flag} {address}: the tf.data service feeds the acoustic model's "
                         f"training only; leave it out for --stage vocoder.")
    try:
        service.check_reachable(address)
    except service.DataServiceError as e:
        raise UsageError(f"{flag} {address}: {e}") from None


def _check_run_files(work_dir: str) -> None:
    """model_info.json and config.yaml from an earlier run in `work_dir` must parse: training
    merges into the first and rewrites the second, and neither is overwritten unread."""
    read_model_info(work_dir)
    path = os.path.join(work_dir, CONFIG_FILE)
    if not os.path.isfile(path):
        return
    try:
        with open(path, encoding="utf-8") as f:
            yaml.safe_load(f)
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise MyXTTSError(
            f"{path} is not valid YAML ({' '.join(str(e).split())[:200]}). It is the resolved "
            f"configuration of the run in {work_dir}: train_main.py writes it at every start "
            f"from --config and the flags (so editing it changes nothing), and synthesis and "
            f"export read it. Undo the edit, or delete the file to have it written again; "
            f"change settings in the --config file or with flags.") from None


def main(argv) -> int:
    if len(argv) > 1:
        raise MyXTTSError(f"Unexpected argument(s) {' '.join(argv[1:])}: every option is a flag "
                          f"(--name value). See `python train_main.py --helpfull`.")
    config = load_config()
    source = None
    if not FLAGS["device-check"].value:
        source = check_inputs(config)
        if source is None and not FLAGS["reset-training"].value:
            source = continued_run(config.training.checkpoint_dir)
    if source is not None:
        hint = (f"(--init-from {FLAGS['init-from'].value}: leave it out, with a new "
                f"--checkpoint-dir, to train from scratch.)" if FLAGS["init-from"].value else
                f"(--checkpoint-dir {config.training.checkpoint_dir} continues a warm-started "
                f"run.)")
        with flag_hint(hint, SourceRunError):
            config = warm_start_config(config, _config_path(FLAGS.config), source,
                                       FLAGS["train-data"].value, FLAGS["val-data"].value)
    model_gpus = FLAGS["model-gpus"].value
    plan = devices.plan_devices(
        FLAGS["data-gpu"].value, FLAGS["model-gpu"].value,
        split_gpu=FLAGS["split-gpu"].value, require_gpu=FLAGS["require-gpu"].value,
        data_memory_mb=FLAGS["data-gpu-memory"].value,
        model_memory_mb=FLAGS["model-gpu-memory"].value,
        model_gpus=None if model_gpus is None else devices.parse_gpu_list(model_gpus),
        strategy=FLAGS["strategy"].value)
    if plan.strategy != "none" and FLAGS["stage"].value == "vocoder":
        raise UsageError(f"--stage vocoder trains on one model device; --strategy "
                         f"{plan.strategy} (several model devices or machines) is for the "
                         f"acoustic model. Pass --model-gpu instead of --model-gpus, and unset "
                         f"TF_CONFIG.")
    training = not (FLAGS["device-check"].value or FLAGS["validate-only"].value)
    with quiet_tensorflow_start(FLAGS["verbose"].value):
        devices.configure(plan)
        # MultiWorkerMirroredStrategy must start before any TensorFlow operation runs (and
        # waits for every worker: only when training).
        distribution = _distribution(plan) if training else None
    from myxtts import device_probes  # pylint: disable=import-outside-toplevel  (TensorFlow)
    logger.info("%s", device_probes.startup_report(plan))
    if FLAGS["device-check"].value:
        for line in device_probes.self_check(plan):
            print(line)
        return 0
    if FLAGS["validate-only"].value:
        return validate_only(config, source)
    if FLAGS["stage"].value == "vocoder":
        return train_vocoder(config, plan)
    return train(config, plan, source, distribution)


def _distribution(plan):
    """The tf.distribute strategy of a plan that has one (None for one model device)."""
    if plan.strategy == "none":
        return None
    from myxtts.training.distribution import Distribution  # pylint: disable=import-outside-toplevel
    return Distribution(plan)


def validate_only(config: XTTSConfig, source: Optional[Source]) -> int:
    """--validate-only: the dataset report and statistics, no training."""
    from myxtts.data.prepare import prepare_dataset  # pylint: disable=import-outside-toplevel
    # Statistics go into a run directory only when one is named (--checkpoint-dir, or
    # training.checkpoint_dir in the config): a check writes nothing into runs/default.
    named = (FLAGS["checkpoint-dir"].present
             or config.training.checkpoint_dir != TrainingConfig().checkpoint_dir)
    work_dir = config.training.checkpoint_dir if named else None
    with _removed_if_not_started(work_dir) if named else contextlib.nullcontext():
        prepared = prepare_dataset(config, FLAGS["train-data"].value, FLAGS["val-data"].value,
                                   work_dir=work_dir,
                                   base_vocabulary=source and source.vocab_path)
    print(prepared.report.table())
    print(f"\nvalidation rows: {prepared.val_source}")
    print(f"statistics written to {os.path.join(work_dir, MODEL_INFO_FILE)}" if named else
          "statistics not saved (pass --checkpoint-dir to keep them in its model_info.json)")
    print(f"OK: {len(prepared.items['train'])} usable training rows "
          f"(data.min_train_items = {config.data.min_train_items}).")
    if FLAGS["check-transcripts"].value:
        print("\n" + _check_transcripts(config, prepared))
    return 0


def _check_transcripts(config: XTTSConfig, prepared) -> str:
    """--check-transcripts: the table of the rows whose transcripts the recogniser disputes."""
    # pylint: disable=import-outside-toplevel
    from myxtts.data import transcript_check
    from myxtts.evaluation.recognizer import load_recognizer
    d = config.data
    languages = sorted({d.languages[item.language_id] for items in prepared.items.values()
                        for item in items})
    recognizer, _ = load_recognizer("whisper", ["en"] if "en" in languages else languages)
    transcripts = {}
    for flag, role in (("train-data", "train"), ("val-data", "val")):
        if FLAGS[flag].value:
            source = corpora.find_source(FLAGS[flag].value, role, d.format)
            rows, _ = corpora.read_source(source, "", d.default_language, d.vctk_mic)
            transcripts.update((r.id, r.text) for r in rows)
    logger.info("Transcript check: hearing %d rows with %s.",
                sum(len(v) for v in prepared.items.values()), recognizer.name)
    text, _, _ = transcript_check.check(prepared.items, transcripts, d.languages, recognizer, d,
                                        os.path.join(prepared.cache_dir, transcript_check.FILE))
    return text


def train(config: XTTSConfig, plan, source: Optional[Source], distribution=None) -> int:
    """The training path: input pipeline on the data device, XTTSTrainer on the model device
    (or on the strategy's model devices)."""
    # pylint: disable=import-outside-toplevel  (TensorFlow only after devices.configure)
    from myxtts.data.pipeline import InputPipeline
    from myxtts.training.trainer import XTTSTrainer
    work_dir = config.training.checkpoint_dir
    # A worker that is not the chief writes into a temporary directory (distribution.py).
    own_dir = distribution.writable_directory(work_dir) if distribution else work_dir
    with _removed_if_not_started(own_dir):
        if FLAGS["resume-from"].value:
            _adopt_vocabulary(FLAGS["resume-from"].value, own_dir)
        shard = None
        if distribution is not None and distribution.num_workers > 1:
            shard = (distribution.worker_index, distribution.num_workers)
        pipeline = InputPipeline(config, FLAGS["train-data"].value, FLAGS["val-data"].value,
                                 data_device=plan.data_device, work_dir=own_dir,
                                 base_vocabulary=source and source.vocab_path,
                                 replicas=distribution.local_replicas if distribution else 1,
                                 shard=shard)
        logger.info("Model will be placed on %s; batches are featurized on %s.",
                    ", ".join(plan.replica_devices), plan.data_device)
        trainer = XTTSTrainer(config, resume_checkpoint=FLAGS["resume-from"].value,
                              model_device=plan.model_device, tokenizer=pipeline.tokenizer,
                              reset_training=FLAGS["reset-training"].value,
                              init_from=source if FLAGS["init-from"].value else None,
                              distribution=distribution)
    return _report(trainer.fit(pipeline), "", work_dir)


def _report(summary, what: str, work_dir: str) -> int:
    """Prints how training ended and returns the exit status: 0, or 128 + the signal number
    after SIGINT/SIGTERM, with the command that resumes as the last line."""
    if summary.nothing_trained:
        limit = ("--max-steps" if summary.reason == "max_steps" else "training.max_minutes")
        print(f"Nothing to train: {what or 'the '}run already stands at step {summary.step}, its "
              f"{summary.reason} (raise {limit} to train on); checkpoint {summary.checkpoint}; "
              f"best {summary.best or 'none (no validation yet)'}.")
        return 0
    print(f"Trained {what}to step {summary.step} ({summary.reason}); checkpoint "
          f"{summary.checkpoint}; best {summary.best or 'none (no validation yet)'}; TensorBoard: tensorboard --logdir "
          f"{os.path.join(work_dir, TENSORBOARD_DIR)}")
    if not summary.reason.startswith("signal"):
        return 0
    import signal  # pylint: disable=import-outside-toplevel
    # Run again as it is, --resume-from would go back to its checkpoint and --reset-training
    # would start over: both are left out of the command that resumes.
    once = [f"--{flag}" for flag in ("resume-from", "reset-training") if FLAGS[flag].present]
    command = (f"the same command without {' and '.join(once)}" if once else
               "the same command again")
    print(f"Interrupted at step {summary.step}: run {command} to resume from "
          f"{summary.checkpoint} (nothing is lost).")
    return 128 + int(signal.Signals[summary.reason.split()[-1]])


@contextlib.contextmanager
def _removed_if_not_started(work_dir: str) -> Iterator[None]:
    """A --checkpoint-dir that this command created is removed again when the block fails (the
    dataset did not validate, the model could not be built): no run directory for a run that
    never started. An existing directory is left as it is."""
    existed = os.path.exists(work_dir)
    try:
        yield
    except BaseException:
        if not existed and os.path.isdir(work_dir):
            shutil.rmtree(work_dir, ignore_errors=True)
        raise


def train_vocoder(config: XTTSConfig, plan) -> int:
    """--stage vocoder: segments featurized on the data device, HiFi-GAN on the model device."""
    # pylint: disable=import-outside-toplevel  (TensorFlow only after devices.configure)
    from myxtts.data.segments import SegmentPipeline
    from myxtts.training.vocoder_trainer import VocoderTrainer
    work_dir = config.training.checkpoint_dir
    with _removed_if_not_started(work_dir):
        pipeline = SegmentPipeline(config, FLAGS["train-data"].value, FLAGS["val-data"].value,
                                   data_device=plan.data_device, work_dir=work_dir)
        if FLAGS["gta-from"].value:
            from myxtts.training.gta import teacher_forced_mels
            pipeline.use_teacher_forced_mels(teacher_forced_mels(
                FLAGS["gta-from"].value, pipeline.items["train"], config,
                os.path.join(work_dir, GTA_DIR), plan.model_device))
        logger.info("Vocoder will be placed on %s; segments are featurized on %s.",
                    plan.model_device, plan.data_device)
        trainer = VocoderTrainer(config, model_device=plan.model_device,
                                 init_from=FLAGS["vocoder-init"].value,
                                 resume_checkpoint=FLAGS["resume-from"].value,
                                 reset_training=FLAGS["reset-training"].value)
    return _report(trainer.fit(pipeline), "the vocoder ", work_dir)


def _adopt_vocabulary(resume_from: str, work_dir: str) -> None:
    """A model resumed from another directory must keep that run's token ids: copy its
    vocab.json into an empty --checkpoint-dir before the pipeline builds a vocabulary."""
    target = os.path.join(work_dir, VOCAB_FILE)
    if os.path.exists(target):
        return
    base = resume_from if os.path.isdir(resume_from) else os.path.dirname(resume_from)
    for folder in (base, os.path.dirname(base)):
        source = os.path.join(folder, VOCAB_FILE)
        if os.path.exists(source):
            os.makedirs(work_dir, exist_ok=True)
            shutil.copyfile(source, target)
            logger.info("Using the vocabulary of the resumed run: %s → %s", source, target)
            return


def _guarded_main(argv) -> int:
    setup_logging()
    return run_guarded(main, argv)


HELP_FLAGS = ("--help", "-help", "-?", "--helpshort", "--helpfull")


def run() -> None:
    """Console-script entry point (myxtts-train). Help asked for ends with status 0 (absl's
    help flags exit with 1)."""
    try:
        app.run(_guarded_main)
    except SystemExit as stop:
        arguments = sys.argv[1:sys.argv.index("--")] if "--" in sys.argv else sys.argv[1:]
        if stop.code == 1 and any(word in HELP_FLAGS for word in arguments):
            raise SystemExit(0) from None
        raise


if __name__ == "__main__":
    run()
