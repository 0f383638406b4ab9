"""Layouts for training keras_attn models on several devices with `keras.distribution`."""

from keras_attn.distribution.head_parallel_layout_map import (
    check_head_parallel,
    head_parallel_layout_map,
)

__all__ = ["check_head_parallel", "head_parallel_layout_map"]
