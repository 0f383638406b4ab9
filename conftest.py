import os

# Notebooks and reproductions run at their small size inside the test suite.
os.environ.setdefault("KERAS_ATTN_SMALL", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
