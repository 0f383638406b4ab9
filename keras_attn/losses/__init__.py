"""Losses of keras_attn."""

from keras_attn.losses.gaussian_negative_log_likelihood import GaussianNegativeLogLikelihood

__all__ = ["GaussianNegativeLogLikelihood"]
