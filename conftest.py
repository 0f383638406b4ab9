import os

# Notebooks and reproductions run at their small size inside the test suite.
os.environ.setdefault("KERAS_ATTN_SMALL", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# Test programs are tiny: XLA's compile time, not its code's speed, is what
# they spend. Skipping LLVM's expensive passes cuts the compile time of the
# XLA steps (TensorFlow and JAX) by about a tenth; XLA's classic CPU emitters
# compile a program in about half the time of its MLIR fusion emitters, and
# on JAX every eager op is such a program. Each xdist worker gets one
# TensorFlow thread, so that two workers do not oversubscribe two cores.
os.environ.setdefault(
    "XLA_FLAGS",
    "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
    " --xla_cpu_use_fusion_emitters=false",
)
os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")
os.environ.setdefault("TF_NUM_INTEROP_THREADS", "1")
