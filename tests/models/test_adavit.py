import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.models import (
    AdaViT,
    AdaViTFastPath,
    build_vision_transformer,
    finetune_adavit,
)
from keras_attn.models.adavit import DECISION_KEYS
from keras_attn.testing.adavit_reference import AdaViTNumpyReference

pytestmark = pytest.mark.backend_agnostic


def _vit(depth=3, seed=0):
    keras.utils.set_random_seed(seed)
    return build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=8, num_layers=depth, num_heads=2
    )


def _images(batch=16, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, 8, 8)).astype("float32")


def _model(gate_bias=0.4, depth=3, **kwargs):
    model = AdaViT(_vit(depth), gate_bias=gate_bias, seed=0, **kwargs)
    model(_images(2))
    # Gate kernels large enough that the learned decisions mix.
    rng = np.random.default_rng(1)
    for gate in model.patch_gates + model.head_gates + model.block_gates:
        gate.kernel.assign(rng.normal(size=gate.kernel.shape))
    return model


# The grouped fast path compiles with XLA: TensorFlow and JAX (torch runs it eagerly).
needs_xla = pytest.mark.skipif(
    keras.backend.backend() == "torch", reason="The grouped fast path compiles with XLA."
)


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


def _random_decisions(batch, blocks, seed=0):
    rng = np.random.default_rng(seed)
    decisions = {
        "patches": rng.random((batch, blocks, 4)) < 0.5,
        "heads": rng.random((batch, blocks, 2)) < 0.5,
        "attention": rng.random((batch, blocks)) < 0.7,
        "mlp": rng.random((batch, blocks)) < 0.7,
    }
    decisions["patches"][0] = False  # only the class token is kept
    decisions["heads"][1] = False  # attention on, no head: the output bias only
    decisions["attention"][1] = True
    decisions["attention"][2] = decisions["mlp"][2] = False  # the whole block skipped
    return decisions


def _fast(model, **kwargs):
    return AdaViTFastPath(model, token_buckets=2, group_size=4, **kwargs)


@pytest.mark.parametrize("head_gates_mlp_input", [True, False])
def test_gated_block_by_hand(head_gates_mlp_input):
    """An off head zeroes its attention output and, officially, its MLP input channels."""
    model = _model(head_gates_mlp_input=head_gates_mlp_input)
    x = keras.random.normal((6, 5, 8), seed=0)
    gates = {key: ops.cast(v[:, 0], "float32") for key, v in _random_decisions(6, 1).items()}
    block = model.blocks[1]
    tokens = ops.concatenate([ops.ones((6, 1)), gates["patches"]], axis=1)  # (batch, L)
    attended = block.attention(
        block.attention_norm(x), mask=tokens > 0.5, head_mask=gates["heads"]
    )  # (batch, L, dim)
    expected = _numpy(x + (tokens * gates["attention"][:, None])[..., None] * attended)
    normed = _numpy(block.mlp_norm(expected))  # (batch, L, dim)
    if head_gates_mlp_input:  # 2 heads of 4 channels: channel c belongs to head c // 4
        normed = normed * np.repeat(_numpy(gates["heads"]), 4, axis=1)[:, None, :]
    mlp = _numpy(block.mlp_output(block.mlp_hidden(normed)))  # (batch, L, dim)
    expected = expected + _numpy(tokens * gates["mlp"][:, None])[..., None] * mlp
    np.testing.assert_allclose(_numpy(model._gated_block(1, x, gates, False)), expected, atol=1e-6)


def test_patch_gate_reads_the_normalized_tokens():
    # A layer norm makes the patch decisions invariant to scaling the tokens.
    model = _model()
    x = keras.random.normal((4, 5, 8), seed=1)
    patches = _numpy(model.gate_values(0, x)["patches"])
    assert 0 < patches.mean() < 1
    np.testing.assert_array_equal(_numpy(model.gate_values(0, 7.0 * x)["patches"]), patches)


# Every fast-path run on the shared model below uses batches of `BATCH`, so
# that the module compiles each of its functions (gates, fixed decisions)
# once per batch size: 8, and 1 for the groups of one example.
BATCH = 8


@pytest.fixture(scope="module")
def shared():
    """One model with mixed learned decisions and its fast path, for the module."""
    model = _model()
    return model, _fast(model)


def test_fast_path_matches_masked_path_with_learned_gates(shared):
    model, fast = shared
    images = _images(13)  # batches 8 + 5, and the 5 padded to 8: padded groups
    decisions = model.decide(images)
    for key in ("patches", "heads", "attention", "mlp"):
        assert 0 < decisions[key].mean() < 1, key  # the gates really mix
    result = fast.run(images, batch_size=BATCH)
    for key, value in decisions.items():
        np.testing.assert_array_equal(result.decisions[key], value)
    np.testing.assert_allclose(result.outputs, _numpy(model(images)), atol=1e-5)
    np.testing.assert_array_equal(result.macs, fast.macs(decisions))
    if keras.backend.backend() == "tensorflow":  # one trace serves both batches
        assert fast.compiled_function().compiled.experimental_get_tracing_count() == 1
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        fast.run(images, batch_size=0)


def test_fast_path_matches_masked_path_and_numpy_reference_with_fixed_decisions(shared):
    model, fast = shared
    images = _images(13)
    decisions = _random_decisions(len(images), 3)
    masked = _numpy(model(images, decisions=decisions))
    result = fast.run(images, decisions, batch_size=BATCH)
    np.testing.assert_allclose(result.outputs, masked, atol=1e-5)
    for key, value in decisions.items():
        np.testing.assert_array_equal(result.decisions[key], value)
    reference, _ = AdaViTNumpyReference(model).predict(images, decisions)
    np.testing.assert_allclose(reference, masked, atol=1e-5)
    # One example at a time (a group of one, no sort) gives the same.
    single = [
        fast.run(images[i : i + 1], {k: v[i : i + 1] for k, v in decisions.items()})
        for i in range(3)
    ]
    np.testing.assert_allclose(np.concatenate([s.outputs for s in single]), masked[:3], atol=1e-5)


@needs_xla
def test_fast_path_check_fails_on_a_wrong_capacity():
    # A capacity below the kept count drops kept tokens: the comparison catches it.
    model = _model(gate_bias=50.0)  # every token kept
    images = _images(4)
    fast = _fast(model)
    fast.token_capacities = [3]  # 5 tokens kept, only 3 gathered
    assert np.abs(fast.run(images).outputs - _numpy(model(images))).max() > 1e-3


def test_group_branch_choice():
    # Tokens 3 or 5, heads 1 or 2: attention branch 1 + 2 * token bucket + head bucket,
    # the head bucket from the heads that any example with attention on keeps.
    fast = _fast(_model())
    tensor = ops.convert_to_tensor
    validity = ops.ones((4, 5))
    head_0, head_1 = [[1, 0]] * 2, [[0, 1]] * 2
    for keys, heads, on, expected in (
        ([0, 0, 0, 0], head_0 + head_0, [0, 0, 0, 0], 0),  # off everywhere: the empty branch
        ([3, 2, 0, 0], head_0 + head_0, [1, 1, 0, 0], 1),
        ([3, 2, 0, 0], head_0 + head_1, [1, 1, 0, 0], 1),  # head 1 only where attention is off
        ([3, 2, 0, 0], head_0 + head_1, [1, 1, 1, 0], 2),  # the union: both heads
        ([3, 2, 0, 0], [[0, 0]] * 4, [1, 1, 0, 0], 1),  # no head: one padding slot
        ([5, 1, 0, 0], head_1 + head_1, [1, 1, 0, 0], 3),
    ):
        keys, heads, on = (tensor(np.array(v, "float32")) for v in (keys, heads, on))
        assert int(_numpy(fast._attention_index(keys, validity, heads, on))) == expected
    for keys, expected in (([0.0, 0.0], 0), ([3.0, 0.0], 1), ([4.0, 0.0], 2)):
        assert int(_numpy(fast._mlp_index(tensor(keys), validity, None, None))) == expected


def test_everything_off_passes_tokens_through_the_gated_blocks(shared):
    model, fast = shared
    images = _images(4)
    off = {
        "patches": np.zeros((4, 3, 4), bool),
        "heads": np.zeros((4, 3, 2), bool),
        "attention": np.zeros((4, 3), bool),
        "mlp": np.zeros((4, 3), bool),
    }
    expected = _numpy(model.readout(model.stem(images)))
    np.testing.assert_allclose(_numpy(model(images, decisions=off)), expected, atol=1e-6)
    result = fast.run(images, off, batch_size=BATCH)
    np.testing.assert_allclose(result.outputs, expected, atol=1e-5)


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TF compiler IR")
def test_fast_path_lowers_to_xla_with_conditionals(shared):
    import tensorflow as tf

    function = shared[1].compiled_function().compiled
    hlo = function.experimental_get_compiler_ir(tf.constant(_images(BATCH)))(stage="hlo")
    assert "conditional" in hlo and "while" in hlo


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TF graph")
def test_no_conditional_reads_the_graph_above_an_earlier_one(shared):
    # TF's XLA bridge interprets the graph above each conditional's operands,
    # up to the next loop, to look for constants: a conditional whose
    # operands reach an earlier one made compilation minutes long at DeiT-S size.
    import tensorflow as tf

    fast = _fast(shared[0])  # its own compiled function: one group of 4
    function = fast.compiled_function().compiled
    graph = function.get_concrete_function(tf.TensorSpec((4, 8, 8))).graph
    switches = [op for op in graph.get_operations() if op.type in ("Case", "StatelessCase")]
    assert len(switches) == 2 * 3  # attention and MLP of the three gated blocks
    for switch in switches:
        seen, pending = set(), [t.op for t in switch.inputs if t.dtype != tf.resource]
        while pending:
            op = pending.pop()
            assert op.type not in ("Case", "StatelessCase"), (switch.name, op.name)
            if op.name not in seen and op.type not in ("While", "StatelessWhile"):
                seen.add(op.name)
                pending.extend(t.op for t in op.inputs)


needs_saved_model = pytest.mark.skipif(
    keras.backend.backend() not in ("tensorflow", "jax"),
    reason="SavedModel export runs on the TensorFlow and JAX backends.",
)


def _served_fast_path(fast, path, batch, **endpoint_options):
    """The fast path exported as a SavedModel of input batch `batch` and loaded back."""
    import tensorflow as tf

    archive = keras.export.ExportArchive()
    archive.track(fast)
    archive.add_endpoint(
        "serve",
        lambda x: fast(x, training=False),
        [keras.InputSpec(shape=(batch, 8, 8), dtype="float32")],
        **endpoint_options,
    )
    archive.write_out(str(path), verbose=False)
    return tf.saved_model.load(str(path))


# The dynamic-batch export below serves the same outputs at two batch sizes.
@pytest.mark.slow
@needs_saved_model
def test_fast_path_saved_model_round_trip(tmp_path, shared):
    model, fast = shared
    images = _images(BATCH)
    reloaded = _served_fast_path(fast, tmp_path / "adavit", BATCH)
    np.testing.assert_allclose(np.asarray(reloaded.serve(images)), _numpy(model(images)), atol=1e-5)


@needs_saved_model
def test_fast_path_saved_model_with_a_dynamic_batch(tmp_path, shared):
    # Any batch size: the group loop's trip count is dynamic, which jax2tf can
    # only convert without gradients (the fast path is for inference).
    import tensorflow as tf

    model, _ = shared
    # One token and one head capacity: the fewest branches to trace, as the batch is the subject.
    fast = AdaViTFastPath(model, token_buckets=1, head_buckets=1, group_size=4)
    jax = keras.backend.backend() == "jax"
    options = {"jax2tf_kwargs": {"with_gradient": False}} if jax else {}
    reloaded = _served_fast_path(fast, tmp_path / "adavit", None, **options)
    for batch in (3, 9):  # one partial group; two full groups and a partial one
        images = _images(batch)
        served = np.asarray(reloaded.serve(tf.constant(images)))
        np.testing.assert_allclose(served, _numpy(model(images)), atol=1e-5)


def test_macs_by_hand():
    # dim 8, 2 heads of 4, MLP 16, 4 patches + class token, 3 classes; the first block ungated.
    fast = _fast(_model(depth=2, gate_first_block=False))
    # Patch embedding 4 * (16 * 8) + head 8 * 3; a full block: projections
    # 5 * 8 * 2 * 16, attention 2 * 25 * 8, MLP 2 * 5 * 8 * 16.
    assert fast.full_macs() == 536 + 2 * (1280 + 400 + 1280)
    decisions = {
        "patches": np.array([[[True, False, True, False]], [[True] * 4]]),
        "heads": np.array([[[False, True]], [[True, True]]]),
        "attention": np.array([[True], [True]]),
        "mlp": np.array([[False], [True]]),
    }
    # Example 0: 3 tokens and 1 head: projections 3 * 8 * 16, attention 9 * 8;
    # gates 4 * 8 + 8 * (2 + 2). Example 1 keeps everything, plus the gates.
    np.testing.assert_array_equal(
        fast.macs(decisions), [536 + 2960 + 384 + 72 + 64, 536 + 2 * 2960 + 64]
    )


def test_computed_macs_pad_to_the_bucket_capacities_by_hand():
    # As above; token capacities 3 and 5, head capacities 1 and 2 (or 2 alone).
    model = _model(depth=2, gate_first_block=False)
    decisions = {
        "patches": np.array([[[True, False, False, False]]]),  # 2 tokens, computed as 3
        "heads": np.array([[[False, True]]]),
        "attention": np.array([[True]]),
        "mlp": np.array([[True]]),
    }
    base = 536 + 2960 + 64  # outside the gated block, the first block, the gates
    # One head on 2 tokens: 2 * 8 * 8 + 4 * 8; the MLP on 2 tokens 2 * 2 * 8 * 16.
    np.testing.assert_array_equal(_fast(model).macs(decisions), [base + 256 + 32 + 512])
    # On 3 tokens: 384 + 72 and 768; with one head bucket both heads run.
    np.testing.assert_array_equal(_fast(model).computed_macs(decisions), [base + 456 + 768])
    every_head = _fast(model, head_buckets=1).computed_macs(decisions)
    np.testing.assert_array_equal(every_head, [base + 2 * 456 + 768])


@pytest.mark.parametrize("gate_first_block", [True, False])
def test_usage_loss_by_hand(gate_first_block):
    model = _model(target_usage=(0.3, 0.5, 0.5), gate_first_block=gate_first_block)
    decisions = {
        "patches": np.tile([True, False, False, False], (2, 3, 1)),
        "heads": np.tile([True, True], (2, 3, 1)),
        "attention": np.array([[True, True, False], [True, True, False]]),
        "mlp": np.array([[True, True, False], [True, True, False]]),
    }
    decisions["heads"][:, 1, 1] = False
    decisions["patches"][:, 0] = True  # block 0 or, without its gate, block 1
    if not gate_first_block:
        decisions = {key: value[:, 1:] for key, value in decisions.items()}
    # Blocks 1 and 2 have head and block gates: block usage 0.5; block 2 is off, so
    # its heads (all on) do not count: head usage 0.5. The token usage counts the
    # class token and every patch-gated block, the first included: 2 of 5 tokens in
    # each block, and all 5 in the first gated block.
    token_usage = (5 + 2 + 2) / 15 if gate_first_block else (2 + 2) / 10
    model(_images(2), training=True, decisions=decisions)
    loss = float(_numpy(model.losses[0]))
    assert loss == pytest.approx(2 * 0.0 + 2 * 0.0 + 2 * (token_usage - 0.3) ** 2, abs=1e-6)
    assert model.usage_loss(decisions) == pytest.approx(loss, abs=1e-6)  # without a call
    # `usage` reports the loss's token statistic beside the patch keep rate.
    usage = model.usage(decisions)
    assert usage["tokens"] == pytest.approx(token_usage)
    assert usage["patches"] == pytest.approx((4 + 1 + 1) / 12 if gate_first_block else 2 / 8)


# One test for the training recipe: each XLA fit of a model compiles for seconds
# (`pretrain_vit` and `finetune_vit` are trained in their docstring examples).
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="fit runs on TF here")
def test_recipe_lowers_usage_under_xla_saves_and_leaves_the_vit_unchanged(tmp_path):
    images = _images(64)
    labels = np.arange(64) % 3
    vit = _vit(depth=2)
    before = [w.copy() for w in vit.get_weights()]
    start = AdaViT(vit, gate_bias=1.0, seed=0).decide(images)  # every gate on at first
    model = finetune_adavit(
        vit, images, labels, 0.2, 4, batch_size=32, learning_rate=0.05, gate_bias=1.0
    )
    assert model.target_usage == (0.2, 0.2, 0.2) and model.gate_bias == 1.0
    assert model.jit_compile and model.backbone is not vit
    assert model.optimizer.iterations.numpy() == 8
    after = model.decide(images)
    assert after["heads"].mean() < start["heads"].mean()
    assert after["mlp"].mean() < start["mlp"].mean()
    path = str(tmp_path / "adavit.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    assert isinstance(reloaded, AdaViT) and reloaded.target_usage == (0.2, 0.2, 0.2)
    np.testing.assert_allclose(_numpy(reloaded(images)), _numpy(model(images)), atol=1e-6)
    for old, new in zip(before, vit.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)


def test_random_decisions_like_match_each_block_and_so_the_macs():
    model = _model(depth=4)  # 4 patch-gated blocks of 4 patches, 2 heads
    batch = 200
    # A concentrated policy: block 2 computes (every patch, both heads, both sub-layers),
    # blocks 1 and 3 compute nothing, the first block keeps half its patches.
    learned = model.random_decisions(batch, 1.0, seed=0)
    learned["patches"][:, 0, 2:] = False
    for key in DECISION_KEYS:
        learned[key][:, [1, 3]] = False
    like = model.random_decisions_like(learned, seed=1)
    assert {k: v.shape for k, v in like.items()} == {k: v.shape for k, v in learned.items()}
    for key in DECISION_KEYS:  # block by block, the same count kept over the batch
        per_block = [d[key].reshape(batch, 4, -1).sum((0, 2)) for d in (like, learned)]
        np.testing.assert_array_equal(*per_block)
    # Half the first block's patches in every example, but not always the same ones.
    np.testing.assert_array_equal(like["patches"][:, 0].sum(-1), 2)
    assert like["patches"][:, 0, 2:].any()
    # A share of the examples: 0.5 of them run block 2's MLP where half the batch did.
    halved = {**learned, "mlp": learned["mlp"] & (np.arange(batch) % 2 == 0)[:, None]}
    picked = model.random_decisions_like(halved, seed=2)["mlp"][:, 2]
    assert picked.sum() == batch // 2 and not np.array_equal(picked, halved["mlp"][:, 2])
    # Equal MACs; random decisions of the same mean usage compute far less.
    fast = model.fast_path()
    same_mean = model.random_decisions(batch, model.usage(learned), seed=1)
    learned_macs = fast.macs(learned).mean()
    assert fast.macs(like).mean() == pytest.approx(learned_macs, rel=0.02)
    assert fast.macs(same_mean).mean() < 0.9 * learned_macs
    with pytest.raises(ValueError, match="Received: decisions without"):
        model.random_decisions_like({"patches": learned["patches"]})
    for wrong in (
        {**learned, "heads": learned["heads"][:, :2]},
        {k: v[:0] for k, v in like.items()},
    ):
        with pytest.raises(ValueError, match="Received: decisions of shapes"):
            model.random_decisions_like(wrong)


def test_random_decisions_keep_the_imposed_share_per_example():
    model = _model(depth=4)  # 4 patch-gated blocks, 3 with head and block gates
    decisions = model.random_decisions(500, 0.5, seed=0)
    assert {k: v.shape for k, v in decisions.items()} == {
        "patches": (500, 4, 4),
        "heads": (500, 4, 2),
        "attention": (500, 4),
        "mlp": (500, 4),
    }
    # The first block has no head or block gate.
    assert all(decisions[key][:, 0].all() for key in ("heads", "attention", "mlp"))
    # 0.5 of 4 patches and of 2 heads: exactly 2 and 1 in every block of every example.
    np.testing.assert_array_equal(decisions["patches"].sum(-1), 2)
    np.testing.assert_array_equal(decisions["heads"][:, 1:].sum(-1), 1)
    # 0.5 of 3 blocks: 1 or 2 per example, 1.5 on average.
    assert set(np.unique(decisions["attention"][:, 1:].sum(-1))) == {1, 2}
    assert abs(decisions["mlp"][:, 1:].mean() - 0.5) < 0.03
    # The positions are random: every patch is kept somewhere, not always the same ones.
    assert 0.4 < decisions["patches"].mean(axis=(0, 1)).min()
    rates = {"patches": 0.3, "heads": 1.0, "attention": 0.0, "mlp": 0.7}
    mixed = model.random_decisions(2000, rates, seed=1)
    assert mixed["heads"].all() and not mixed["attention"][:, 1:].any()
    assert abs(mixed["patches"].mean() - rates["patches"]) < 0.02
    assert abs(mixed["mlp"][:, 1:].mean() - rates["mlp"]) < 0.02
    # `usage` reads the rates back over the blocks that have each gate.
    measured = model.usage(mixed)
    assert measured["heads"] == 1.0 and measured["attention"] == 0.0
    assert all(abs(measured[key] - rates[key]) < 0.02 for key in ("patches", "mlp"))
    again = model.random_decisions(2000, rates, seed=1)
    assert all(np.array_equal(mixed[k], again[k]) for k in mixed)
    with pytest.raises(ValueError, match="Received: usage=1.5"):
        model.random_decisions(2, 1.5)
    with pytest.raises(ValueError, match="Received: usage="):
        model.random_decisions(2, {"patches": 0.5})


def test_compiled_function_is_cached_and_gives_what_run_gives(shared):
    model, fast = shared
    images = _images(BATCH)
    decisions = model.random_decisions(BATCH, 0.5, seed=0)
    compiled = fast.compiled_function(fixed_decisions=True)
    assert fast.compiled_function(fixed_decisions=True) is compiled
    assert fast.compiled_function() is not compiled
    fixed = {key: value.astype("float32") for key, value in decisions.items()}
    outputs, used = compiled(images, fixed)
    np.testing.assert_allclose(outputs, fast.run(images, decisions).outputs, atol=1e-6)
    np.testing.assert_allclose(outputs, _numpy(model(images, decisions=decisions)), atol=1e-5)
    for key, value in decisions.items():
        np.testing.assert_array_equal(used[key], value)


def test_predictor_binds_the_decisions_of_one_batch(shared):
    model, fast = shared
    images = _images(BATCH)
    decisions = model.random_decisions(BATCH, 0.5, seed=1)
    outputs, used = fast.predictor(decisions)(images)
    np.testing.assert_allclose(outputs, _numpy(model(images, decisions=decisions)), atol=1e-5)
    for key, value in decisions.items():
        np.testing.assert_array_equal(used[key], value)
    learned, _ = fast.predictor()(images)
    np.testing.assert_allclose(learned, fast.run(images).outputs, atol=1e-6)
    with pytest.raises(ValueError, match="Received: images with 3 rows"):
        fast.predictor(decisions)(images[:3])
    with pytest.raises(ValueError, match=r"Received: decisions without \['mlp'\]"):
        fast.predictor({key: decisions[key] for key in ("patches", "heads", "attention")})


def test_usage_is_at_target_when_every_official_usage_is_within_the_tolerance_of_its_own():
    usage = {"tokens": 0.52, "heads": 0.46, "attention": 0.5, "mlp": 0.58}
    model = AdaViT(_vit(), target_usage=0.5)
    assert model.usage_at_target(usage)
    assert not model.usage_at_target({**usage, "mlp": 0.7})  # blocks 0.6
    assert not model.usage_at_target(usage, tolerance=0.03)  # heads 0.04 off
    assert model.usage_at_target({**usage, "attention": 1.0, "mlp": 0.0})  # blocks 0.5
    separate = AdaViT(_vit(), target_usage=(0.5, 0.3, 0.7))  # patches, heads, blocks
    assert separate.usage_at_target({"tokens": 0.5, "heads": 0.3, "attention": 0.9, "mlp": 0.5})
    assert not separate.usage_at_target(usage)
    with pytest.raises(ValueError, match="Received: tolerance=-0.1"):
        model.usage_at_target(usage, tolerance=-0.1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: target_usage=0"):
        AdaViT(_vit(), target_usage=0)
    with pytest.raises(ValueError, match=r"Received: target_usage=\(0.5, 0.5\)"):
        AdaViT(_vit(), target_usage=(0.5, 0.5))
    with pytest.raises(ValueError, match="Received: backbone='vision_transformer' with 1 blocks"):
        AdaViT(_vit(depth=1))
    with pytest.raises(ValueError, match="Received: model with built=False"):
        AdaViTFastPath(AdaViT(_vit()))
    with pytest.raises(ValueError, match="Received: group_size=0"):
        AdaViTFastPath(_model(), group_size=0)


def test_tempered_inference_keeps_the_patches_that_training_keeps_without_noise():
    # sigmoid(l / τ) > 0.6 is l > τ·logit(0.6): a plain patch threshold of
    # sigmoid(τ·logit(0.6)) decides the same; heads and blocks (0.5) do not move.
    logit = 5.0 * np.log(0.6 / 0.4)
    tempered = _model(tempered_inference=True)
    plain = _model(patch_threshold=float(1 / (1 + np.exp(-logit))))
    official = _model()
    x = _images()
    models = {"tempered": tempered, "plain": plain, "official": official}
    decided = {name: model.decide(x) for name, model in models.items()}
    for key in decided["plain"]:
        np.testing.assert_array_equal(decided["tempered"][key], decided["plain"][key])
    assert decided["tempered"]["patches"].sum() < decided["official"]["patches"].sum()
    restored = AdaViT.from_config(tempered.get_config())
    assert restored.tempered_inference
    assert all(gate.tempered_inference for gate in restored.patch_gates + restored.head_gates)
    with pytest.raises(ValueError, match="Received: tempered_inference=1"):
        AdaViT(_vit(), tempered_inference=1)


@pytest.mark.skipif(keras.backend.backend() != "torch", reason="The torch refusal.")
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="the eager path of torch")
def test_fast_path_on_torch_runs_each_sub_layer_on_the_examples_that_run_it(monkeypatch):
    model = _model()
    images = _images(6)
    decisions = _random_decisions(len(images), 3)
    shapes = []  # (block, sub-layer, examples, tokens) of every branch call
    for index, block in enumerate(model.blocks):
        for name in ("attention_branch", "mlp_branch"):
            branch = getattr(block, name)

            def recorded(x, *args, _branch=branch, _key=(index, name), **kwargs):
                shapes.append((*_key, *x.shape[:2]))
                return _branch(x, *args, **kwargs)

            monkeypatch.setattr(block, name, recorded)
    result = _fast(model).run(images, decisions)
    kept = 1 + decisions["patches"].sum(-1)  # (batch, blocks), the class token included
    expected = []
    for index in range(3):
        for name, key in (("attention_branch", "attention"), ("mlp_branch", "mlp")):
            rows = np.flatnonzero(decisions[key][:, index])
            if rows.size:
                expected.append((index, name, rows.size, kept[rows, index].max()))
    assert shapes == expected
    monkeypatch.undo()
    np.testing.assert_allclose(
        result.outputs, _numpy(model(images, decisions=decisions)), atol=1e-5
    )


def test_with_inference_rule_copies_the_weights_and_changes_only_the_rule():
    official = _model()
    x = _images()
    before = official.decide(x)
    tempered = official.with_inference_rule(tempered=True)
    assert tempered is not official and tempered.tempered_inference
    assert not official.tempered_inference  # left as it was
    settings = [
        {k: v for k, v in model.get_config().items() if k != "backbone"}  # new layer names
        for model in (tempered, official)
    ]
    assert settings[0] == {**settings[1], "tempered_inference": True}
    for copied, kept in zip(tempered.get_weights(), official.get_weights(), strict=True):
        np.testing.assert_array_equal(copied, kept)
    # The tempered rule keeps fewer patches (see the test above), with the same weights.
    assert tempered.decide(x)["patches"].sum() < before["patches"].sum()
    back = tempered.with_inference_rule(tempered=False).decide(x)
    for key, value in before.items():
        np.testing.assert_array_equal(back[key], value)
    with pytest.raises(ValueError, match="Received: tempered='yes'"):
        official.with_inference_rule("yes")
