import numpy as np
import pytest

from keras_attn.layers import SinCosPositionEmbedding1D, SoftSplit
from keras_attn.layers.sin_cos_position_embedding_1d import sinusoid_table
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, assert_array_equal, to_numpy

pytestmark = pytest.mark.backend_agnostic

SPLIT_CHECKS = LayerChecks(
    SoftSplit,
    {"kernel_size": 3, "stride": 2, "padding": 1},
    input_shape=(2, 6, 5, 2),
    expected_output_shape=(2, 9, 18),
    dynamic_axes=(),
    num_params=0,
    bad_init_kwargs=[{"kernel_size": 0}, {"stride": 1.5}, {"padding": -1}, {"padding": 3}],
)
POSITION_CHECKS = LayerChecks(
    SinCosPositionEmbedding1D, {}, input_shape=(2, 5, 6), dynamic_axes=(), num_params=5 * 6
)


test_soft_split_contract = LayerChecks.contract_test(SPLIT_CHECKS)


test_position_embedding_contract = LayerChecks.contract_test(POSITION_CHECKS)


def unfold_reference(images, kernel_size, stride, padding):
    """PyTorch `nn.Unfold(...)(x).transpose(1, 2)` on channels-last images, in numpy."""
    batch, height, width, channels = images.shape
    padded = np.pad(images, ((0, 0), (padding, padding), (padding, padding), (0, 0)))
    rows = (height + 2 * padding - kernel_size) // stride + 1
    columns = (width + 2 * padding - kernel_size) // stride + 1
    tokens = np.zeros((batch, rows * columns, channels * kernel_size**2), images.dtype)
    for r in range(rows):
        for c in range(columns):
            for channel in range(channels):
                for i in range(kernel_size):
                    for j in range(kernel_size):
                        feature = channel * kernel_size**2 + i * kernel_size + j
                        pixel = padded[:, r * stride + i, c * stride + j, channel]
                        tokens[:, r * columns + c, feature] = pixel
    return tokens


@pytest.mark.parametrize(
    ("shape", "kernel_size", "stride", "padding"),
    [((2, 13, 11, 3), 7, 4, 2), ((1, 8, 8, 4), 3, 2, 1), ((2, 7, 7, 2), 3, 1, 1)],
)
def test_matches_unfold_in_channel_major_order(shape, kernel_size, stride, padding):
    images = np.random.default_rng(0).normal(size=shape).astype("float32")
    tokens = SoftSplit(kernel_size, stride, padding)(images)
    assert_array_equal(tokens, unfold_reference(images, kernel_size, stride, padding))


def test_grayscale_images_get_one_channel():
    images = np.arange(16, dtype="float32").reshape(1, 4, 4)
    tokens = to_numpy(SoftSplit(2, 2)(images))
    assert tokens.tolist() == [[[0, 1, 4, 5], [2, 3, 6, 7], [8, 9, 12, 13], [10, 11, 14, 15]]]


def test_paper_sizes_at_224_pixels():
    assert SoftSplit(7, 4, 2).compute_output_shape((None, 224, 224, 3)) == (None, 3136, 147)
    assert SoftSplit(3, 2, 1).compute_output_shape((None, 56, 56, 64)) == (None, 784, 576)
    assert SoftSplit(3, 2, 1).compute_output_shape((None, 28, 28, 64)) == (None, 196, 576)


def test_unknown_image_size_is_rejected():
    with pytest.raises(ValueError, match="Received: input_shape"):
        SoftSplit(3, 2).build((None, None, 8, 3))


def test_sinusoid_table_values():
    table = sinusoid_table(4, 6)
    position, channel = np.meshgrid(np.arange(4), np.arange(6), indexing="ij")
    angle = position / 10000 ** (2 * (channel // 2) / 6)
    expected = np.where(channel % 2 == 0, np.sin(angle), np.cos(angle))
    assert_allclose(table, expected, atol=1e-6)
    assert table[0].tolist() == [0, 1, 0, 1, 0, 1]


def test_position_table_is_added_and_frozen():
    layer = SinCosPositionEmbedding1D()
    x = np.random.default_rng(0).normal(size=(2, 5, 6)).astype("float32")
    assert_allclose(layer(x), x + sinusoid_table(5, 6)[None], atol=1e-6)
    assert not layer.trainable_weights
    assert layer.count_params() == 30
