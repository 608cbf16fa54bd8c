"""The `network` feature: the paths torch will use (MASTER_ADDR, the rendezvous and NCCL
ports, interfaces, firewalls), tried between node pairs, and who blocks them.

Layer: features. Start at: stage.py.
"""
