"""deepflow: cross-stack pathfinding for distributed AI systems."""

__version__ = "0.1.0"
CONTRACT_VERSION = 1

__all__ = ["CONTRACT_VERSION", "__version__"]
