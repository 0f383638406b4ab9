import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_bert_encoder, build_vision_transformer
from keras_attn.pruning import prune_heads

HEADS = {"layer_0_attention": [0, 2], "layer_1_attention": [1, 2, 3]}


def _encoder(**kwargs):
    keras.utils.set_random_seed(0)
    return build_bert_encoder(
        50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32, **kwargs
    )


def _inputs(head_mask):
    rng = np.random.default_rng(0)
    padding_mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], "int32")
    return {
        "token_ids": rng.integers(1, 50, (2, 6)).astype("int32") * padding_mask,
        "padding_mask": padding_mask,
        "segment_ids": np.zeros((2, 6), "int32"),
        "head_mask": np.broadcast_to(head_mask, (2, *head_mask.shape)).astype("float32"),
    }


def _mask(heads, shape):
    mask = np.ones(shape, "float32")
    for name, removed in heads.items():
        mask[int(name.split("_")[1]), removed] = 0.0
    return mask


def test_pruned_core_model_equals_masked_model(tmp_path):
    model = _encoder(output_hidden_states=True, head_mask=True)
    pruned = prune_heads(model, HEADS)
    assert [pruned.get_layer(f"layer_{i}_attention").num_heads for i in range(2)] == [2, 1]
    assert model.get_layer("layer_0_attention").num_heads == 4
    assert pruned.count_params() == model.count_params() - 5 * (4 * 16 * 4 + 3 * 4)
    masked = _inputs(_mask(HEADS, (2, 4)))
    expected = model(masked)
    outputs = pruned(masked)
    np.testing.assert_allclose(outputs["hidden_states"], expected["hidden_states"], atol=1e-5)
    # The head mask still applies to the kept heads.
    partly = _mask({"layer_0_attention": [0, 1, 2]}, (2, 4))
    partly[1, 1:] = 0.0
    np.testing.assert_allclose(
        pruned(_inputs(partly))["sequence_output"],
        model(_inputs(partly))["sequence_output"],
        atol=1e-5,
    )
    pruned.save(tmp_path / "pruned.keras")
    reloaded = keras.saving.load_model(tmp_path / "pruned.keras")
    np.testing.assert_allclose(reloaded(masked)["sequence_output"], outputs["sequence_output"])
    pruned.export(tmp_path / "saved_model", format="tf_saved_model")
    restored = tf.saved_model.load(str(tmp_path / "saved_model"))
    served = restored.serve({name: tf.constant(value) for name, value in masked.items()})
    np.testing.assert_allclose(
        served["sentence_embedding"], expected["sentence_embedding"], atol=1e-5
    )
    compiled = tf.function(pruned, jit_compile=True)
    np.testing.assert_allclose(
        compiled(masked)["sentence_embedding"], expected["sentence_embedding"], atol=1e-5
    )


def test_pruned_keras_attention_equals_zeroed_heads():
    keras.utils.set_random_seed(1)
    x = keras.Input((5, 8))
    h = keras.layers.MultiHeadAttention(3, 4, name="self")(x, x)
    h = keras.layers.MultiHeadAttention(3, 4, value_dim=2, use_bias=False, name="cross")(h, x)
    model = keras.Model(x, keras.layers.Dense(2)(h))
    pruned = prune_heads(model, {"self": [1], "cross": [0, 2]})
    assert isinstance(pruned.get_layer("self"), keras.layers.MultiHeadAttention)
    assert pruned.get_layer("cross").num_heads == 1
    for name, removed in (("self", [1]), ("cross", [0, 2])):
        kernel = model.get_layer(name).output_dense.kernel
        zeroed = kernel.numpy()
        zeroed[removed] = 0.0  # a mask of 0 on a head removes its rows of the output kernel
        kernel.assign(zeroed)
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_allclose(pruned(inputs), model(inputs), atol=1e-5)


def test_pruned_model_with_core_attention_scores_output():
    x = keras.Input((4, 8))
    output, scores = MultiHeadSelfAttention(4, 2, name="attention")(x, return_attention_scores=True)
    pruned = prune_heads(keras.Model(x, [output, scores]), {"attention": [3]})
    assert pruned(np.zeros((1, 4, 8)))[1].shape == (1, 3, 4, 4)


@pytest.mark.parametrize(
    "heads, message",
    [
        ({"layer_9_attention": [0]}, "Received: heads with 'layer_9_attention'"),
        ({"layer_0_attention": [4]}, r"Received: heads\['layer_0_attention'\]=\[4\]"),
        ({"layer_0_attention": [0, 1, 2, 3]}, "removes all 4 heads"),
    ],
)
def test_bad_heads(heads, message):
    with pytest.raises(ValueError, match=message):
        prune_heads(_encoder(), heads)


def test_nested_attention_is_refused():
    model = build_vision_transformer((8, 8), 3, patch_size=4, dim=8, depth=1, num_heads=2)
    with pytest.raises(ValueError, match="top-level attention layers"):
        prune_heads(model, {"block_0/attention": [0]})


def test_subclassed_model_is_refused():
    class Tiny(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="Received: model=Tiny"):
        prune_heads(Tiny(), {})
