"""Errors raised by the offline data loaders."""


class DatasetNotFoundError(FileNotFoundError):
    """Raised when a data source is not installed or cannot be found.

    The loaders in `keras_attn.datasets` never download anything. When the
    files they read are missing, they raise this error with a message that
    says exactly how to install the missing source (a Debian package, a pip
    package, or a folder the user supplies).

    It subclasses `FileNotFoundError`, so code that already catches missing
    files keeps working.
    """


class CorruptDataError(ValueError):
    """Raised when a data file is truncated, malformed or holds unsafe content.

    The loaders check what they read against the known size of each data
    set (rows, classes) and the range of its values, and name the file (and
    the line, for text files) at fault, rather than returning part of the
    data or values that wrapped around.

    It subclasses `ValueError`, so code that already catches bad files keeps
    working.
    """
