"""The stage contract: what a stage is (`Stage`, `StageResult`), the stages' names in report
order, and the `Session` the stages of one command share. Features implement it in their
own `stage.py`; stages/ composes them.

Layer: stage contract. Start at: stage.py.
"""
