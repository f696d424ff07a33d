"""The decode runtime, without TensorFlow: the backend protocol every decoder implements
(`backend.DecodeBackend`: the checkpoint's, the SavedModel's and the on-device export's) and the
one chunk scheduler that drives any of them (`scheduler.decoded_chunks`)."""
