"""Entry point of the `keras-attn` command.

It imports `keras_attn.cli` with the package's eager imports deferred, so that
`keras-attn --help` answers in well under a second without importing Keras.
"""

import os
import sys

_DEFER = "_KERAS_ATTN_DEFER_IMPORTS"


def main():
    """Runs `keras-attn` with `sys.argv`; returns the exit status."""
    os.environ[_DEFER] = "1"
    try:
        from keras_attn import cli
    finally:
        del os.environ[_DEFER]
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
