import os

import pytest

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


@pytest.fixture
def eager_tensorflow_steps():
    """Runs Keras's traced steps eagerly on the TensorFlow backend, for the test's length.

    For a test of a few training steps whose subject is their arithmetic, not
    the graph: tracing a `tf.function` costs seconds, several times the steps
    themselves. JAX and torch are left as they are.
    """
    import keras

    if keras.backend.backend() != "tensorflow":
        yield
        return
    import tensorflow as tf

    tf.config.run_functions_eagerly(True)
    try:
        yield
    finally:
        tf.config.run_functions_eagerly(False)


@pytest.fixture
def keras_hub_backbone():
    """Builds a tiny KerasHub backbone from its constructor, with random weights.

    `build(name, **overrides)`: `name` is `"bert"`, `"gpt2"` (30 tokens, up to
    8 positions) or `"vit"` (8 x 8 RGB images in 4 x 4 patches), each two
    blocks of 2 heads of width 8; `overrides` replace the constructor's
    arguments.
    """

    def build(name, **overrides):
        import keras_hub

        text = {"vocabulary_size": 30, "max_sequence_length": 8, "intermediate_dim": 16}
        vision = {"image_shape": (8, 8, 3), "patch_size": 4, "mlp_dim": 16}
        constructor, arguments = {
            "bert": (keras_hub.models.BertBackbone, text),
            "gpt2": (keras_hub.models.GPT2Backbone, text),
            "vit": (keras_hub.models.ViTBackbone, vision),
        }[name]
        sizes = {"num_layers": 2, "num_heads": 2, "hidden_dim": 8}
        return constructor(**{**sizes, **arguments, **overrides})

    return build


@pytest.fixture
def small_t2t_vit():
    """Builds a T2T-ViT for 12 x 12 images and 3 classes: 37 tokens of width 16, one block.

    `build(**overrides)`: `overrides` replace the arguments of `build_t2t_vit`.
    """

    def build(**overrides):
        from keras_attn.models import build_t2t_vit

        sizes = {"hidden_dim": 16, "num_layers": 1, "num_heads": 2, "intermediate_dim": 32}
        soft_split = {"kernel_sizes": (3, 3, 3), "strides": (2, 1, 1), "paddings": (1, 1, 1)}
        arguments = {"variant": None, **sizes, "token_dim": 4, **soft_split, **overrides}
        return build_t2t_vit((12, 12), 3, **arguments)

    return build
