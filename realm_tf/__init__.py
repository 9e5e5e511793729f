"""realm_tf: REALM and ORQA in TensorFlow 2 / Keras (see README.md).

Set before TensorFlow is first imported, so every binary and library user gets them without exporting
anything: Model Garden and all of realm_tf need Keras 2 (tf_keras), and TensorFlow's C++ start-up lines
(CUDA probing, oneDNN and CPU-feature notices) are not for a person reading a command's output. A value
already in the environment wins.
"""

import os as _os

_os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
_os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
