"""The decode state kept inside the runtime between decode_steps calls.

Handing the whole state to a part each step (a LiteRT signature runner's `part(**state)`)
resizes and re-allocates the interpreter's tensors and copies every buffer in and out: the
self-attention caches, the frame and alignment buffers of S slots and the text keys and values
(about 2 MB a step for the cloning recipe's model). Here the state is written into the part's
input tensors once per sentence; after each call only what a call changes is carried from the
outputs back to the inputs: the slot rows that call wrote in the slot buffers (leading
dimension S) and the small tensors whole. Inputs no step changes (text and latent keys and
values, masks, the limit) are never copied again.

    loop = resident_loop(parts["decode_steps"], manifest)
    loop.load(state)                 # numpy arrays by the manifest's names
    loop.run(first_slot, count)      # one call; slots [first_slot, first_slot + count) written
    loop.value("done")               # a copy of one state tensor
    loop.state()                     # copies of all of them (to park a decode)
"""

from __future__ import annotations

from typing import Dict, Sequence

import numpy as np


class _Resident:
    """What both runtimes share: the state's names, and the outputs a call carries back (every
    output is also an input)."""

    def __init__(self, inputs: Sequence[str], outputs: Sequence[str]):
        self.names = list(inputs)
        self.carried = list(outputs)

    def value(self, name: str) -> np.ndarray:
        raise NotImplementedError

    def state(self) -> Dict[str, np.ndarray]:
        return {name: self.value(name) for name in self.names}


class TFLiteResident(_Resident):
    """The state in a LiteRT interpreter's own input tensors; after a call, the slot rows it
    wrote and the small tensors are copied from the outputs' numpy views (`tensor()`, dropped at
    once) to the inputs'.

    The interpreter's public invoke() refuses to run while it counts a view of its memory alive
    anywhere in the process (a reference count on its wrapper), and in bench_edge.py's runs it
    counted one that was not ours: arrays its own calls had made. So the call goes to the
    wrapper's Invoke(), which is what invoke() calls after that check. The check guards against
    tensors reallocated under a view; these graphs have static shapes and nothing here
    reallocates after `allocate_tensors()`."""

    def __init__(self, part, slots: int):
        self.interpreter = part.interpreter
        inputs, outputs = part.details()
        self.interpreter.allocate_tensors()
        self._invoke = self.interpreter._interpreter.Invoke  # pylint: disable=protected-access
        self.input_index = {name: detail["index"] for name, detail in inputs.items()}
        self.output_index = {name: detail["index"] for name, detail in outputs.items()}
        super().__init__(inputs, outputs)
        shapes = {name: detail["shape"] for name, detail in inputs.items()}
        self.slotted = {name for name in self.carried
                        if len(shapes[name]) > 1 and shapes[name][0] == slots}
        # A view of a 0-d tensor is a numpy scalar, not a view: these go through get/set.
        self.scalars = {name for name in self.carried if len(shapes[name]) == 0}

    def load(self, state: Dict[str, np.ndarray]) -> None:
        for name, index in self.input_index.items():
            self.interpreter.set_tensor(index, np.asarray(state[name]))

    def run(self, first_slot: int, count: int) -> None:
        self._invoke()
        rows = slice(first_slot, first_slot + count)
        interpreter, tensor = self.interpreter, self.interpreter.tensor
        for name in self.carried:
            source, target = self.output_index[name], self.input_index[name]
            if name in self.scalars:
                interpreter.set_tensor(target, interpreter.get_tensor(source))
            elif name in self.slotted:
                tensor(target)()[rows] = tensor(source)()[rows]
            else:
                tensor(target)()[...] = tensor(source)()

    def value(self, name: str) -> np.ndarray:
        return self.interpreter.get_tensor(self.input_index[name])


class OnnxResident(_Resident):
    """The state in numpy arrays bound to an ONNX Runtime session by IOBinding (CPU OrtValues
    share the arrays' memory), so a call reads and writes them in place."""

    def __init__(self, part, slots: int):
        import onnxruntime  # pylint: disable=import-outside-toplevel
        session = part.session
        self.session = session
        self.binding = session.io_binding()
        self.inputs = {}
        for arg in session.get_inputs():
            name = arg.name[:-2] if arg.name.endswith(":0") else arg.name
            self.inputs[name] = np.zeros(arg.shape, _ONNX_TYPES[arg.type])
            self.binding.bind_ortvalue_input(
                arg.name, onnxruntime.OrtValue.ortvalue_from_numpy(self.inputs[name]))
        self.outputs = {}
        for runtime_name, name in part.outputs.items():
            self.outputs[name] = np.zeros_like(self.inputs[name])
            self.binding.bind_ortvalue_output(
                runtime_name, onnxruntime.OrtValue.ortvalue_from_numpy(self.outputs[name]))
        super().__init__(self.inputs, self.outputs)
        # Carried by the rows a call wrote when the leading dimension is the slot count.
        self.slotted = {name for name, value in self.outputs.items()
                        if value.ndim > 1 and value.shape[0] == slots}

    def load(self, state: Dict[str, np.ndarray]) -> None:
        for name, array in self.inputs.items():
            array[...] = state[name]

    def run(self, first_slot: int, count: int) -> None:
        self.session.run_with_iobinding(self.binding)
        rows = slice(first_slot, first_slot + count)
        for name in self.carried:
            if name in self.slotted:
                self.inputs[name][rows] = self.outputs[name][rows]
            else:
                self.inputs[name][...] = self.outputs[name]

    def value(self, name: str) -> np.ndarray:
        return self.inputs[name].copy()


_ONNX_TYPES = {"tensor(float)": np.float32, "tensor(int32)": np.int32, "tensor(bool)": np.bool_,
               "tensor(int64)": np.int64, "tensor(float16)": np.float16}


def resident_loop(part, manifest: dict, name: str = "decode_steps"):
    """The resident state of the decode_steps part `name` loaded by myxtts.lite.parts."""
    slots = next(tensor["shape"][0] for tensor in manifest["parts"][name]["inputs"]
                 if tensor["name"] == "frames")
    return {"tflite": TFLiteResident, "onnx": OnnxResident}[manifest["runtime"]](part, slots)
