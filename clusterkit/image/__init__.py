"""The `image` feature: reproducible Docker images (spec, lock, render, build, push) and the
`image` stage that finds the same pinned image present and runnable on every node.

Layer: features. Start at: stage.py.
"""
