"""The contract every keras_attn layer honours, as reusable test checks.

Each layer's test module builds one `LayerChecks` and runs every check in
`LayerChecks.CHECKS`, usually through `pytest.mark.parametrize`:

    CHECKS = LayerChecks(MyLayer, {"units": 4}, input_shape=(2, 5, 8))

    @pytest.mark.parametrize("check", LayerChecks.CHECKS)
    def test_layer_contract(check, tmp_path):
        CHECKS.run(check, tmp_path)
"""

import warnings

import keras
import numpy as np
import pytest
from keras import ops

NEEDS_FOLDER = ("keras_save_load", "saved_model")
MIXED_TOLERANCE = {"mixed_float16": 2e-2, "mixed_bfloat16": 1e-1}


class LayerChecks:
    """Runs the library's layer contract against one layer configuration.

    Args:
        layer_cls: the layer class under test.
        init_kwargs: dict, constructor arguments of a valid layer.
        input_shape: tuple, shape of the test input, batch included.
        expected_output_shape: tuple, shape of the (first) output for
            `input_shape`. Defaults to `input_shape`.
        call_kwargs: dict of non-tensor call arguments.
        extra_inputs: dict `name -> shape without batch` of additional tensor
            inputs passed to `call` by keyword (for example a head mask);
            they are filled with ones.
        dynamic_axes: input axes (batch excluded from the count, so 1 is the
            sequence axis) that are left unknown in the exported SavedModel
            and served at two different sizes. Empty for fixed-shape layers.
        input_dtype: dtype of the main input (`"int32"` for token ids).
        input_range: `(low, high)` of integer inputs.
        bad_init_kwargs: list of dicts; each, merged into `init_kwargs`, must
            make the constructor raise a `ValueError` containing "Received:".
        atol: tolerance of the float32 round-trip comparisons.
    """

    CHECKS = (
        "config_round_trip",
        "keras_save_load",
        "functional_symbolic",
        "xla_fit",
        "saved_model",
        "mixed_float16",
        "mixed_bfloat16",
        "bad_arguments",
    )

    def __init__(
        self,
        layer_cls,
        init_kwargs,
        input_shape,
        expected_output_shape=None,
        call_kwargs=None,
        extra_inputs=None,
        dynamic_axes=(1,),
        input_dtype="float32",
        input_range=(0, 10),
        bad_init_kwargs=(),
        atol=1e-5,
    ):
        self.layer_cls = layer_cls
        self.init_kwargs = dict(init_kwargs)
        self.input_shape = tuple(input_shape)
        self.expected_output_shape = tuple(expected_output_shape or input_shape)
        self.call_kwargs = dict(call_kwargs or {})
        self.extra_inputs = dict(extra_inputs or {})
        self.dynamic_axes = tuple(dynamic_axes)
        self.input_dtype = input_dtype
        self.input_range = input_range
        self.bad_init_kwargs = list(bad_init_kwargs)
        self.atol = atol

    def run(self, check, tmp_path):
        """Runs the check named `check`; `tmp_path` is a scratch folder."""
        if check not in self.CHECKS:
            raise ValueError(f"`check` must be one of {self.CHECKS}. Received: check={check!r}")
        keras.utils.set_random_seed(0)
        args = (tmp_path,) if check in NEEDS_FOLDER else ()
        getattr(self, f"check_{check}")(*args)

    # Building blocks.

    def make_layer(self, **overrides):
        return self.layer_cls(**{**self.init_kwargs, **overrides})

    def make_inputs(self, input_shape=None, seed=0):
        """Test data: the main input, then the extra inputs, as numpy arrays."""
        shape = input_shape or self.input_shape
        rng = np.random.default_rng(seed)
        if self.input_dtype.startswith("int"):
            main = rng.integers(*self.input_range, size=shape).astype(self.input_dtype)
        else:
            main = rng.normal(size=shape).astype(self.input_dtype)
        extras = [np.ones((shape[0], *s), "float32") for s in self.extra_inputs.values()]
        return [main, *extras]

    def make_model(self, layer=None, dynamic=False):
        """A functional model around one layer; `dynamic` unknowns the dynamic axes."""
        shape = list(self.input_shape[1:])
        for axis in self.dynamic_axes if dynamic else ():
            shape[axis - 1] = None
        main = keras.Input(shape=tuple(shape), dtype=self.input_dtype, name="inputs")
        extras = {name: keras.Input(shape=s, name=name) for name, s in self.extra_inputs.items()}
        layer = layer or self.make_layer()
        outputs = layer(main, **extras, **self.call_kwargs)
        inputs = [main, *extras.values()] if extras else main
        return keras.Model(inputs, outputs)

    @staticmethod
    def _model_args(data):
        return data if len(data) > 1 else data[0]

    def _assert_same_outputs(self, actual, expected, atol=None):
        actual, expected = _as_list(actual), _as_list(expected)
        assert len(actual) == len(expected)
        for a, e in zip(actual, expected, strict=True):
            np.testing.assert_allclose(
                ops.convert_to_numpy(a), ops.convert_to_numpy(e), atol=atol or self.atol
            )

    # The checks.

    def check_config_round_trip(self):
        layer = self.make_layer()
        config = layer.get_config()
        clone = self.layer_cls.from_config(config)
        assert clone.get_config() == config
        revived = keras.layers.deserialize(keras.layers.serialize(layer))
        assert type(revived) is self.layer_cls
        assert revived.get_config() == config
        data = self.make_inputs()
        model, clone_model = self.make_model(layer), self.make_model(clone)
        clone_model.set_weights(model.get_weights())
        args = self._model_args(data)
        self._assert_same_outputs(clone_model(args), model(args))

    def check_keras_save_load(self, tmp_path):
        model = self.make_model()
        data = self._model_args(self.make_inputs())
        expected = model(data)
        path = str(tmp_path / "model.keras")
        model.save(path)
        reloaded = keras.models.load_model(path)
        assert any(type(layer) is self.layer_cls for layer in reloaded.layers)
        self._assert_same_outputs(reloaded(data), expected)

    def check_functional_symbolic(self):
        model = self.make_model(dynamic=True)
        first_output = _as_list(model.outputs)[0]
        expected = list(self.expected_output_shape)
        expected[0] = None
        for axis in self.dynamic_axes:
            if axis < len(expected):
                expected[axis] = None
        assert tuple(first_output.shape) == tuple(expected)
        concrete = _as_list(model(self._model_args(self.make_inputs())))[0]
        assert tuple(concrete.shape) == self.expected_output_shape

    def check_xla_fit(self):
        model = self._first_output_model()
        data = self._model_args(self.make_inputs())
        target = np.zeros(self.expected_output_shape, "float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.compile(optimizer="sgd", loss="mse", jit_compile=True)
            history = model.fit(data, target, epochs=1, batch_size=len(target), verbose=0)
        fallbacks = [w for w in caught if "jit_compile" in str(w.message)]
        assert not fallbacks, f"XLA fell back: {fallbacks[0].message}"
        assert model.jit_compile is True
        assert np.isfinite(history.history["loss"][0])
        if keras.backend.backend() == "tensorflow":
            _assert_xla_lowers(model, data)

    def check_saved_model(self, tmp_path):
        if keras.backend.backend() != "tensorflow":
            pytest.skip("SavedModel export runs on the TensorFlow backend.")
        import tensorflow as tf

        model = self.make_model(dynamic=True)
        path = str(tmp_path / "saved_model")
        model.export(path, format="tf_saved_model", verbose=False)
        reloaded = tf.saved_model.load(path)
        for size in self._serving_sizes():
            data = self._model_args(self.make_inputs(size, seed=1))
            self._assert_same_outputs(reloaded.serve(data), model(data), atol=1e-4)

    def _serving_sizes(self):
        sizes = [self.input_shape]
        for delta in (1,) if self.dynamic_axes else ():
            shape = list(self.input_shape)
            for axis in self.dynamic_axes:
                shape[axis] += delta
            sizes.append(tuple(shape))
        return sizes

    def check_mixed_float16(self):
        self._check_mixed_precision("mixed_float16")

    def check_mixed_bfloat16(self):
        self._check_mixed_precision("mixed_bfloat16")

    def _check_mixed_precision(self, policy):
        full = self.make_model(self.make_layer())
        mixed = self.make_model(self.make_layer(dtype=policy))
        mixed.set_weights(full.get_weights())
        layer = next(x for x in mixed.layers if isinstance(x, self.layer_cls))
        assert all(v.dtype == "float32" for v in layer.weights)
        data = self._model_args(self.make_inputs())
        outputs = _as_list(mixed(data))
        assert ops.convert_to_numpy(outputs[0]).dtype == np.dtype(
            keras.mixed_precision.Policy(policy).compute_dtype
        )
        expected = [ops.cast(x, "float32") for x in _as_list(full(data))]
        actual = [ops.cast(x, "float32") for x in outputs]
        self._assert_same_outputs(actual, expected, atol=MIXED_TOLERANCE[policy])

    def check_bad_arguments(self):
        for bad in self.bad_init_kwargs:
            with pytest.raises(ValueError, match="Received:"):
                self.make_layer(**bad)

    def _first_output_model(self):
        model = self.make_model()
        first = _as_list(model.outputs)[0]
        return keras.Model(model.inputs, first)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _assert_xla_lowers(model, data):
    """Lowers the model's forward pass to XLA HLO; raises if XLA can't."""
    import tensorflow as tf

    forward = tf.function(lambda x: model(x, training=False), jit_compile=True)
    hlo = forward.experimental_get_compiler_ir(data)(stage="hlo")
    assert "HloModule" in hlo
