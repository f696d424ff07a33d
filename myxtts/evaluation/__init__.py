"""Free-running evaluation: does a model say the text it is given, in the voice it is given?
(docs/evaluation.md). metrics.py holds the text measures, pure numpy, shared by the trainer's
validation log and `myxtts-evaluate`; speaker_measures.py the voice-cloning measures on the
embeddings of speaker_judge.py's independent speaker encoder; sentence_choice.py which
sentences and references; free_running.py runs them."""
