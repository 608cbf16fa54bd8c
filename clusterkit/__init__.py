"""clusterkit: decide whether a multi-node PyTorch job can go ahead, and make it so."""

# The one place the version is written: pyproject.toml reads it (setuptools dynamic version),
# and the bench worker, shipped alone to nodes, imports it when clusterkit is installed.
__version__ = "0.1.0"
