"""Binary decision gates of AdaViT (Meng et al., CVPR 2022).

AdaViT: Adaptive Vision Transformers for Efficient Image Recognition,
https://arxiv.org/abs/2111.15668. Each gate is a linear map to one logit per
decision, made binary by a Gumbel-sigmoid with a hard straight-through
estimator in training and by a fixed threshold at inference.
"""

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.validation import (
    check_bool,
    check_float,
    check_int,
    check_optional_int,
    check_positive,
    feature_spec,
)

EPSILON = 1e-10


@keras.saving.register_keras_serializable(package="keras_attn")
class GumbelSigmoidGate(keras.layers.Layer):
    """A linear layer followed by binary keep/skip decisions.

    The logits are `inputs @ kernel + bias`, one per decision. In training
    each decision is `1` where `sigmoid((logit + g1 - g2) / temperature)`
    exceeds `threshold`, with `g1`, `g2` independent Gumbel(0, 1) samples,
    and its gradient is the gradient of that sigmoid (hard straight-through).
    At inference the decision is `sigmoid(logit) > threshold`, deterministic.
    As in the official AdaViT code, the threshold is applied to the noisy,
    tempered sigmoid in training and to the plain sigmoid at inference; with
    `tempered_inference=True` inference applies it to `sigmoid(logit /
    temperature)`, the training decision without noise. The two differ for
    thresholds other than 0.5: at 0.6 and τ = 5 a logit between 0.41 and
    2.03 is kept at inference only with the official rule.

    The logits and the decisions are computed in float32 from float32
    inputs (the inputs are not autocast), so that mixed precision never
    flips a decision; the output has the layer's compute dtype.

    Args:
        units: int, number of decisions per input vector.
        temperature: float > 0, the Gumbel-sigmoid temperature τ.
        threshold: float in `(0, 1)`, the keep threshold.
        kernel_initializer: initializer of the `(dim, units)` kernel.
        bias_initializer: initializer of the `(units,)` bias. A positive
            constant starts a fine-tuned gate with most decisions on.
        seed: int, seed of the Gumbel noise.
        tempered_inference: bool. `False` (official): inference keeps
            `sigmoid(logit) > threshold`. `True`: `sigmoid(logit /
            temperature) > threshold`.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(..., dim)`.
        training: bool, whether to sample the Gumbel noise.

    Returns:
        `(..., units)` tensor of zeros and ones.

    Example:

    >>> gate = GumbelSigmoidGate(3, bias_initializer=keras.initializers.Constant(5.0))
    >>> keras.ops.convert_to_numpy(gate(np.zeros((2, 8)))).tolist()
    [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]]

    References:
        - [Meng et al., 2022](https://arxiv.org/abs/2111.15668)
        - [Jang et al., 2017](https://arxiv.org/abs/1611.01144)
    """

    def __init__(
        self,
        units: int,
        temperature: float = 5.0,
        threshold: float = 0.5,
        kernel_initializer: Initializer = "glorot_uniform",
        bias_initializer: Initializer = "zeros",
        seed: int | None = None,
        tempered_inference: bool = False,
        **kwargs,
    ):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        self.units = check_int("units", units)
        self.temperature = check_positive("temperature", temperature)
        self.threshold = check_float(
            "threshold", threshold, 0.0, 1.0, low_open=True, high_open=True
        )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.seed = check_optional_int("seed", seed, minimum=0)
        self.seed_generator = keras.random.SeedGenerator(self.seed)
        self.tempered_inference = check_bool("tempered_inference", tempered_inference)

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape, any_rank=True)
        self.kernel = self.add_weight(
            name="kernel", shape=(input_shape[-1], self.units), initializer=self.kernel_initializer
        )
        self.bias = self.add_weight(
            name="bias", shape=(self.units,), initializer=self.bias_initializer
        )

    def logits(self, inputs: Tensor) -> Tensor:
        """The float32 decision logits, `(..., units)`."""
        inputs = ops.cast(inputs, "float32")
        return ops.matmul(inputs, ops.cast(self.kernel, "float32")) + ops.cast(
            self.bias, "float32"
        )  # (..., units)

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        logits = self.logits(inputs)
        if training:
            noise = self._gumbel(ops.shape(logits)) - self._gumbel(ops.shape(logits))
            soft = ops.sigmoid((logits + noise) / self.temperature)
            hard = ops.cast(soft > self.threshold, "float32")
            gates = hard + (soft - ops.stop_gradient(soft))  # exactly `hard` forward
        else:
            scale = self.temperature if self.tempered_inference else 1.0
            gates = ops.cast(ops.sigmoid(logits / scale) > self.threshold, "float32")
        return ops.cast(gates, self.compute_dtype)

    def _gumbel(self, shape):
        uniform = keras.random.uniform(shape, seed=self.seed_generator)
        return -ops.log(-ops.log(uniform + EPSILON) + EPSILON)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.units)

    def get_config(self):
        arguments = (
            "units",
            "temperature",
            "threshold",
            "kernel_initializer",
            "bias_initializer",
            "seed",
            "tempered_inference",
        )
        return {**super().get_config(), **argument_config(self, arguments)}
