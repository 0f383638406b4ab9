"""Repository tooling that is not part of the installed package."""
