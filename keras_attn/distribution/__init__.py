"""Layouts for training keras_attn models on several devices with `keras.distribution`."""

from keras_attn.distribution.head_parallel_layout_map import head_parallel_layout_map

__all__ = ["head_parallel_layout_map"]
