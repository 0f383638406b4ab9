"""The grid of positions a sliding window takes over an image."""


def window_grid(
    height: int, width: int, kernel_size: int, stride: int, padding: int = 0
) -> tuple[int, int]:
    """`(rows, columns)` of the positions of a square window sliding over an image.

    Each side is `(size + 2 * padding - kernel_size) // stride + 1`, the
    output size of a convolution; patches of size `p` are the window
    `kernel_size=stride=p`.

    Args:
        height: int, image height.
        width: int, image width.
        kernel_size: int, side of the window.
        stride: int, step between windows.
        padding: int, zeros added on each side.

    Returns:
        A tuple of two ints.

    Example:

    >>> window_grid(224, 224, kernel_size=7, stride=4, padding=2)
    (56, 56)
    """
    return tuple((size + 2 * padding - kernel_size) // stride + 1 for size in (height, width))
