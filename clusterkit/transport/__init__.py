"""How clusterkit reaches a node: one Transport contract (base.py) over SSH (paramiko, strict
host keys), srun and the local machine, bounded by deadlines, and how node programs travel.

Layer: wire. Start at: base.py.
"""
