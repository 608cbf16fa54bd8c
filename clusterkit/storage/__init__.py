"""Shared storage across nodes: a token written on the master is read back on every node.

`clusterkit.shared_paths` names the folders a job relies on being the same everywhere (the
checkpoint directory rank 0 writes and every rank loads). stage.py makes three bounded round
trips with clusterkit/node/storage.py: write a token file on the master, read it on every
node (with the free space there), remove it on the master. checks.py gives the verdict, a
pure function of what came back.

Layer: features. Start at: stage.py.
"""
