"""Losses of keras_attn."""

from keras_attn.losses.gaussian_negative_log_likelihood import GaussianNegativeLogLikelihood
from keras_attn.losses.sampled_binary_crossentropy import SampledBinaryCrossentropy

__all__ = ["GaussianNegativeLogLikelihood", "SampledBinaryCrossentropy"]
