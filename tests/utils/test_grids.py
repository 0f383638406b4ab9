"""`window_grid` against the output sizes of a convolution."""

import numpy as np
import pytest

from keras_attn.layers import PatchEmbedding, SoftSplit
from keras_attn.utils.grids import window_grid


@pytest.mark.parametrize(
    "height, width, kernel_size, stride, padding, expected",
    [(224, 224, 7, 4, 2, (56, 56)), (28, 20, 3, 2, 1, (14, 10)), (30, 17, 4, 4, 0, (7, 4))],
)
def test_the_grid_is_the_convolution_output_size(
    height, width, kernel_size, stride, padding, expected
):
    assert window_grid(height, width, kernel_size, stride, padding) == expected


def test_patch_embedding_and_soft_split_give_the_grid_of_their_tokens():
    images = np.zeros((1, 28, 16, 3), "float32")
    patches = PatchEmbedding(4, 8)
    assert patches.output_grid(28, 16) == (7, 4)
    assert patches(images).shape == (1, 7 * 4, 8)
    split = SoftSplit(kernel_size=3, stride=2, padding=1)
    assert split.output_grid(28, 16) == window_grid(28, 16, 3, 2, 1) == (14, 8)
    assert split(images).shape[1] == 14 * 8
