import numpy as np
import pytest

from keras_attn.datasets import AugmentedImages

IMAGES = np.arange(6 * 5 * 5, dtype="float32").reshape(6, 5, 5)


def candidates(image, max_shift, flip):
    """Every shifted (and mirrored) copy of `image`, by a plain numpy loop."""
    padded = np.pad(image, max_shift, mode="edge")
    size = image.shape[0]
    found = []
    for down in range(-max_shift, max_shift + 1):
        for right in range(-max_shift, max_shift + 1):
            top, left = max_shift - down, max_shift - right
            shifted = padded[top : top + size, left : left + size]
            found.append(shifted)
            if flip:
                found.append(shifted[:, ::-1])
    return found


def epoch_batches(data):
    batches = [data[index] for index in range(len(data))]
    data.on_epoch_end()
    return batches


def test_without_augmentation_an_epoch_is_one_shuffled_pass():
    data = AugmentedImages(IMAGES, np.arange(6), batch_size=2, max_shift=0, flip=False, seed=3)
    assert len(data) == 3
    for _ in range(2):
        batches = epoch_batches(data)
        labels = np.concatenate([y for _, y in batches])
        assert sorted(labels) == list(range(6))
        for x, y in batches:
            np.testing.assert_array_equal(x, IMAGES[y])


def test_every_image_is_a_shifted_or_mirrored_copy_of_its_original():
    data = AugmentedImages(IMAGES, np.arange(6), batch_size=3, max_shift=1, seed=0)
    seen_mirrored = []
    for _ in range(20):
        for x, y in epoch_batches(data):
            for image, label in zip(x, y, strict=True):
                options = candidates(IMAGES[label], 1, flip=True)
                matches = [i for i, c in enumerate(options) if np.array_equal(image, c)]
                assert matches, "an image is not one of the 18 shifted/mirrored copies"
                seen_mirrored.append(matches[0] % 2)
    # Half of the images are mirrored (240 draws: 0.5 ± 0.1 is > 3 std).
    assert 0.4 < np.mean(seen_mirrored) < 0.6


def test_a_shift_moves_the_content_by_that_many_pixels():
    image = np.zeros((1, 7, 7), "float32")
    image[0, 3, 3] = 1.0
    copies = np.repeat(image, 100, axis=0)
    data = AugmentedImages(copies, np.zeros(100), batch_size=100, max_shift=2, flip=False)
    offsets = set()
    for x, _ in epoch_batches(data) + epoch_batches(data):
        for shifted in x:
            (row,), (column,) = np.nonzero(shifted)
            offsets.add((int(row) - 3, int(column) - 3))
    assert offsets == {(a, b) for a in range(-2, 3) for b in range(-2, 3)}


def test_long_epochs_cycle_through_passes_and_seeds_repeat():
    labels = np.arange(6)
    data = AugmentedImages(IMAGES, labels, batch_size=4, steps_per_epoch=3, seed=1)
    first = epoch_batches(data)
    drawn = np.concatenate([y for _, y in first])
    assert np.bincount(drawn, minlength=6).tolist() == [2] * 6  # 12 draws = 2 passes
    again = epoch_batches(AugmentedImages(IMAGES, labels, batch_size=4, steps_per_epoch=3, seed=1))
    other = epoch_batches(AugmentedImages(IMAGES, labels, batch_size=4, steps_per_epoch=3, seed=2))
    for (x, y), (x2, y2) in zip(first, again, strict=True):
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_array_equal(y, y2)
    assert any(not np.array_equal(x, x2) for (x, _), (x2, _) in zip(first, other, strict=True))


def test_channels_last_images_keep_their_channels():
    images = np.random.default_rng(0).random((4, 6, 6, 3)).astype("float32")
    x, y = AugmentedImages(images, np.arange(4), batch_size=4, max_shift=1, seed=0)[0]
    assert x.shape == (4, 6, 6, 3)
    for image, label in zip(x, y, strict=True):
        per_channel = [candidates(images[label][..., c], 1, True) for c in range(3)]
        assert any(
            all(np.array_equal(image[..., c], per_channel[c][k]) for c in range(3))
            for k in range(18)
        )


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"images": IMAGES[0]}, "images"),
        ({"labels": np.arange(5)}, "images"),
        ({"batch_size": 0}, "batch_size=0"),
        ({"max_shift": 5}, "max_shift=5"),
        ({"max_shift": -1}, "max_shift=-1"),
        ({"flip": "yes"}, "flip='yes'"),
        ({"steps_per_epoch": 1.5}, "steps_per_epoch=1.5"),
    ],
)
def test_bad_arguments_raise_clear_errors(kwargs, message):
    arguments = {"images": IMAGES, "labels": np.arange(6), **kwargs}
    with pytest.raises(ValueError, match=f"Received:.*{message}"):
        AugmentedImages(**arguments)
