"""Feature detection for the optional tensorflow-io package; myxtts never requires it.

With TensorFlow 2.21, `import tensorflow_io` succeeds but its native ops fail to load
(`NotImplementedError: unable to open file: libtensorflow_io.so ... undefined symbol`), so the
import alone proves nothing: detection runs one real op. myxtts decodes audio with soundfile and
computes features with tf.signal either way; this check only tells the user what they have.
"""

from __future__ import annotations

import functools
from typing import Tuple


@functools.lru_cache(maxsize=1)
def tensorflow_io_status() -> Tuple[bool, str]:
    """(usable, reason): whether tensorflow-io is installed AND its native ops load."""
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
        import tensorflow_io as tfio  # pylint: disable=import-outside-toplevel
    except ImportError:
        return False, "not installed (optional; audio is decoded with soundfile)"
    try:
        tfio.audio.resample(tf.zeros([16, 1]), rate_in=16000, rate_out=8000)
    except Exception as e:  # pylint: disable=broad-except  # any load failure means "unusable"
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "undefined symbol" in str(e):
            first = "native ops fail to load (undefined symbol in libtensorflow_io.so)"
        return False, (f"tensorflow-io {getattr(tfio, '__version__', '?')} installed but "
                       f"unusable: {first[:160]}; audio is decoded with soundfile")
    return True, f"tensorflow-io {getattr(tfio, '__version__', '?')} usable (not required)"
