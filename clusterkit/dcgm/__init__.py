"""The `dcgm` feature: NVIDIA DCGM's diagnostic (`dcgmi diag`) run on every node when asked
for (`--dcgm-level`), its answers read and judged.

Layer: features. Start at: stage.py.
"""
