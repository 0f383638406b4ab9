import keras
import numpy as np
import pytest
import tensorflow as tf
from keras import ops

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_bert_encoder, build_vision_transformer
from keras_attn.pruning import (
    attention_layers,
    head_importance,
    head_mask_array,
    iterative_pruning,
    prune_heads,
)
from keras_attn.testing.reference import self_attention_reference

RNG = np.random.default_rng(0)
X = RNG.normal(size=(3, 5, 8)).astype("float32")
C = RNG.normal(size=(3, 5, 8)).astype("float32")


def linear_loss(c, outputs):
    return ops.sum(c * outputs, axis=(1, 2))  # (batch,)


def _attention_model(kind):
    keras.utils.set_random_seed(1)
    x = keras.Input((5, 8))
    if kind == "core":
        y = MultiHeadSelfAttention(3, 4, name="attention")(x)
    else:
        y = keras.layers.MultiHeadAttention(3, 4, name="attention")(x, x)
    return keras.Model(x, y)


def _reference_importance(layer):
    """Official formula: mean over examples of sum over tokens of |<ctx_h, dL/dctx_h>|.

    With L = sum(C * output), <ctx_h, dL/dctx_h> = sum_e C * (ctx_h W_o[h]), and
    ctx_h W_o[h] is the output with only head h kept, minus the output bias.
    """
    bias = ops.convert_to_numpy(layer.output_dense.bias)
    scores = []
    for head in range(3):
        only_head, _ = self_attention_reference(X, layer, head_mask=np.eye(3)[head])
        per_token = ((only_head - bias) * C).sum(-1)  # (batch, length)
        scores.append(np.abs(per_token).sum(-1).mean())
    return np.array(scores)


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("kind", ["core", "keras"])
def test_matches_official_formula(kind):
    model = _attention_model(kind)
    scores = head_importance(model, [(X, C)], linear_loss, normalize=False)
    np.testing.assert_allclose(
        scores["attention"], _reference_importance(model.get_layer("attention")), rtol=1e-4
    )


def _parallel_attention_model():
    """Two attention layers reading the same input, outputs added: y = A_1(x) + A_2(x)."""
    keras.utils.set_random_seed(3)
    x = keras.Input((5, 8))
    first = MultiHeadSelfAttention(3, 4, name="first")(x)
    last = MultiHeadSelfAttention(3, 4, name="last")(x)
    return keras.Model(x, keras.layers.Add()([first, last]))


@pytest.mark.parametrize("with_mask", [False, True])
def test_unnormalized_scaling_follows_the_official_code(with_mask):
    # With L = sum(C * (A_1(x) + A_2(x))) each layer's score is the sum over
    # examples and tokens of |<ctx_h, dL/dctx_h>| (the hand formula above);
    # the official code divides the last layer's by the number of examples (3)
    # and every other layer's by the number of real tokens (15, or 11 masked).
    model = _parallel_attention_model()
    real = np.ones((3, 5), bool)
    if with_mask:
        real[0, 3:] = real[2, 2:4] = False
    token_mask = (lambda x: real) if with_mask else None
    scores = head_importance(model, [(X, C)], linear_loss, normalize=False, token_mask=token_mask)
    assert list(scores) == ["first", "last"]
    for name, divisor in (("first", real.sum()), ("last", 3)):
        summed = 3 * _reference_importance(model.get_layer(name))  # sum over examples
        np.testing.assert_allclose(scores[name], summed / divisor, rtol=1e-4)


def test_batches_average_over_examples():
    model = _attention_model("core")
    whole = head_importance(model, [(X, C)], linear_loss, normalize=False)
    split = head_importance(model, [(X[:1], C[:1]), (X[1:], C[1:])], linear_loss, normalize=False)
    np.testing.assert_allclose(split["attention"], whole["attention"], rtol=1e-5)


@pytest.mark.filterwarnings("ignore:You are using a softmax")
def test_per_example_gradient_of_the_core_head_mask():
    """With one token, the score is mean_b |dL_b / d head_mask[b, h]|."""
    keras.utils.set_random_seed(2)
    x, mask = keras.Input((1, 8)), keras.Input((2,))
    attended = MultiHeadSelfAttention(2, 4, name="attention")(x, head_mask=mask)
    logits = keras.layers.Dense(3)(keras.layers.Flatten()(attended))
    model = keras.Model([x, mask], logits)
    inputs = RNG.normal(size=(4, 1, 8)).astype("float32")
    labels = np.array([0, 2, 1, 1])
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    ones = tf.ones((4, 2))
    with tf.GradientTape() as tape:
        tape.watch(ones)
        total = tf.reduce_sum(loss.call(labels, model([tf.constant(inputs), ones])))
    expected = np.abs(tape.gradient(total, ones).numpy()).mean(0)
    scores = head_importance(model, [([inputs, np.ones((4, 2))], labels)], loss, normalize=False)
    np.testing.assert_allclose(scores["attention"], expected, rtol=1e-4)
    normalized = head_importance(model, [([inputs, np.ones((4, 2))], labels)], loss)
    np.testing.assert_allclose(normalized["attention"], expected / np.linalg.norm(expected), 1e-4)


def test_nested_attention_layers_and_restored_projections():
    model = build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2
    )
    images = RNG.normal(size=(2, 8, 8)).astype("float32")
    scores = head_importance(model, [(images, np.array([0, 2]))], "sparse_categorical_crossentropy")
    assert list(scores) == ["block_0/attention", "block_1/attention"]
    for score in scores.values():
        assert score.shape == (2,)
        assert np.linalg.norm(score) == pytest.approx(1.0)
    for layer in attention_layers(model).values():
        assert "call" not in vars(layer.output_dense)


def test_iterative_pruning_of_the_encoder_blocks_rescores_and_equals_masking():
    """Scores, re-scores and prunes the attention layers nested in the BERT encoder's blocks."""
    keras.utils.set_random_seed(4)
    encoder = build_bert_encoder(50, 2, 4, 16, 32, head_mask=True)
    probe = keras.layers.Dense(3, activation="softmax")(encoder.output["sentence_embedding"])
    classifier = keras.Model(encoder.input, probe)
    x = {
        "token_ids": RNG.integers(1, 50, (4, 6)).astype("int32"),
        "padding_mask": np.ones((4, 6), "int32"),
        "segment_ids": np.zeros((4, 6), "int32"),
        "head_mask": np.ones((4, 2, 4), "float32"),
    }
    data = [(x, np.array([0, 1, 2, 1]))]
    loss = keras.losses.SparseCategoricalCrossentropy()
    rescored = []

    def rescore(pruned):
        rescored.append({name: layer.num_heads for name, layer in attention_layers(pruned).items()})
        return head_importance(pruned, data, loss)

    def masked(removed):
        mask = np.broadcast_to(head_mask_array(classifier, removed), (4, 2, 4))
        return {**x, "head_mask": mask}

    scores = head_importance(classifier, data, loss)
    assert list(scores) == ["layer_0/attention", "layer_1/attention"]
    _, steps = iterative_pruning(classifier, scores, [0.25, 0.5], rescore, dict)
    # The pruned model keeps the attention names, so its scores map back to `scores`.
    assert rescored == [{name: 4 - len(steps[0].get(name, [])) for name in scores}]
    assert [sum(map(len, step.values())) for step in steps] == [2, 4]
    pruned = prune_heads(classifier, steps[-1])
    np.testing.assert_allclose(pruned(masked(steps[-1])), classifier(masked(steps[-1])), atol=1e-5)


@pytest.mark.backend_agnostic
def test_a_layer_run_twice_is_refused_by_name_and_left_unpatched():
    """One gate per head and token is ambiguous when a layer runs on two inputs."""
    x = keras.Input((5, 8))
    shared = MultiHeadSelfAttention(3, 4, name="shared")
    model = keras.Model(x, shared(shared(x)))
    with pytest.raises(ValueError, match="Received: layer='shared', run 2 times"):
        head_importance(model, [(X, C)], linear_loss)
    assert "call" not in vars(shared.output_dense)


def test_requires_attention_layers():
    x = keras.Input((4,))
    with pytest.raises(ValueError, match="Received: model="):
        head_importance(keras.Model(x, keras.layers.Dense(2)(x)), [], "mse")
