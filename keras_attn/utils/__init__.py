"""Small utilities shared by the command line, reproductions and notebooks."""

from keras_attn.utils.results import is_small_run, write_results

__all__ = ["is_small_run", "write_results"]
