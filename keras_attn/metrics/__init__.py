"""Metrics of keras_attn."""

from keras_attn.metrics.rho_risk import RhoRisk

__all__ = ["RhoRisk"]
