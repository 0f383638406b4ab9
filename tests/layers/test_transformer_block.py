"""`TransformerBlock`, the one block: its contract, its definition against NumPy, its
attention hook, gates, masks, initializers and drop path."""

import re

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    ConvolutionalSelfAttention,
    LogSparseAttention,
    MultiHeadSelfAttention,
    TransformerBlock,
)
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.testing.reference import attention_num_params, transformer_block_reference
from keras_attn.utils.training import build_optimizer

pytestmark = pytest.mark.backend_agnostic

CHECKS = {
    "block": LayerChecks(
        TransformerBlock,
        {"num_heads": 2, "intermediate_dim": 16, "dropout": 0.1, "drop_path_rate": 0.1, "seed": 3},
        input_shape=(2, 5, 8),
        extra_inputs={"head_mask": (2,)},
        # Attention, two norms, MLP 8 -> 16 -> 8.
        num_params=attention_num_params(8, 2, 4) + 4 * 8 + 9 * 16 + 17 * 8,
        bad_init_kwargs=[
            {"intermediate_dim": 0},
            {"num_heads": 0},
            {"dropout": 2.0},
            {"key_dim": -1},
            {"attention_dropout": 2.0},
            {"mlp_hidden_dropout": 1.5},
            {"layer_norm_epsilon": -1e-6},
            {"drop_path_rate": 1.0},
            {"seed": -1},
        ],
    ),
    # BERT's block: post-norm, exact GELU, no dropout on the MLP's hidden units.
    "post_norm_block": LayerChecks(
        TransformerBlock,
        {
            "num_heads": 2,
            "intermediate_dim": 16,
            "normalize_first": False,
            "dropout": 0.1,
            "mlp_hidden_dropout": 0.0,
            "attention_dropout": 0.1,
            "layer_norm_epsilon": 1e-12,
            "activation": "gelu",
            "attention_kwargs": {"use_bias": False},
        },
        input_shape=(2, 5, 8),
        extra_inputs={"head_mask": (2,)},
        num_params=attention_num_params(8, 2, 4, use_bias=False) + 4 * 8 + 9 * 16 + 17 * 8,
    ),
}


# A block around a LogSparse attention layer, given as its serialized dict so
# that every check builds a fresh one. The block and the attention each pass
# the whole contract on their own; these checks cover carrying the attention
# through the block's config, `.keras` files, fresh processes and SavedModels.
ATTENTION_HOOK_CHECKS = ("config_round_trip", "keras_save_load", "fresh_process_reload")


ATTENTION_HOOK = LayerChecks(
    TransformerBlock,
    {
        "intermediate_dim": 16,
        "attention": keras.saving.serialize_keras_object(
            LogSparseAttention(2, 4, variant="local", local_window=2, kernel_size=3)
        ),
    },
    input_shape=(2, 7, 8),
    extra_inputs={"head_mask": (2,)},
    num_params=attention_num_params(8, 2, 4, kernel_size=3) + 4 * 8 + 9 * 16 + 17 * 8,
    bad_init_kwargs=[{"num_heads": 3}, {"key_dim": 4}, {"attention": "dense"}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)
test_block_attention_hook_contract = LayerChecks.contract_test(
    {"log_sparse_attention": ATTENTION_HOOK},
    only=(*ATTENTION_HOOK_CHECKS, "saved_model", "bad_arguments", "weight_count"),
)


def test_pre_norm_block_matches_its_definition():
    block = TransformerBlock(num_heads=2, intermediate_dim=8)
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    output = block(x)
    h = x + to_numpy(block.attention(block.attention_norm(x)))
    expected = h + to_numpy(block.mlp_output(block.mlp_hidden(block.mlp_norm(h))))
    assert_allclose(output, expected, atol=1e-5)


def _random_block(normalize_first, seed):
    """A block on `(2, 5, 8)` inputs, every weight random, and its padding mask."""
    block = TransformerBlock(2, 16, normalize_first=normalize_first, layer_norm_epsilon=1e-12)
    x = np.random.default_rng(seed).normal(size=(2, 5, 8)).astype("float32")
    block.build(x.shape)
    rng = np.random.default_rng(seed + 1)
    block.set_weights([rng.normal(size=w.shape).astype("float32") for w in block.get_weights()])
    return block, x, np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")


@pytest.mark.parametrize("normalize_first", [False, True])
def test_block_matches_the_numpy_reference(normalize_first):
    """Post-norm (BERT) and pre-norm blocks against float64 numpy, every weight random."""
    block, x, mask = _random_block(normalize_first, 8)
    head_mask = np.array([[1.0, 0.0], [0.5, 1.0]], "float32")
    output = block(x, mask=mask, head_mask=head_mask)
    assert_allclose(output, transformer_block_reference(x, block, mask, head_mask), atol=1e-4)


@pytest.mark.parametrize("normalize_first", [False, True])
def test_attention_mask_is_passed_to_the_attention(normalize_first):
    """A causal `attention_mask`, with a padding mask, against float64 numpy."""
    block, x, mask = _random_block(normalize_first, 10)
    causal = np.broadcast_to(np.tril(np.ones((5, 5), "int32")), (2, 5, 5))
    output = block(x, mask=mask, attention_mask=causal)
    expected = transformer_block_reference(x, block, mask, attention_mask=causal)
    assert_allclose(output, expected, atol=1e-4)
    # The first token sees only itself: the other tokens do not change it.
    changed = x.copy()
    changed[:, 1:] += 1.0
    first = to_numpy(block(changed, attention_mask=causal))[:, 0]
    assert_allclose(first, to_numpy(block(x, attention_mask=causal))[:, 0], atol=1e-5)


def test_attention_mask_reaches_keras_multi_head_attention():
    attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    block = TransformerBlock(intermediate_dim=8, attention=attention)
    x = np.random.default_rng(12).normal(size=(2, 4, 8)).astype("float32")
    causal = np.broadcast_to(np.tril(np.ones((4, 4), "bool")), (2, 4, 4))
    _, scores = block(x, attention_mask=causal, return_attention_scores=True)
    expected = attention(block.attention_norm(x), block.attention_norm(x), attention_mask=causal)
    h = x + to_numpy(expected)
    assert_allclose(
        block(x, attention_mask=causal),
        h + to_numpy(block.mlp_output(block.mlp_hidden(block.mlp_norm(h)))),
        atol=1e-5,
    )
    assert_allclose(np.triu(to_numpy(scores), 1), 0.0, atol=0)


def test_attention_mask_is_an_input_of_functional_models():
    tokens = keras.Input((5, 8))
    pairs = keras.Input((5, 5), dtype="bool")
    block = TransformerBlock(2, 16)
    model = keras.Model([tokens, pairs], block(tokens, attention_mask=pairs))
    x = np.random.default_rng(13).normal(size=(2, 5, 8)).astype("float32")
    causal = np.broadcast_to(np.tril(np.ones((5, 5), "bool")), (2, 5, 5))
    assert_allclose(model([x, causal]), block(x, attention_mask=causal), atol=1e-6)


def test_mlp_initializers_are_cloned_for_each_dense_layer():
    block = TransformerBlock(
        2,
        16,
        kernel_initializer=keras.initializers.Constant(0.25),
        bias_initializer=keras.initializers.Constant(0.5),
    )
    block.build((None, 3, 8))
    for dense in (block.mlp_hidden, block.mlp_output):
        assert dense.kernel_initializer is not block.kernel_initializer
        assert_allclose(dense.kernel, np.full(dense.kernel.shape, 0.25), atol=0)
        assert_allclose(dense.bias, np.full(dense.bias.shape, 0.5), atol=0)
    assert block.mlp_hidden.kernel_initializer is not block.mlp_output.kernel_initializer
    # The attention keeps its own initializers (set through `attention_kwargs`).
    assert not np.allclose(to_numpy(block.attention.query_dense.kernel), 0.25)
    assert_allclose(block.attention.query_dense.bias, 0.0, atol=0)


def test_mlp_initializers_survive_the_config_and_old_configs_load():
    block = TransformerBlock(2, 16, kernel_initializer="he_normal", bias_initializer="ones")
    config = block.get_config()
    clone = TransformerBlock.from_config(config)
    assert clone.get_config() == config
    assert isinstance(clone.kernel_initializer, keras.initializers.HeNormal)
    # A config saved before these arguments existed builds the defaults.
    old = {k: v for k, v in config.items() if not k.endswith("_initializer")}
    old_block = TransformerBlock.from_config(old)
    assert isinstance(old_block.kernel_initializer, keras.initializers.GlorotUniform)
    assert isinstance(old_block.bias_initializer, keras.initializers.Zeros)


def test_mlp_hidden_dropout_is_placed_on_the_hidden_units():
    """The MLP's output layer sees its hidden units dropped at the hidden rate only.

    With the attention branch gated off, the MLP input of a post-norm block
    is `LN(x)`, so the hidden units are known exactly: `dropout=0.5` with
    `mlp_hidden_dropout=0` (BERT) leaves them intact, the default drops them.
    """
    x = np.random.default_rng(10).normal(size=(4, 5, 8)).astype("float32")
    for mlp_hidden_dropout, dropped in ((0.0, False), (None, True)):
        block = TransformerBlock(
            2, 64, dropout=0.5, mlp_hidden_dropout=mlp_hidden_dropout, normalize_first=False
        )
        block.build(x.shape)
        seen = []
        call = block.mlp_output.call
        block.mlp_output.call = lambda h, call=call, seen=seen, **kwargs: (
            seen.append(to_numpy(h)) or call(h, **kwargs)
        )
        block(x, attention_gate=np.zeros(4, "float32"), training=True)
        hidden = to_numpy(block.mlp_hidden(block.attention_norm(x)))  # (4, 5, 64)
        kept = seen[0] != 0
        assert_allclose(seen[0][kept], (2.0 if dropped else 1.0) * hidden[kept], atol=1e-5)
        assert (0.3 < 1 - kept.mean() < 0.7) if dropped else kept.all()


@pytest.mark.parametrize("normalize_first", [True, False])
def test_block_gates_scale_each_residual_branch(normalize_first):
    block = TransformerBlock(num_heads=2, intermediate_dim=8, normalize_first=normalize_first)
    x = np.random.default_rng(1).normal(size=(2, 5, 8)).astype("float32")
    attention_gate = np.array([0.0, 0.5], "float32")  # per example
    mlp_gate = np.random.default_rng(2).uniform(size=(2, 5)).astype("float32")  # per token
    output = block(x, attention_gate=attention_gate, mlp_gate=mlp_gate)
    norm = (lambda layer, v: layer(v)) if normalize_first else (lambda layer, v: v)
    post = (lambda layer, v: v) if normalize_first else (lambda layer, v: layer(v))
    attended = to_numpy(block.attention(norm(block.attention_norm, x)))
    h = post(block.attention_norm, x + attention_gate[:, None, None] * attended)
    h = to_numpy(h)
    mlp = block.mlp_output(block.mlp_hidden(norm(block.mlp_norm, h)))
    expected = post(block.mlp_norm, h + mlp_gate[..., None] * to_numpy(mlp))
    assert_allclose(output, expected, atol=1e-5)


@pytest.mark.parametrize(
    "gates, received",
    [
        ({"mlp_gate": np.ones((2, 5, 1))}, "mlp_gate.shape=(2, 5, 1)"),
        ({"attention_gate": np.ones((3,))}, "attention_gate.shape=(3,)"),
        ({"mlp_gate": np.ones((2, 4))}, "mlp_gate.shape=(2, 4)"),
    ],
)
def test_block_gate_of_wrong_shape_is_rejected(gates, received):
    block = TransformerBlock(num_heads=2, intermediate_dim=8)
    x = np.zeros((2, 5, 8), "float32")
    with pytest.raises(ValueError, match=re.escape(f"or (2, 5). Received: {received}")):
        block(x, **gates)


@pytest.mark.parametrize("normalize_first", [True, False])
def test_block_with_given_attention_matches_its_definition(normalize_first):
    attention = ConvolutionalSelfAttention(2, 4, kernel_size=3, attention_pattern="causal")
    block = TransformerBlock(
        intermediate_dim=8, normalize_first=normalize_first, attention=attention
    )
    x = np.random.default_rng(3).normal(size=(2, 5, 8)).astype("float32")
    output, scores = block(x, return_attention_scores=True)
    assert block.attention is attention and block.num_heads == 2
    norm = block.attention_norm if normalize_first else (lambda v: v)
    attended, expected_scores = attention(norm(x), return_attention_scores=True)
    h = x + to_numpy(attended)
    h = h if normalize_first else to_numpy(block.attention_norm(h))
    mlp = block.mlp_output(block.mlp_hidden(block.mlp_norm(h) if normalize_first else h))
    expected = h + to_numpy(mlp)
    expected = expected if normalize_first else block.mlp_norm(expected)
    assert_allclose(output, expected, atol=1e-5)
    assert_allclose(scores, expected_scores, atol=1e-6)
    # Causal convolutional attention: the first position ignores the others.
    changed = x.copy()
    changed[:, 1:] += 1.0
    assert_allclose(block(changed)[:, 0], output[:, 0], atol=1e-5)


def test_block_attention_survives_the_config():
    attention = LogSparseAttention(2, 4, variant="local", local_window=2, name="attention")
    config = TransformerBlock(intermediate_dim=8, attention=attention).get_config()
    clone = TransformerBlock.from_config(config)
    assert type(clone.attention) is LogSparseAttention
    assert clone.attention.get_config() == attention.get_config()
    default = TransformerBlock(2, 8).get_config()
    assert default["attention"] is None
    assert type(TransformerBlock.from_config(default)) is TransformerBlock


def test_block_returns_the_attention_scores_of_its_core():
    block = TransformerBlock(2, 8, normalize_first=False)
    x = np.random.default_rng(4).normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[True] * 5, [True, True, True, False, False]])
    output, scores = block(x, mask=mask, return_attention_scores=True)
    _, expected = block.attention(x, mask=mask, return_attention_scores=True)
    assert_allclose(scores, expected, atol=1e-6)
    assert_allclose(output, block(x, mask=mask), atol=1e-6)
    inputs = keras.Input((None, 8))
    symbolic = block(inputs, return_attention_scores=True)
    assert [tuple(t.shape) for t in symbolic] == [(None, None, 8), (None, 2, None, None)]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_heads": 3}, "Received: num_heads=3"),
        ({"key_dim": 4}, "Received: key_dim=4"),
        ({"attention_dropout": 0.1}, "Received: attention_dropout=0.1"),
        ({"attention_kwargs": {"use_bias": False}}, "Received: attention_kwargs="),
    ],
)
def test_block_attention_conflicts_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TransformerBlock(intermediate_dim=8, attention=MultiHeadSelfAttention(2, 4), **kwargs)


def test_block_runs_keras_multi_head_attention_as_self_attention():
    attention = keras.layers.MultiHeadAttention(2, 4, name="attention")
    block = TransformerBlock(intermediate_dim=8, attention=attention)
    x = np.random.default_rng(6).normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([[True] * 5, [True, True, True, False, False]])
    output, scores = block(x, mask=mask, return_attention_scores=True)
    normed = block.attention_norm(x)
    attended, expected_scores = attention(
        normed, normed, query_mask=mask, value_mask=mask, return_attention_scores=True
    )
    h = x + to_numpy(attended)
    expected = h + to_numpy(block.mlp_output(block.mlp_hidden(block.mlp_norm(h))))
    assert_allclose(output, expected, atol=1e-5)
    assert_allclose(scores, expected_scores, atol=1e-6)
    assert_allclose(scores[1, :, :, 3:], 0.0)  # padded keys get no weight
    clone = TransformerBlock.from_config(block.get_config())
    assert type(clone.attention) is keras.layers.MultiHeadAttention
    with pytest.raises(ValueError, match=re.escape("Received: head_mask.shape=(2,)")):
        block(x, head_mask=np.ones((2,), "float32"))


def test_block_refuses_an_attention_that_changes_the_width():
    attention = keras.layers.MultiHeadAttention(2, 4, output_shape=6)
    block = TransformerBlock(intermediate_dim=8, attention=attention)
    message = "`attention` must keep the input size 8. Received: attention with output size 6"
    with pytest.raises(ValueError, match=re.escape(message)):
        block(np.zeros((1, 3, 8), "float32"))


@pytest.mark.parametrize("name", ["num_heads", "key_dim", "dropout", "name"])
def test_block_refuses_attention_kwargs_that_it_sets_itself(name):
    message = f"`attention_kwargs` cannot set ['{name}']"
    with pytest.raises(ValueError, match=re.escape(message)):
        TransformerBlock(2, 8, attention_kwargs={name: 4})
    with pytest.raises(ValueError, match="Received: attention_kwargs=3"):
        TransformerBlock(2, 8, attention_kwargs=3)


def test_block_default_attention_needs_heads_that_divide_the_width():
    message = "`input_shape[-1]` must be divisible by `num_heads=4`. Received: input_shape[-1]=10"
    with pytest.raises(ValueError, match=re.escape(message)):
        TransformerBlock(4, 8)(np.zeros((1, 3, 10), "float32"))
    assert TransformerBlock(4, 8, key_dim=3)(np.zeros((1, 3, 10), "float32")).shape == (1, 3, 10)


def test_block_needs_num_heads_or_attention():
    with pytest.raises(ValueError, match="Received: num_heads=None"):
        TransformerBlock(intermediate_dim=8)
    with pytest.raises(ValueError, match="Received: attention="):
        TransformerBlock(intermediate_dim=8, attention=keras.layers.Dense(8))


def _drop_path_block(rate=0.5, seed=0):
    block = TransformerBlock(2, 16, drop_path_rate=rate, seed=seed)
    block.build((None, 3, 8))
    return block


def test_drop_path_is_the_identity_at_inference():
    x = np.random.default_rng(5).normal(size=(4, 3, 8)).astype("float32")
    block = _drop_path_block()
    plain = TransformerBlock(2, 16)
    plain.build((None, 3, 8))
    plain.set_weights(block.get_weights())
    assert_allclose(block(x), plain(x), atol=1e-6)
    assert_allclose(block(x, training=False), plain(x), atol=1e-6)


def test_drop_path_drops_whole_branches_of_half_the_examples_and_doubles_the_rest():
    """Rate 0.5: each example's output is the block with each branch gated by 0 or 2.

    The four gate pairs are computed at inference with the branch gates, and
    every training output must equal exactly one of them: a drop per token
    instead of per example, survivors not rescaled (gate 1) or rescaled by
    another factor would match none.
    """
    examples = 2000
    x = np.random.default_rng(6).normal(size=(examples, 3, 8)).astype("float32")
    block = _drop_path_block()
    output = to_numpy(block(x, training=True))
    gates = [(a, m) for a in (0.0, 2.0) for m in (0.0, 2.0)]
    matches = np.stack(
        [
            np.abs(
                output
                - to_numpy(
                    block(
                        x,
                        attention_gate=np.full(examples, a, "float32"),
                        mlp_gate=np.full(examples, m, "float32"),
                    )
                )
            ).max(axis=(1, 2))
            < 1e-5
            for a, m in gates
        ],
        axis=1,
    )  # (examples, 4)
    assert np.all(matches.sum(axis=1) == 1)
    kept = np.array(gates)[matches.argmax(axis=1)] > 0  # (examples, 2): attention, MLP kept
    # Binomial(2000, 0.5): standard deviation 0.011.
    assert np.all(np.abs(kept.mean(axis=0) - 0.5) < 0.05)
    assert abs((kept[:, 0] & kept[:, 1]).mean() - 0.25) < 0.05  # independent branches
    # Another call draws other examples.
    assert not np.allclose(to_numpy(block(x, training=True)), output)


def test_drop_path_survives_the_config():
    block = TransformerBlock(2, 16, drop_path_rate=0.2, seed=7)
    config = block.get_config()
    assert (config["drop_path_rate"], config["seed"]) == (0.2, 7)
    clone = TransformerBlock.from_config(config)
    assert (clone.drop_path_rate, clone.seed) == (0.2, 7)
    assert clone.get_config() == config


def test_drop_path_trains_under_xla():
    """`jit_compile=True` (eager on torch): the draws change from step to step."""
    jit_compile = keras.backend.backend() != "torch"
    inputs = keras.Input((3, 8))
    block = TransformerBlock(2, 16, drop_path_rate=0.5, seed=1)
    model = keras.Model(inputs, block(inputs))
    model.compile(optimizer="sgd", loss="mse", jit_compile=jit_compile)
    x = np.random.default_rng(7).normal(size=(32, 3, 8)).astype("float32")
    state = to_numpy(block.drop_path_seed_generator.state)
    build_optimizer(model)
    history = model.fit(x, np.zeros_like(x), epochs=2, batch_size=8, verbose=0)
    assert model.jit_compile is jit_compile
    assert np.isfinite(history.history["loss"]).all()
    assert not np.array_equal(to_numpy(block.drop_path_seed_generator.state), state)
