"""fedmoo: fair and robust federated learning as multi-objective optimisation."""

__version__ = "0.1.0"
