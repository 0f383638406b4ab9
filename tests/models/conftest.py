import keras
import pytest


@pytest.fixture
def zero_initialised(monkeypatch):
    """Skips random initialisation: building the big models only to count them stays cheap."""
    monkeypatch.setattr(
        keras.initializers.GlorotUniform,
        "__call__",
        lambda self, shape, dtype=None: keras.ops.zeros(shape, dtype),
    )
