"""Runs every signature of an exported SavedModel the way a TF Serving client would, in a process
that never imports myxtts (tests/test_export.py starts it with subprocess).

    python tests/serving_runner.py VERSION_DIR INPUTS.npz OUTPUTS.npz [VERSION_DIR ...]

INPUTS.npz holds "<signature>/<input>" arrays. For each signature a tensorflow-serving-api
PredictRequest is built from them and checked against the loaded signature (same input names,
same dtypes); the signature then runs on the tensors decoded back from the request, and the
outputs are written as "<signature>/<output>". Prints one JSON line describing the checks (one
line per export, in order: several VERSION_DIR INPUTS OUTPUTS triples share one TensorFlow start).
"""

import json
import sys

import numpy as np
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2


def predict_request(signature_name, inputs):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "myxtts"
    request.model_spec.signature_name = signature_name
    for name, value in inputs.items():
        request.inputs[name].CopyFrom(tf.make_tensor_proto(value))
    return request


def check_request(request, function):
    """Problems of `request` against the signature `function` (empty when it fits)."""
    specs = function.structured_input_signature[1]
    problems = []
    if set(request.inputs) != set(specs):
        problems.append(f"inputs {sorted(request.inputs)} != signature {sorted(specs)}")
    for name, spec in specs.items():
        if name in request.inputs and request.inputs[name].dtype != spec.dtype.as_datatype_enum:
            problems.append(f"{name}: dtype {request.inputs[name].dtype} != "
                            f"{spec.dtype.as_datatype_enum}")
    return problems


def main(version_dir, inputs_path, outputs_path):
    loaded = tf.saved_model.load(version_dir)
    arrays = np.load(inputs_path, allow_pickle=False)
    by_signature = {}
    for key in arrays.files:
        signature, name = key.split("/")
        by_signature.setdefault(signature, {})[name] = arrays[key]
    outputs, report = {}, {"myxtts_imported": "myxtts" in sys.modules, "requests": {}}
    for signature, inputs in sorted(by_signature.items()):
        function = loaded.signatures[signature]
        request = predict_request(signature, inputs)
        report["requests"][signature] = check_request(request, function)
        result = function(**{k: tf.constant(tf.make_ndarray(v)) for k, v in
                             request.inputs.items()})
        for name, value in result.items():
            outputs[f"{signature}/{name}"] = value.numpy()
    report["assets"] = sorted(tf.io.gfile.listdir(f"{version_dir}/assets"))
    np.savez(outputs_path, **outputs)
    print(json.dumps(report))


if __name__ == "__main__":
    arguments = sys.argv[1:]
    if not arguments or len(arguments) % 3:
        sys.exit(__doc__)
    for start in range(0, len(arguments), 3):
        main(*arguments[start:start + 3])
