"""On-device export: the model in parts, each a static-shape graph of builtin ops, as LiteRT
(`tflite`) or ONNX (`onnx`) files plus a JSON manifest; myxtts.lite runs the decode loop in host
code over them, without TensorFlow (the llama.onnx pattern: one decode step with an explicit
cache, the loop outside).

    myxtts-export --format tflite --checkpoint-dir runs/quick --vocoder-dir runs/vocos \
        --export-dir models/myxtts-lite [--quantize fp16|int8] [--decode-rows 4]

Writes export_dir/<next version>/ (myxtts.exporters.versions):

    manifest.json         format, quantization, shapes, the parts' files and tensors, the
                          settings the runtime needs (streaming contexts, reference features)
    speaker_latents.*     reference_mel [1, R, n_mels], reference_lengths [1] → speaker_latents
    decode_start.*        tokens [1, T], token_lengths, language_ids [1], speaker_latents
                          → the decode state (XTTSModel.DecodeState.to_tensors, S slots)
    decode_steps.*        the state → the state one decoder step later (no loop inside), less
                          the tensors no step changes
    decode_start_batch.*, decode_steps_batch.*   with B > 1: the same for B rows; the parts
                          above then have one row (a lone sentence pays for one)
    postnet.*             mel_before [1, W, n_mels], lengths [1] (and speaker_latents with
                          model.reference_matching) → mel (frames past lengths are masked,
                          so a window padded to W gives the unpadded result; matched to the
                          reference's frames as the whole decode's are)
    vocoder.*             mel [1, W, n_mels] → waveform [1, W * hop] (a neural vocoder only;
                          without one the runtime runs Griffin-Lim in numpy); vocoder_short.*
                          the same for W/2 frames
    mel_filters.npy, stft_window.npy   the log-mel's filterbank and window (numpy features)
    config.yaml, vocab.json            the text front end and the data settings

T = the most tokens the text front end puts in one sentence (TextFrontEnd.max_sentence_tokens),
S = the decode's maximum steps, R = the reference frames of
data.ref_max_seconds, W = WINDOW_FRAMES (the streaming driver's windows fit in it). Every graph
is traced inside models.layers.static_shapes(): the decode buffers are written by scatter and
read whole with masks, as under XLA, so LiteRT needs no Flex (select-TF) ops.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import shutil
import tempfile
import time
from typing import Any, Dict, List, Mapping, Optional

import numpy as np
import tensorflow as tf
from tensorflow.python.framework.convert_to_constants import (  # no public equivalent
    convert_variables_to_constants_v2)

from myxtts.atomic_write import atomic_write
from myxtts.data import audio_math
from myxtts.data.audio import LogMel, mel_filterbank
from myxtts.errors import MyXTTSError
from myxtts.decoding.scheduler import CHUNK_STEPS, CROSSFADE_SAMPLES
from myxtts.exporters.registry import register
from myxtts.exporters.versions import publish_version
from myxtts.inference.checkpoint_loading import load_checkpoint
from myxtts.inference.reference_audio import reference_sample_count
from myxtts.inference.synthesizer import TOKEN_PADDING
from myxtts.inference.text_front_end import sentence_token_budget
from myxtts.inference.vocoding import GRIFFIN_LIM_CONTEXT, load_vocoder
from myxtts.inference.voices import conditioning_fingerprint
from myxtts.models.layers import static_shapes
from myxtts.models.xtts import DecodeState
from myxtts.run_directory import CONFIG_FILE, VOCAB_FILE

logger = logging.getLogger("myxtts.export")

MANIFEST = "manifest.json"
FORMAT_VERSION = 1  # myxtts.lite.parts reads this version
# Decoder steps per decode_steps call, unrolled without a loop (XTTSModel.decode_steps): a part
# that looped over 8 steps (a WHILE op) failed now and then in LiteRT ("Input tensor ... lacks
# data": 1 run in 6 to 12 of the cloning recipe's model, ai-edge-litert 2.3). 8 unrolled steps a
# call (with 7 spare slots) reached RTF 0.012-0.015 against 0.016 but failed in 2 of 8 runs
# ("scatter_nd index out of bounds", cause not found; docs/edge.md): one step a call passed 36
# of 36 runs.
STEPS_PER_CALL = 1
QUANTIZATIONS = ("none", "fp16", "int8")
MAX_DECODE_ROWS = 16  # and fewer than the decode's slots (S): the runtime tells them apart by size
SUFFIX = {"tflite": ".tflite", "onnx": ".onnx"}


@dataclasses.dataclass
class EdgeExportResult:
    version: int
    path: str
    parts: List[str]
    bytes: int
    seconds: float


def window_frames(reduction_factor: int, postnet_context: int, vocoder_context: int,
                  hop_length: int) -> int:
    """Frames of the postnet and vocoder windows: the streaming driver's largest window (a
    chunk of CHUNK_STEPS steps, the stage's context on both sides, the crossfade tail), with a
    margin, rounded up to 16."""
    tail = -(-CROSSFADE_SAMPLES // hop_length)
    context = max(postnet_context, vocoder_context)
    return -(-(CHUNK_STEPS * reduction_factor + 2 * (context + tail) + reduction_factor) // 16) * 16


class EdgeGraphs:
    """The parts as tf.functions of static shapes over a restored model: the decode of one
    row and (decode_rows > 1) of decode_rows, every other part of one row."""

    def __init__(self, loaded, vocoder, max_decoder_steps: int, decode_rows: int = 1):
        self.model, config = loaded.model, loaded.config
        d, m = config.data, config.model
        self.n_mels, self.hop = d.n_mels, d.hop_length
        self.max_steps = int(max_decoder_steps)
        self.stop_threshold = m.stop_threshold
        # The longest sentence the text front end hands the decoder (TextFrontEnd.sentences
        # cuts longer ones), not max_text_positions: every decode_start and every step's text
        # attention runs over all T positions.
        budget = sentence_token_budget(m.max_text_positions, self.max_steps,
                                       m.reduction_factor, m.max_frames_per_token)
        self.text_positions = -(-budget // TOKEN_PADDING) * TOKEN_PADDING
        self.reference_frames = audio_math.num_frames(reference_sample_count(d), d.hop_length)
        self.vocoder = vocoder
        # Without a vocoder the runtime's numpy Griffin-Lim takes Griffin-Lim's window context.
        self.vocoder_context = vocoder.receptive_field if vocoder else GRIFFIN_LIM_CONTEXT
        self.window = window_frames(m.reduction_factor, self.model.postnet.receptive_field,
                                    self.vocoder_context, d.hop_length)
        self.latent_shape = [1, m.speaker_latent_rows, m.d_model]
        self.decode_rows = int(decode_rows)

    def functions(self) -> Dict[str, tf.types.experimental.ConcreteFunction]:
        n = self.n_mels
        spec = tf.TensorSpec
        with static_shapes():
            functions = {"speaker_latents": tf.function(self.speaker_latents, input_signature=[
                spec([1, self.reference_frames, n], tf.float32, "reference_mel"),
                spec([1], tf.int32, "reference_lengths")]).get_concrete_function()}
            for suffix, rows in decode_part_rows(self.decode_rows).items():
                functions.update(self.decode_functions(rows, suffix))
            postnet = [spec([1, self.window, n], tf.float32, "mel_before"),
                       spec([1], tf.int32, "lengths")]
            if self.model.config.reference_matching:
                postnet.append(spec(self.latent_shape, tf.float32, "speaker_latents"))
            functions["postnet"] = tf.function(
                self.postnet, input_signature=postnet).get_concrete_function()
            if self.vocoder is not None:
                # The vocoder is most of the work: a short window's part too, so a window that
                # fits in it is not padded to W (a one-window sentence mostly does).
                for name, frames in vocoder_parts(self.window).items():
                    functions[name] = tf.function(self.vocode, input_signature=[
                        spec([1, frames, n], tf.float32, "mel")]).get_concrete_function()
        return functions

    def decode_functions(self, rows: int, suffix: str):
        """{decode_start<suffix>, decode_steps<suffix>: the decode of `rows` rows}."""
        t, spec = self.text_positions, tf.TensorSpec
        start = tf.function(self.decode_start, input_signature=[
            spec([rows, t], tf.int32, "tokens"), spec([rows], tf.int32, "token_lengths"),
            spec([rows], tf.int32, "language_ids"),
            spec([rows] + self.latent_shape[1:], tf.float32, "speaker_latents")]
        ).get_concrete_function()
        state = {name: spec(value.shape, value.dtype, name)
                 for name, value in start.structured_outputs.items()}
        return {"decode_start" + suffix: start,
                "decode_steps" + suffix: tf.function(self.decode_steps, input_signature=[state])
                .get_concrete_function()}

    def speaker_latents(self, reference_mel, reference_lengths):
        return {"speaker_latents": self.model.speaker_latents(reference_mel, reference_lengths)}

    def decode_start(self, tokens, token_lengths, language_ids, speaker_latents):
        """The state, with STEPS_PER_CALL - 1 slots beyond the length cap of max_steps: a
        call that starts before the cap runs all its steps."""
        state = self.model.start_decode(tokens, token_lengths, language_ids, speaker_latents,
                                        self.max_steps + STEPS_PER_CALL - 1).to_tensors()
        return dict(state, limit=tf.minimum(state["limit"], self.max_steps))

    def decode_steps(self, state):
        """The state after a step, without the tensors no step changes (the host keeps
        those from decode_start: the text and latent keys and values, the text mask, the
        length cap), so a call copies less."""
        after = self.model.decode_steps(DecodeState.from_tensors(state), STEPS_PER_CALL,
                                        self.stop_threshold).to_tensors()
        return {name: value for name, value in after.items() if not constant_state(name)}

    def postnet(self, mel_before, lengths, speaker_latents=None):
        mask = tf.sequence_mask(lengths, tf.shape(mel_before)[1])
        mel = self.model.postnet(mel_before, mask)
        if speaker_latents is not None:
            mel = self.model.reference_matched(mel, speaker_latents, mask)
        return {"mel": mel}

    def vocode(self, mel):
        return {"waveform": self.vocoder.windows(mel)}


def decode_part_rows(decode_rows: int) -> Dict[str, int]:
    """{part name suffix: rows} of the decode parts: decode_start / decode_steps of one row
    (a lone sentence pays for one), and with decode_rows > 1 decode_start_batch /
    decode_steps_batch of decode_rows rows (myxtts.lite.synthesizer.LiteDecoder picks)."""
    return {"": 1, **({"_batch": decode_rows} if decode_rows > 1 else {})}


def vocoder_parts(window: int):
    """{part name: window frames} of the vocoder parts: `vocoder` takes W frames,
    `vocoder_short` half of them (rounded up to 16)."""
    return {"vocoder_short": -(-window // 32) * 16, "vocoder": window}


def constant_state(name: str) -> bool:
    """Whether decode state tensor `name` (DecodeState.to_tensors) stays as decode_start made
    it."""
    return name.startswith(("memory_", "norms_", "matching_")) or name in ("text_mask", "limit")


def _convert_tflite(function, quantize: str) -> bytes:
    # Weights become constants: LiteRT resource variables would need an initializer call.
    frozen = convert_variables_to_constants_v2(function)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([frozen], tf.Module())
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]  # no Flex ops
    if quantize != "none":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]  # int8: dynamic-range weights
    if quantize == "fp16":
        converter.target_spec.supported_types = [tf.float16]
    return converter.convert()


def _convert_onnx(function, quantize: str) -> bytes:
    """ONNX (opset 17) of the frozen graph, through tf2onnx; the outputs are named
    onnx_output_names(count) (the function's flattened outputs in order)."""
    if quantize != "none":
        raise ValueError("--quantize is for --format tflite; ONNX parts are exported in fp32.")
    # pylint: disable=import-outside-toplevel  (only this format needs the converter)
    with _quiet_loggers("tf2onnx", "tensorflow"):  # its INFO lines and TF's deprecation notes
        import tf2onnx
        _register_handlers()
        frozen = convert_variables_to_constants_v2(function)
        model, _ = tf2onnx.convert.from_graph_def(
            frozen.graph.as_graph_def(), input_names=[t.name for t in frozen.inputs],
            output_names=[t.name for t in frozen.outputs], opset=17)
    return model.SerializeToString()


@contextlib.contextmanager
def _quiet_loggers(*names: str):
    """The named loggers (and their children) at ERROR while the block runs."""
    loggers = [logging.getLogger(name) for name in names]
    levels = [one.level for one in loggers]
    for one in loggers:
        one.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for one, level in zip(loggers, levels):
            one.setLevel(level)


def onnx_output_names(count: int) -> List[str]:
    """The tensor names tf2onnx gives a frozen function's outputs (its Identity ops)."""
    return ["Identity:0"] + [f"Identity_{i}:0" for i in range(1, count)]


def _register_handlers() -> None:
    """tf2onnx handlers for two ops it lacks:
    - Erfc (exact GELU is 0.5 x erfc(-x / sqrt 2)): erfc(x) = 1 - erf(x), with ONNX's Erf;
    - XlaDynamicUpdateSlice as the decode buffers use it (models.layers.write_slot: one slot
      along the first axis, every other start 0): ScatterND at [[start[0]]]."""
    from tf2onnx import handler, utils  # pylint: disable=import-outside-toplevel
    from onnx import TensorProto  # pylint: disable=import-outside-toplevel

    @handler.tf_op("XlaDynamicUpdateSlice")
    class SlotUpdate:  # pylint: disable=unused-variable  (registered by the decorator)
        @classmethod
        def version_11(cls, ctx, node, **kwargs):
            del kwargs
            data, update, starts = node.input
            data_shape, update_shape = ctx.get_shape(data), ctx.get_shape(update)
            if update_shape[0] != 1 or list(update_shape[1:]) != list(data_shape[1:]):
                raise ValueError(f"{node.name}: only one whole slot along the first axis "
                                 f"converts (update {update_shape} into {data_shape})")
            first = ctx.make_node("Slice", [starts, ctx.make_const(
                utils.make_name("begin"), np.array([0], np.int64)).output[0], ctx.make_const(
                utils.make_name("end"), np.array([1], np.int64)).output[0]])
            index = ctx.make_node("Cast", [first.output[0]], attr={"to": TensorProto.INT64})
            indices = ctx.make_node("Reshape", [index.output[0], ctx.make_const(
                utils.make_name("shape"), np.array([1, 1], np.int64)).output[0]])
            outputs, name = node.output, node.name
            ctx.remove_node(name)
            ctx.make_node("ScatterND", [data, indices.output[0], update], outputs=outputs,
                          name=name)

    @handler.tf_op("Erfc")
    class Erfc:  # pylint: disable=unused-variable  (registered by the decorator)
        @classmethod
        def version_9(cls, ctx, node, **kwargs):
            del kwargs
            dtype = utils.map_onnx_to_numpy_type(ctx.get_dtype(node.input[0]))
            one = ctx.make_const(utils.make_name("one"), np.array(1, dtype=dtype))
            erf = ctx.make_node("Erf", [node.input[0]])
            outputs, name = node.output, node.name
            ctx.remove_node(name)
            ctx.make_node("Sub", [one.output[0], erf.output[0]], outputs=outputs, name=name)


def _tensor_list(structure) -> List[dict]:
    # None: an argument left at its default, no input (the postnet's speaker_latents)
    flat = structure.items() if isinstance(structure, dict) else \
        ((s.name, s) for s in structure if s is not None)
    return [{"name": name, "shape": [-1 if x is None else int(x) for x in spec.shape], "dtype": spec.dtype.name}
            for name, spec in sorted(flat)]


def _manifest(graphs: EdgeGraphs, loaded, functions, files: Dict[str, str], fmt: str,
              quantize: str, vocoder) -> dict:
    config = loaded.config
    d, m = config.data, config.model
    parts = {}
    for name, function in functions.items():
        inputs = function.structured_input_signature[0]
        inputs = inputs[0] if len(inputs) == 1 and isinstance(inputs[0], dict) else inputs
        outputs = _tensor_list(function.structured_outputs)
        # What each runtime calls the outputs, in the function's (flattened) output order.
        runtime_names = ([f"output_{i}" for i in range(len(outputs))] if fmt == "tflite"
                         else onnx_output_names(len(outputs)))
        for tensor, runtime_name in zip(outputs, runtime_names):
            tensor["runtime_name"] = runtime_name
        parts[name] = {"file": files[name], "inputs": _tensor_list(inputs), "outputs": outputs}
    return {
        "format": "myxtts-edge", "format_version": FORMAT_VERSION, "runtime": fmt,
        "quantize": quantize, "parts": parts,
        "checkpoint": os.path.abspath(loaded.checkpoint_path),
        "voice_fingerprint": conditioning_fingerprint(loaded.model, config),
        "vocoder": vocoder.checkpoint_path if vocoder else "griffin-lim",
        "shapes": {"text_positions": graphs.text_positions,
                   "reference_frames": graphs.reference_frames,
                   "window_frames": graphs.window, "steps_per_call": STEPS_PER_CALL,
                   "decode_rows": graphs.decode_rows,
                   "max_decoder_steps": graphs.max_steps, "token_padding": TOKEN_PADDING},
        "streaming": {"reduction_factor": m.reduction_factor, "n_mels": d.n_mels,
                      "crossfade_samples": CROSSFADE_SAMPLES,
                      "postnet_context": loaded.model.postnet.receptive_field,
                      "vocoder_context": graphs.vocoder_context},
        "audio": {"sample_rate": d.sample_rate, "hop_length": d.hop_length, "n_fft": d.n_fft,
                  "win_length": d.win_length, "mel_floor": d.mel_floor,
                  "trim_silence": d.trim_silence, "trim_top_db": d.trim_top_db,
                  "normalize_loudness": d.normalize_loudness, "target_rms_db": d.target_rms_db,
                  "ref_max_seconds": d.ref_max_seconds, "ref_min_seconds": d.ref_min_seconds},
    }


def export_edge(fmt: str, checkpoint_dir: str, export_dir: str, *,
                checkpoint: Optional[str] = None, max_decoder_steps: Optional[int] = None,
                vocoder_dir: Optional[str] = None, vocoder_checkpoint: Optional[str] = None,
                decoding: Optional[Mapping[str, Any]] = None, quantize: str = "none",
                decode_rows: int = 1, **_unused) -> EdgeExportResult:
    """Exports a checkpoint's parts for `fmt` ("tflite" or "onnx") as export_dir/<version>/
    (`decoding` replaces the run's decoding settings in the exported decode:
    checkpoint_loading.load_checkpoint; `decode_rows` sentences decode together, the most a
    batch of the runtime and of myxtts-serve's engine holds)."""
    if quantize not in QUANTIZATIONS:
        raise ValueError(f"quantize {quantize!r} is not one of {', '.join(QUANTIZATIONS)}")
    if not 1 <= decode_rows <= MAX_DECODE_ROWS:
        raise ValueError(f"decode_rows {decode_rows} must be in [1, {MAX_DECODE_ROWS}]")
    started = time.monotonic()
    loaded = load_checkpoint(checkpoint_dir, checkpoint, decoding)
    vocoder = (load_vocoder(vocoder_dir, loaded.config.data, vocoder_checkpoint)
               if vocoder_dir else None)
    graphs = EdgeGraphs(loaded, vocoder,
                        max_decoder_steps or loaded.config.model.max_decoder_steps, decode_rows)
    if decode_rows >= graphs.max_steps + STEPS_PER_CALL - 1:
        raise MyXTTSError(f"--decode-rows {decode_rows} must be fewer than the decode's "
                          f"{graphs.max_steps + STEPS_PER_CALL - 1} steps (--max-decoder-steps, "
                          f"or the run's model.max_decoder_steps): give fewer rows or more "
                          f"steps.")
    functions = graphs.functions()
    os.makedirs(export_dir, exist_ok=True)
    staged = tempfile.mkdtemp(prefix=".tmp-export-", dir=export_dir)
    os.chmod(staged, 0o755)
    try:
        files, size = {}, 0
        for name, function in functions.items():
            blob = (_convert_tflite(function, quantize) if fmt == "tflite"
                    else _convert_onnx(function, quantize))
            files[name] = name + SUFFIX[fmt]
            with open(os.path.join(staged, files[name]), "wb") as f:
                f.write(blob)
            size += len(blob)
        d = loaded.config.data
        np.save(os.path.join(staged, "mel_filters.npy"), mel_filterbank(
            d.sample_rate, d.n_fft, d.n_mels, d.fmin, d.fmax).astype(np.float32))
        np.save(os.path.join(staged, "stft_window.npy"),
                LogMel.from_config(d).window.astype(np.float64))
        for name in (CONFIG_FILE, VOCAB_FILE):
            shutil.copy(os.path.join(loaded.directory, name), staged)
        atomic_write(os.path.join(staged, MANIFEST), json.dumps(
            _manifest(graphs, loaded, functions, files, fmt, quantize, vocoder), indent=2))
        version = publish_version(staged, export_dir)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    path = os.path.join(export_dir, str(version))
    seconds = time.monotonic() - started
    logger.info("Exported %s as %s parts to %s (%s, %.1f MB) in %.1f s.", loaded.checkpoint_path,
                fmt, path, "fp32" if quantize == "none" else quantize, size / 1e6, seconds)
    return EdgeExportResult(version, path, sorted(files), size, seconds)


@register("tflite")
def export_tflite(checkpoint_dir: str, export_dir: str, **kwargs) -> EdgeExportResult:
    return export_edge("tflite", checkpoint_dir, export_dir, **kwargs)


@register("onnx")
def export_onnx(checkpoint_dir: str, export_dir: str, **kwargs) -> EdgeExportResult:
    return export_edge("onnx", checkpoint_dir, export_dir, **kwargs)

