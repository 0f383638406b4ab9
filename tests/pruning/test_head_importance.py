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


def _head_sums(layer, x, c):
    """`(batch, heads)`: per example, the sum over tokens of |<ctx_h, dL_b/dctx_h>|.

    With L_b = sum(C_b * output_b), <ctx_h, dL_b/dctx_h> = sum_e C * (ctx_h W_o[h]), and
    ctx_h W_o[h] is the output with only head h kept, minus the output bias.
    """
    bias = ops.convert_to_numpy(layer.output_dense.bias)
    sums = []
    for head in range(layer.num_heads):
        only_head, _ = self_attention_reference(x, layer, head_mask=np.eye(layer.num_heads)[head])
        per_token = ((only_head - bias) * c).sum(-1)  # (batch, length)
        sums.append(np.abs(per_token).sum(-1))
    return np.stack(sums, axis=-1)


def _official(sums, batch_sizes, divisor):
    """The official accumulation: each batch's loss is its mean, so example b weighs 1/B_k."""
    weights = np.concatenate([np.full(size, 1.0 / size) for size in batch_sizes])
    return (weights[:, None] * sums).sum(0) / divisor


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("kind", ["core", "keras"])
def test_matches_official_formula(kind):
    model = _attention_model(kind)
    scores = head_importance(model, [(X, C)], linear_loss, normalize=False)
    expected = _official(_head_sums(model.get_layer("attention"), X, C), [3], divisor=3)
    np.testing.assert_allclose(scores["attention"], expected, rtol=1e-4)


def _parallel_attention_model():
    """Two attention layers reading the same input, outputs added: y = A_1(x) + A_2(x)."""
    keras.utils.set_random_seed(3)
    x = keras.Input((5, 8))
    first = MultiHeadSelfAttention(3, 4, name="first")(x)
    last = MultiHeadSelfAttention(3, 4, name="last")(x)
    return keras.Model(x, keras.layers.Add()([first, last]))


@pytest.mark.parametrize("with_mask", [False, True])
def test_unnormalized_scaling_follows_the_official_code(with_mask):
    # With L = mean_b sum(C_b * (A_1(x_b) + A_2(x_b))) each layer's score sums
    # |<ctx_h, dL/dctx_h>| over examples and tokens (the hand formula above);
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
        expected = _official(_head_sums(model.get_layer(name), X, C), [3], divisor)
        np.testing.assert_allclose(scores[name], expected, rtol=1e-4)


def _nested_parallel_encoder():
    """A classifier calling an encoder `y = A_1(x m) + A_2(x m)` as one layer (m: padding)."""
    keras.utils.set_random_seed(6)
    x, mask = keras.Input((5, 8), name="inputs"), keras.Input((5,), name="padding_mask")
    real = x * keras.ops.expand_dims(mask, -1)
    first = MultiHeadSelfAttention(3, 4, name="first")(real)
    last = keras.layers.MultiHeadAttention(3, 4, name="last")(real, real)
    encoder = keras.Model([x, mask], keras.layers.Add()([first, last]), name="encoder")
    outer = {"inputs": keras.Input((5, 8)), "padding_mask": keras.Input((5,))}
    return keras.Model(outer, encoder([outer["inputs"], outer["padding_mask"]]))


@pytest.mark.backend_agnostic
def test_nested_encoder_with_a_partial_last_batch_equals_the_official_quantity():
    # Batches of 8, 8 and 4 examples with padding: the last batch's examples weigh 1/4, the
    # others' 1/8. The encoder's first layer is divided by the real tokens (the padding mask
    # of the inputs, by default), its last by the examples; Keras' recursive layer listing
    # reverses the nested encoder's layers, which would swap the two divisors.
    model = _nested_parallel_encoder()
    rng = np.random.default_rng(7)
    x = rng.normal(size=(20, 5, 8)).astype("float32")
    c = rng.normal(size=(20, 5, 8)).astype("float32")
    mask = (np.arange(5) < rng.integers(2, 6, size=(20, 1))).astype("float32")  # (20, 5)
    bounds = [(0, 8), (8, 16), (16, 20)]
    data = [({"inputs": x[i:j], "padding_mask": mask[i:j]}, c[i:j]) for i, j in bounds]
    scores = head_importance(model, data, linear_loss, normalize=False)
    assert list(scores) == ["encoder/first", "encoder/last"]
    encoder = model.get_layer("encoder")
    real = x * mask[..., None]
    for name, divisor in (("first", mask.sum()), ("last", 20)):
        expected = _official(_head_sums(encoder.get_layer(name), real, c), [8, 8, 4], divisor)
        np.testing.assert_allclose(scores[f"encoder/{name}"], expected, rtol=1e-4)
    normalized = head_importance(model, data, linear_loss)
    for name, score in scores.items():
        np.testing.assert_allclose(normalized[name], score / np.linalg.norm(score), rtol=1e-4)


@pytest.mark.filterwarnings("ignore:You are using a softmax")
def test_per_example_gradient_of_the_core_head_mask():
    """With one token, the score is mean_b |dL / d head_mask[b, h]|, L the batch mean."""
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
        total = tf.reduce_mean(loss.call(labels, model([tf.constant(inputs), ones])))
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


def _two_axis_model(flat):
    """`A_1(x) + A_2(x)`, Keras attention over both axes of `(3, 4)` positions, or over 12."""
    keras.utils.set_random_seed(4)
    x = keras.Input((12, 8) if flat else (3, 4, 8))
    axes = None if flat else (1, 2)
    first = keras.layers.MultiHeadAttention(3, 4, attention_axes=axes, name="first")(x, x)
    last = keras.layers.MultiHeadAttention(3, 4, attention_axes=axes, name="last")(x, x)
    return keras.Model(x, keras.layers.Add()([first, last]))


def all_positions_linear_loss(c, outputs):
    return ops.sum(ops.reshape(c * outputs, (ops.shape(c)[0], -1)), axis=1)  # (batch,)


@pytest.mark.backend_agnostic
def test_attention_over_two_axes_scores_each_pair_of_indices_as_a_position():
    """Attention over both axes of a `(3, 4)` grid is attention over its 12 positions."""
    grid, flat = _two_axis_model(flat=False), _two_axis_model(flat=True)
    flat.set_weights(grid.get_weights())
    rng = np.random.default_rng(4)
    x = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    c = rng.normal(size=(2, 3, 4, 8)).astype("float32")
    scores = head_importance(grid, [(x, c)], all_positions_linear_loss, normalize=False)
    x_flat, c_flat = x.reshape(2, 12, 8), c.reshape(2, 12, 8)
    for name, divisor in (("first", 2 * 12), ("last", 2)):
        expected = _official(_head_sums(flat.get_layer(name), x_flat, c_flat), [2], divisor)
        np.testing.assert_allclose(scores[name], expected, rtol=1e-4)


@pytest.mark.backend_agnostic
def test_a_layer_that_does_not_reach_the_loss_scores_zero():
    """`y = A_1(x) + stop_gradient(A_2(A_1(x)))`: A_2 runs, but no loss gradient reaches it."""
    keras.utils.set_random_seed(2)
    x = keras.Input((5, 8))
    reached = MultiHeadSelfAttention(3, 4, name="reached")(x)
    cut = keras.layers.Lambda(ops.stop_gradient)(MultiHeadSelfAttention(3, 4, name="cut")(reached))
    model = keras.Model(x, keras.layers.Add()([reached, cut]))
    scores = head_importance(model, [(X, C)], linear_loss, normalize=False)
    assert list(scores) == ["reached", "cut"]  # the first layer's sums over 15 tokens
    expected = _official(_head_sums(model.get_layer("reached"), X, C), [3], divisor=15)
    np.testing.assert_allclose(scores["reached"], expected, rtol=1e-4)
    np.testing.assert_array_equal(scores["cut"], np.zeros(3))
    np.testing.assert_array_equal(head_importance(model, [(X, C)], linear_loss)["cut"], np.zeros(3))


def test_requires_attention_layers():
    x = keras.Input((4,))
    with pytest.raises(ValueError, match="Received: model="):
        head_importance(keras.Model(x, keras.layers.Dense(2)(x)), [], "mse")


class _SubclassedParallel(keras.Model):
    """A subclassed model on `keras.layers.MultiHeadAttention`: y = A_1(x) + A_2(x)."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.first = keras.layers.MultiHeadAttention(3, 4, name="first")
        self.last = keras.layers.MultiHeadAttention(3, 4, name="last")

    def call(self, x):
        return self.first(x, x) + self.last(x, x)


@pytest.mark.backend_agnostic
def test_subclassed_keras_attention_model_equals_the_official_quantity():
    keras.utils.set_random_seed(8)
    model = _SubclassedParallel()
    model(X)
    data = [(X[:2], C[:2]), (X[2:], C[2:])]
    scores = head_importance(model, data, linear_loss, normalize=False)
    assert list(scores) == ["first", "last"]
    for name, divisor in (("first", 15), ("last", 3)):
        layer = getattr(model, name)
        expected = _official(_head_sums(layer, X, C), [2, 1], divisor)
        np.testing.assert_allclose(scores[name], expected, rtol=1e-4)


def _keras_hub_inputs(name):
    """One batch for the tiny KerasHub backbone `name` and its loss (`None`: a linear loss)."""
    rng = np.random.default_rng(9)
    padding_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    tokens = {"token_ids": rng.integers(1, 30, (2, 5)), "padding_mask": padding_mask}
    if name == "bert":
        x = {**tokens, "segment_ids": np.zeros((2, 5), "int32")}
        return x, lambda y, out: ops.sum(y * out["sequence_output"], axis=(1, 2))
    if name == "gpt2":
        return tokens, None
    return rng.normal(size=(2, 8, 8, 3)).astype("float32"), None


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", ["bert", "gpt2", "vit"])
def test_keras_hub_backbones_in_model_order(name, keras_hub_backbone):
    model = keras_hub_backbone(name)
    x, loss = _keras_hub_inputs(name)
    outputs = model(x)
    sequence = outputs["sequence_output"] if isinstance(outputs, dict) else outputs
    target = np.random.default_rng(1).normal(size=sequence.shape).astype("float32")
    loss = loss or linear_loss
    scores = head_importance(model, [(x, target)], loss, normalize=False)
    layers = list(attention_layers(model))
    assert list(scores) == layers and len(layers) == 2
    assert all(np.all(np.isfinite(score)) and np.any(score > 0) for score in scores.values())
    assert head_mask_array(model, {layers[1]: [1]}).tolist() == [[1, 1], [1, 0]]
    if name == "bert":
        every = head_importance(
            model, [(x, target)], loss, normalize=False, token_mask=lambda x: np.ones((2, 5))
        )
        # By default the first layer is divided by the real tokens, 8 of 10 here.
        np.testing.assert_allclose(scores[layers[0]] * 8, every[layers[0]] * 10, rtol=1e-5)
        np.testing.assert_allclose(scores[layers[1]], every[layers[1]], rtol=1e-5)
