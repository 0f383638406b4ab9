import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.pruning import (
    attention_layers,
    head_mask_array,
    iterative_pruning,
    measure_throughput,
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
