"""The contract every keras_attn layer honours, as reusable test checks.

Each layer's test module builds one `LayerChecks` and runs every check in
`LayerChecks.CHECKS`, through the parametrized test of `contract_test`:

    CHECKS = LayerChecks(MyLayer, {"units": 4}, input_shape=(2, 5, 8))
    test_layer_contract = LayerChecks.contract_test(CHECKS)
"""

import atexit
import inspect
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_attn.kernels import runtime
from keras_attn.utils.training import build_optimizer, default_jit_compile

NEEDS_FOLDER = ("keras_save_load", "saved_model", "fresh_process_reload")
# Normwise relative error `|mixed - full| / |full|` allowed per output: a few
# units of each format's rounding (float16 2**-11, bfloat16 2**-8).
MIXED_RTOL = {"mixed_float16": 5e-3, "mixed_bfloat16": 4e-2}
# The fresh process imports keras_attn and nothing else of the test suite, so
# a layer that is only registered for serialization by a test fails here. One
# such process per test process serves every reload, since starting one costs
# seconds: it reads `[model, inputs, outputs, reply]` paths as JSON lines and
# writes to `reply` the traceback of a failed reload, or nothing.
RELOAD_SERVER = textwrap.dedent(
    """
    import json
    import os
    import sys
    import traceback

    import keras
    import numpy as np
    import keras_attn

    for line in sys.stdin:
        model_path, inputs_path, outputs_path, reply_path = json.loads(line)
        try:
            model = keras.models.load_model(model_path)
            data = dict(np.load(inputs_path))
            inputs = [data[f"input_{i}"] for i in range(len(data))]
            outputs = model(inputs if len(inputs) > 1 else inputs[0])
            outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
            np.savez(outputs_path, *[keras.ops.convert_to_numpy(x) for x in outputs])
            reply = ""
        except Exception:
            reply = traceback.format_exc()
        with open(reply_path + ".part", "w") as file:
            file.write(reply)
        os.replace(reply_path + ".part", reply_path)
    """
)
RELOAD_TIMEOUT_S = 300
# Checks whose code path does not depend on the backend: `slow` on JAX and torch.
BACKEND_INDEPENDENT_CHECKS = ("config_round_trip", "keras_save_load", "wrong_feature_size")


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
            they are filled with uniform values in `[0, 2)`, so a head mask
            really scales the heads.
        dynamic_axes: input axes (batch excluded from the count, so 1 is the
            sequence axis) that are left unknown in the exported SavedModel
            and served at the test size and at twice that size plus one, so
            that the number of keys of every attention pattern changes.
            Empty for fixed-shape layers.
        input_dtype: dtype of the main input (`"int32"` for token ids).
        input_range: `(low, high)` of integer inputs.
        bad_init_kwargs: list of dicts; each, merged into `init_kwargs`, must
            make the constructor raise a `ValueError` containing "Received:".
        atol: tolerance of the float32 round-trip comparisons.
        num_params: int, the number of scalars in the layer's weights
            (trainable or not), as derived from its definition; required by
            the `weight_count` check.
        mixed_precision_on_jax: bool, whether the mixed-precision checks
            also run on JAX. They run on TensorFlow and torch for every
            layer; JAX compiles every eager op again for each dtype, so a
            mixed check costs 5-30 s there, and only the layers that hold
            mixed-precision code of their own (the attention core's float32
            softmax, on each of its paths) set it.
    """

    CHECKS = (
        "config_round_trip",
        "keras_save_load",
        "functional_symbolic",
        "fresh_process_reload",
        "xla_fit",
        "saved_model",
        "mixed_float16",
        "mixed_bfloat16",
        "bad_arguments",
        "weight_count",
        "wrong_feature_size",
    )

    def __init__(
        self,
        layer_cls: type[keras.layers.Layer],
        init_kwargs: Mapping[str, Any],
        input_shape: Sequence[int],
        expected_output_shape: Sequence[int] | None = None,
        call_kwargs: Mapping[str, Any] | None = None,
        extra_inputs: Mapping[str, Sequence[int]] | None = None,
        dynamic_axes: Sequence[int] = (1,),
        input_dtype: str = "float32",
        input_range: tuple[int, int] = (0, 10),
        bad_init_kwargs: Iterable[Mapping[str, Any]] = (),
        atol: float = 1e-5,
        num_params: int | None = None,
        mixed_precision_on_jax: bool = False,
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
        self.num_params = num_params
        self.mixed_precision_on_jax = mixed_precision_on_jax

    @staticmethod
    def contract_test(
        checks: "LayerChecks | Mapping[str, LayerChecks]", only: Sequence[str] | None = None
    ) -> Any:
        """A pytest test function that runs the contract, one test per layer and check.

        Args:
            checks: a `LayerChecks`, or a dict `name -> LayerChecks` for
                several layers (or configurations) of one test module.
            only: names of the checks to run; all of `CHECKS` by default.

        Returns:
            A test function parametrized over `layer` and `check`; assign it
            to a `test_...` name of the test module.

        Example:

        ```python
        CHECKS = LayerChecks(MyLayer, {"units": 4}, input_shape=(2, 5, 8))
        test_layer_contract = LayerChecks.contract_test(CHECKS)
        ```
        """
        import pytest  # only test modules call this

        if isinstance(checks, LayerChecks):
            checks = {checks.layer_cls.__name__: checks}

        names = LayerChecks.CHECKS if only is None else tuple(only)
        # On JAX a SavedModel export (jax2tf) costs 2-8 s a layer: `slow` there; the
        # TensorFlow run exports every layer, and the deployment matrix every layer from JAX.
        slow_here = ("saved_model",) if _on_jax() else ()
        # What these check (the config, the `.keras` file, the feature-size check of
        # `build`) runs the same Python on every backend: the TensorFlow run checks every
        # layer, the JAX and torch runs repeat it only under `slow`.
        if keras.backend.backend() != "tensorflow":
            slow_here += BACKEND_INDEPENDENT_CHECKS
        params = [pytest.param(c, marks=pytest.mark.slow) if c in slow_here else c for c in names]

        @pytest.mark.parametrize("check", params)
        @pytest.mark.parametrize("layer", sorted(checks))
        def test_contract(layer, check, tmp_path):
            checks[layer].run(check, tmp_path)

        return test_contract

    def run(self, check: str, tmp_path: pathlib.Path) -> None:
        """Runs the check named `check`; `tmp_path` is a scratch folder."""
        if check not in self.CHECKS:
            raise ValueError(f"`check` must be one of {self.CHECKS}. Received: check={check!r}")
        if check.startswith("mixed") and _on_jax() and not self.mixed_precision_on_jax:
            raise unittest.SkipTest("Mixed precision of this layer is checked on TF and torch.")
        keras.utils.set_random_seed(0)
        args = (tmp_path,) if check in NEEDS_FOLDER else ()
        getattr(self, f"check_{check}")(*args)

    # Building blocks.

    def make_layer(self, **overrides: Any) -> keras.layers.Layer:
        return self.layer_cls(**{**self.init_kwargs, **overrides})

    def make_inputs(
        self, input_shape: Sequence[int] | None = None, seed: int = 0
    ) -> list[np.ndarray]:
        """Test data: the main input, then the extra inputs, as numpy arrays."""
        shape = input_shape or self.input_shape
        rng = np.random.default_rng(seed)
        if self.input_dtype.startswith("int"):
            main = rng.integers(*self.input_range, size=shape).astype(self.input_dtype)
        else:
            main = rng.normal(size=shape).astype(self.input_dtype)
        extras = [
            rng.uniform(0.0, 2.0, size=(shape[0], *s)).astype("float32")
            for s in self.extra_inputs.values()
        ]
        return [main, *extras]

    def make_model(
        self, layer: keras.layers.Layer | None = None, dynamic: bool = False
    ) -> keras.Model:
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

    def check_config_round_trip(self) -> None:
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
        self._assert_same_outputs(_forward(clone_model, args), _forward(model, args))

    def check_keras_save_load(self, tmp_path: pathlib.Path) -> None:
        model = self.make_model()
        data = self._model_args(self.make_inputs())
        expected = _forward(model, data)
        path = str(tmp_path / "model.keras")
        model.save(path)
        reloaded = keras.models.load_model(path)
        assert any(type(layer) is self.layer_cls for layer in reloaded.layers)
        self._assert_same_outputs(_forward(reloaded, data), expected)

    def check_functional_symbolic(self) -> None:
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

    def check_fresh_process_reload(self, tmp_path: pathlib.Path) -> None:
        """Reloads the `.keras` file in a new process that imports only keras_attn.

        Runs on TensorFlow only: what it tests (that every saved object is
        registered by `import keras_attn`) does not depend on the backend,
        and a fresh process costs seconds. One fresh process, started at the
        first reload, serves every reload of the test process.
        """
        if keras.backend.backend() != "tensorflow":
            raise unittest.SkipTest("Registration does not depend on the backend.")
        model = self.make_model()
        data = self.make_inputs()
        expected = _as_list(model(self._model_args(data)))
        path = str(tmp_path / "model.keras")
        model.save(path)
        np.savez(tmp_path / "inputs.npz", **{f"input_{i}": x for i, x in enumerate(data)})
        outputs = tmp_path / "outputs.npz"
        error = _reload_in_fresh_process(path, tmp_path / "inputs.npz", outputs)
        assert not error, f"Reload in a fresh process failed:\n{error[-3000:]}"
        reloaded = np.load(outputs)
        actual = [reloaded[f"arr_{i}"] for i in range(len(reloaded.files))]
        self._assert_same_outputs(actual, expected)

    def check_xla_fit(self) -> None:
        """One `fit` step compiled with XLA (eager on torch, where XLA is not used).

        On TensorFlow the whole training step, gradients included, is also
        lowered to XLA HLO, which fails on any op XLA cannot compile.
        """
        jit_compile = default_jit_compile()
        model = self._first_output_model()
        data = self._model_args(self.make_inputs())
        target = np.zeros(self.expected_output_shape, "float32")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            model.compile(optimizer="sgd", loss="mse", jit_compile=jit_compile)
            build_optimizer(model)
            history = model.fit(data, target, epochs=1, batch_size=len(target), verbose=0)
        fallbacks = [w for w in caught if "jit_compile" in str(w.message)]
        assert not fallbacks, f"XLA fell back: {fallbacks[0].message}"
        assert model.jit_compile is jit_compile
        assert np.isfinite(history.history["loss"][0])
        if keras.backend.backend() == "tensorflow":
            _assert_xla_lowers_training_step(model, data, target)

    def check_saved_model(self, tmp_path: pathlib.Path) -> None:
        """Exports with the dynamic axes unknown, reloads with TensorFlow, serves two sizes."""
        if keras.backend.backend() not in ("tensorflow", "jax"):
            raise unittest.SkipTest("SavedModel export runs on the TensorFlow and JAX backends.")
        model = self.make_model(dynamic=True)
        path = str(tmp_path / "saved_model")
        model.export(path, format="tf_saved_model", verbose=False)
        reloaded = runtime.load_saved_model(path)
        for size in self._serving_sizes():
            data = self._model_args(self.make_inputs(size, seed=1))
            self._assert_same_outputs(reloaded.serve(data), _forward(model, data), atol=1e-4)

    def _serving_sizes(self):
        """The test size and, with dynamic axes, twice it plus one.

        Doubling a length adds one bit to it, so the key count of every
        LogSparse variant changes (and `ceil(L / S)` of the restart variant
        grows once `L >= S - 1`), as does that of dense attention.
        """
        sizes = [self.input_shape]
        if self.dynamic_axes:
            shape = list(self.input_shape)
            for axis in self.dynamic_axes:
                shape[axis] = 2 * shape[axis] + 1
            sizes.append(tuple(shape))
        return sizes

    def check_mixed_float16(self) -> None:
        self._check_mixed_precision("mixed_float16")

    def check_mixed_bfloat16(self) -> None:
        self._check_mixed_precision("mixed_bfloat16")

    def _check_mixed_precision(self, policy):
        """Mixed outputs within `MIXED_RTOL` of float32, also with padding, and a training step.

        Layers that take a Keras `mask` are also run with the first example
        fully padded and the last position of the others padded, the case
        where a softmax whose masked logits overflow the compute dtype gives
        NaN. The training step must leave every weight finite and change some.
        """
        full = self.make_model(self.make_layer())
        mixed = self.make_model(self.make_layer(dtype=policy))
        mixed.set_weights(full.get_weights())
        layer = next(x for x in mixed.layers if isinstance(x, self.layer_cls))
        full_layer = next(x for x in full.layers if isinstance(x, self.layer_cls))
        assert all(v.dtype == "float32" for v in layer.weights)
        data = self.make_inputs()
        outputs = _as_list(mixed(self._model_args(data)))
        compute_dtype = keras.mixed_precision.Policy(policy).compute_dtype
        assert ops.convert_to_numpy(outputs[0]).dtype == np.dtype(compute_dtype)
        _assert_close_relative(outputs, full(self._model_args(data)), MIXED_RTOL[policy])
        if _takes_mask(layer) and len(self.input_shape) == 3:
            mask = np.ones(self.input_shape[:2], bool)
            mask[0], mask[1:, -1] = False, False
            kwargs = {**self._extra_kwargs(data), **self.call_kwargs, "mask": mask}
            _assert_close_relative(
                layer(data[0], **kwargs), full_layer(data[0], **kwargs), MIXED_RTOL[policy]
            )
        self._check_training_step(self._first_output_model(mixed), data)

    def _extra_kwargs(self, data):
        return dict(zip(self.extra_inputs, data[1:], strict=True))

    def _check_training_step(self, model, data):
        before = [ops.convert_to_numpy(w) for w in model.trainable_weights]
        # Compiled as Keras does by default: XLA on JAX (where an eager step
        # also costs more), a traced step on TensorFlow's CPU, eager on torch.
        model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", jit_compile="auto")
        build_optimizer(model)
        model.train_on_batch(self._model_args(data), np.ones(self.expected_output_shape))
        after = [ops.convert_to_numpy(w) for w in model.trainable_weights]
        assert all(np.isfinite(w).all() for w in after), "A training step made weights non-finite."
        if before:
            changed = any(not np.array_equal(a, b) for a, b in zip(after, before, strict=True))
            assert changed, "A training step changed no weight."

    def check_bad_arguments(self) -> None:
        for bad in self.bad_init_kwargs:
            try:
                self.make_layer(**bad)
            except ValueError as error:
                assert "Received:" in str(error), f"{bad}: {error}"
            else:
                raise AssertionError(f"No ValueError for {bad}.")

    def check_weight_count(self) -> None:
        """The layer holds exactly `num_params` scalars, also after a `.keras` round trip."""
        assert self.num_params is not None, "Give `num_params`, derived from the definition."
        model = self.make_model()
        layer = next(x for x in model.layers if isinstance(x, self.layer_cls))
        assert layer.count_params() == self.num_params
        paths = [w.path for w in layer.weights]
        assert len(paths) == len(set(paths)), f"Weights share a path: {paths}"

    def check_wrong_feature_size(self) -> None:
        """A built layer given another feature size raises a `ValueError` naming the shape."""
        if self.input_dtype.startswith("int") or len(self.input_shape) < 2:
            raise unittest.SkipTest("The layer reads no feature axis.")
        layer = self.make_layer()
        data = self.make_inputs()
        layer(data[0], **self._extra_kwargs(data), **self.call_kwargs)
        if not layer.weights and layer.input_spec is None:
            raise unittest.SkipTest("A layer without weights may take any feature size.")
        shape = (*self.input_shape[:-1], self.input_shape[-1] + 1)
        wrong = self.make_inputs(shape)[0]
        try:
            layer(wrong, **self._extra_kwargs(data), **self.call_kwargs)
        except ValueError as error:
            assert str(shape[-1]) in str(error), str(error)
        else:
            raise AssertionError(f"No ValueError for input shape {shape}.")

    def _first_output_model(self, model=None):
        model = model or self.make_model()
        first = _as_list(model.outputs)[0]
        return keras.Model(model.inputs, first)


_RELOAD = {}  # the reload process and its stderr file, once started


def _reload_in_fresh_process(model_path, inputs_path, outputs_path):
    """Runs one reload in the reload process; returns its traceback, or "" on success."""
    process = _reload_process()
    reply = f"{outputs_path}.reply"
    process.stdin.write(json.dumps([str(model_path), str(inputs_path), str(outputs_path), reply]))
    process.stdin.write("\n")
    process.stdin.flush()
    deadline = time.monotonic() + RELOAD_TIMEOUT_S
    while not os.path.exists(reply):
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            _RELOAD["stderr"].seek(0)
            return f"The reload process stopped or hung:\n{_RELOAD.pop('stderr').read()}"
        time.sleep(0.02)
    with open(reply) as file:
        return file.read()


def _reload_process():
    process = _RELOAD.get("process")
    if process is not None and process.poll() is None:
        return process
    # The fresh process imports the same keras_attn as this one.
    package_root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    env = {**os.environ, "KERAS_BACKEND": keras.backend.backend(), "PYTHONPATH": package_root}
    _RELOAD["stderr"] = tempfile.TemporaryFile("w+")
    _RELOAD["process"] = subprocess.Popen(
        [sys.executable, "-c", RELOAD_SERVER],
        stdin=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        stderr=_RELOAD["stderr"],
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    atexit.register(_RELOAD["process"].kill)
    return _RELOAD["process"]


def _on_jax():
    return keras.backend.backend() == "jax"


def _forward(model, args):
    """The model's inference outputs; on JAX compiled, as `predict` runs them.

    JAX compiles every eager op anew for each shape and dtype, so an eager
    forward pass of a composite layer costs seconds there, a compiled one a
    fraction of that; Keras runs JAX models compiled in `fit`, `evaluate`
    and `predict` by default. `check_functional_symbolic` and the
    mixed-precision checks call the model eagerly on every backend (under
    `jax.jit` on the CPU, XLA refuses the float16 matmul with a float32
    result that the fused attention asks for).
    """
    if _on_jax():
        return model.predict_on_batch(args)
    return model(args)


def _as_list(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]


def _takes_mask(layer):
    return "mask" in inspect.signature(layer.call).parameters


def _assert_close_relative(actual, expected, rtol):
    """Normwise relative error of each output at most `rtol`, and no NaN."""
    for a, e in zip(_as_list(actual), _as_list(expected), strict=True):
        a = ops.convert_to_numpy(ops.cast(a, "float32")).astype("float64")
        e = ops.convert_to_numpy(ops.cast(e, "float32")).astype("float64")
        assert np.isfinite(a).all(), "Non-finite values under mixed precision."
        error = np.linalg.norm(a - e) / max(np.linalg.norm(e), 1e-12)
        assert error <= rtol, f"Relative error {error:.2e} exceeds {rtol:.0e}."


def _assert_xla_lowers_training_step(model, data, target):
    """Lowers the forward pass, loss and gradients to XLA HLO; raises if XLA can't."""
    hlo = runtime.training_step_hlo(model, keras.losses.MeanSquaredError(), data, target)
    assert "HloModule" in hlo
