"""Data files shipped with clusterkit, each with its sources: the CUDA/driver and torch
tables, the Xid catalog, bus-bandwidth thresholds and the price snapshot.

Layer: base. Start at: cuda_driver.json.
"""
