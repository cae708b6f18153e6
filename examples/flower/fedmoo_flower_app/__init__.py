"""A Flower App running fedmoo server rules (see examples/flower/pyproject.toml)."""
