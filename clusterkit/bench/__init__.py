"""The `bench` feature: real collectives (all_reduce and the others asked for) timed under
torchrun on every node at once, each node alone (--per-node) and groups in rounds
(--find-slow), judged against the bus-bandwidth thresholds.

Layer: features. Start at: stage.py.
"""
