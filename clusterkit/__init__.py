"""clusterkit: decide whether a multi-node PyTorch job can go ahead, and make it so."""

__version__ = "0.1.0"
