import keras
import numpy as np
import pytest

from keras_attn.interop import gate_heads
from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_bert_encoder
from keras_attn.pruning import (
    attention_layers,
    head_importance,
    head_mask_array,
    iterative_pruning,
    measure_throughput,
    prune_heads,
    pruned_models,
    pruning_curve,
    scores_of_kept_heads,
    select_heads,
    single_head_ablations,
    throughput,
)


def _tiny_model(heads=(3, 3)):
    x = keras.Input((4, 8))
    y = x
    for index, count in enumerate(heads):
        y = MultiHeadSelfAttention(count, 4, name=f"attn_{index}")(y)
    return keras.Model(x, y)


def test_scores_of_pruned_model_map_back_to_original_heads():
    pruned_scores = {"a": np.array([0.5, 0.2]), "b": np.ones(3)}
    scores = scores_of_kept_heads(pruned_scores, {"a": [0]}, {"a": np.zeros(3), "b": np.zeros(3)})
    np.testing.assert_array_equal(scores["a"], [-np.inf, 0.5, 0.2])
    np.testing.assert_array_equal(scores["b"], [1.0, 1.0, 1.0])
    # The removed head stays removed, the next lowest joins it.
    assert select_heads(scores, 2) == {"a": [0, 2]}


def test_head_mask_follows_the_attention_layers_not_their_names():
    model = _tiny_model()
    assert list(attention_layers(model)) == ["attn_0", "attn_1"]
    mask = head_mask_array(model, {"attn_1": [2], "attn_0": [0, 1]})
    np.testing.assert_array_equal(mask, [[0, 0, 1], [1, 1, 0]])
    with pytest.raises(ValueError, match="Received: removed with"):
        head_mask_array(model, {"layer_1_attention": [0]})
    with pytest.raises(ValueError, match="same number of heads"):
        head_mask_array(_tiny_model((2, 3)), {})


@pytest.mark.backend_agnostic
def test_head_mask_rows_follow_the_blocks_of_a_nested_encoder():
    """Row 0 of the mask is the first block's heads when the encoder is a layer of a classifier."""
    keras.utils.set_random_seed(2)
    encoder = build_bert_encoder(20, 3, 2, 4, 8, max_sequence_length=8, head_mask=True)
    names = ("token_ids", "padding_mask", "segment_ids")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in names}
    inputs["head_mask"] = keras.Input((3, 2), name="head_mask")
    classifier = keras.Model(inputs, encoder(inputs)["sequence_output"])
    first = next(iter(attention_layers(classifier)))
    assert first == "bert_encoder/layer_0/attention"
    mask = head_mask_array(classifier, {first: [1]})
    np.testing.assert_array_equal(mask, [[1, 0], [1, 1], [1, 1]])
    x = {
        "token_ids": np.random.default_rng(0).integers(1, 20, (2, 5)).astype("int32"),
        "padding_mask": np.ones((2, 5), "int32"),
        "segment_ids": np.zeros((2, 5), "int32"),
    }

    def run(head_mask):  # (layers, heads) -> (batch, length, hidden_dim)
        batch_mask = np.broadcast_to(head_mask, (2, 3, 2)).astype("float32")
        return keras.ops.convert_to_numpy(classifier({**x, "head_mask": batch_mask}))

    masked, unmasked = run(mask), run(np.ones((3, 2)))
    assert not np.allclose(masked, unmasked, atol=1e-3)
    # The same head zeroed by hand in the layer that `attention_layers` puts first.
    kernel = attention_layers(classifier)[first].output_dense.kernel
    zeroed = keras.ops.convert_to_numpy(kernel).copy()  # (heads, head_dim, dim)
    zeroed[1] = 0.0
    kernel.assign(zeroed)
    np.testing.assert_allclose(run(np.ones((3, 2))), masked, atol=1e-5)


def test_curve_and_ablations_count_heads_from_the_model():
    model = _tiny_model((2, 4))
    scores = {"attn_0": np.array([0.3, 0.1]), "attn_1": np.array([0.4, 0.2, 0.9, 0.05])}
    counts = pruning_curve(lambda removed: sum(map(len, removed.values())), scores, [0, 0.5])
    assert counts == [0, 3]  # round(0.5 * 6) heads
    ablations = single_head_ablations(model, lambda removed: removed, layers=[1])
    assert list(ablations) == ["attn_1"] and len(ablations["attn_1"]) == 4
    assert ablations["attn_1"][2] == {"attn_1": [2]}


def test_iterative_pruning_rescores_the_pruned_model():
    model = _tiny_model((3, 3))
    scores = {"attn_0": np.array([0.1, 0.5, 0.6]), "attn_1": np.array([0.7, 0.8, 0.9])}
    seen = []

    def rescore(pruned):
        layers = attention_layers(pruned)
        seen.append({name: layer.num_heads for name, layer in layers.items()})
        # Prefers removing the last kept head of attn_1.
        return {"attn_0": np.array([5.0, 6.0]), "attn_1": np.array([3.0, 2.0, 1.0])}

    qualities, steps = iterative_pruning(model, scores, [0.0, 1 / 6, 2 / 6], rescore, dict)
    assert steps == [{}, {"attn_0": [0]}, {"attn_0": [0], "attn_1": [2]}]
    assert qualities == steps
    assert seen == [{"attn_0": 2, "attn_1": 3}]  # only once a head has been removed


def test_throughput_is_examples_per_median_second(monkeypatch):
    model = _tiny_model()
    scores = {"attn_0": np.arange(3.0), "attn_1": np.arange(3.0)}
    models = pruned_models(model, scores, [0.0, 0.5])
    assert models[0.0] is model
    assert attention_layers(models[0.5])["attn_0"].num_heads == 1
    monkeypatch.setattr(throughput, "median_seconds", lambda calls, repeats: [0.5, 0.25])
    inputs = np.zeros((6, 4, 8), "float32")
    assert measure_throughput(list(models.values()), inputs, 2) == [12.0, 24.0]


@pytest.mark.backend_agnostic
def test_iterative_pruning_of_keras_attention_equals_gating_the_removed_heads():
    """A functional model on `keras.layers.MultiHeadAttention`, pruned with re-scoring."""
    keras.utils.set_random_seed(11)
    x = keras.Input((4, 8))
    y = keras.layers.MultiHeadAttention(4, 2, name="first")(x, x)
    model = keras.Model(x, keras.layers.MultiHeadAttention(4, 2, name="second")(y, y))
    rng = np.random.default_rng(12)
    inputs, targets = (rng.normal(size=(3, 4, 8)).astype("float32") for _ in range(2))

    def loss(y_true, y_pred):
        return keras.ops.sum(y_true * y_pred, axis=(1, 2))

    def rescore(pruned):
        return head_importance(pruned, [(inputs, targets)], loss)

    scores = head_importance(model, [(inputs, targets)], loss)
    _, steps = iterative_pruning(model, scores, [0.25, 0.5], rescore, dict)
    assert [sum(map(len, step.values())) for step in steps] == [2, 4]
    removed = steps[-1]
    pruned = prune_heads(model, removed)
    layers = attention_layers(model)
    masks = {name: np.isin(np.arange(4), removed.get(name, []), invert=True) for name in layers}
    with gate_heads(layers, lambda name, ones: ones * masks[name][:, None].astype("float32")):
        masked = keras.ops.convert_to_numpy(model(inputs))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pruned(inputs)), masked, atol=1e-5)


@pytest.mark.backend_agnostic
def test_iterative_pruning_of_a_keras_hub_classifier_rescores_its_converted_blocks(
    keras_hub_backbone,
):
    """The pruned classifier's blocks are converted; its scores map back to the same layers."""
    import keras_hub

    keras.utils.set_random_seed(15)
    backbone = keras_hub_backbone("bert", num_heads=4)
    classifier = keras_hub.models.BertTextClassifier(backbone, 2, preprocessor=None, dropout=0.0)
    logits = classifier.get_layer("logits").kernel
    logits.assign(logits * 1000.0)  # logits of about 1 rather than 1e-3, for the tolerance
    rng = np.random.default_rng(16)
    inputs = {
        "token_ids": rng.integers(1, 30, (4, 6)).astype("int32"),
        "segment_ids": np.zeros((4, 6), "int32"),
        "padding_mask": np.ones((4, 6), "int32"),
    }
    data = [(inputs, np.array([0, 1, 1, 0]))]
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    rescored = []

    def rescore(pruned):
        scores = head_importance(pruned, data, loss)
        rescored.append([len(score) for score in scores.values()])
        return scores

    scores = head_importance(classifier, data, loss)
    _, steps = iterative_pruning(classifier, scores, [0.25, 0.5], rescore, dict)
    layers = attention_layers(classifier)
    first, removed = steps
    assert [sum(map(len, step.values())) for step in steps] == [2, 4]
    # The second step scored the model pruned by the first, and kept its heads removed.
    assert rescored == [[4 - len(first.get(name, [])) for name in layers]]
    assert all(set(heads) <= set(removed[name]) for name, heads in first.items())
    masks = {name: np.isin(np.arange(4), removed.get(name, []), invert=True) for name in layers}
    with gate_heads(layers, lambda name, ones: ones * masks[name][:, None].astype("float32")):
        masked = keras.ops.convert_to_numpy(classifier(inputs))
    pruned = keras.ops.convert_to_numpy(prune_heads(classifier, removed)(inputs))
    np.testing.assert_allclose(pruned, masked, atol=1e-5)
