"""Slurm as a place clusterkit runs: targets from an allocation, the srun transport, drains.

Layer: stages. Start at: check.py.
"""
