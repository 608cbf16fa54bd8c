"""Ansible YAML inventories -> Inventory: hosts with connection parameters, cluster settings."""

from clusterkit.inventory.limit import select_hosts
from clusterkit.inventory.loader import load_inventory, local_inventory
from clusterkit.inventory.model import ClusterSettings, Expectations, Host, Inventory

__all__ = [
    "ClusterSettings",
    "Expectations",
    "Host",
    "Inventory",
    "load_inventory",
    "local_inventory",
    "select_hosts",
]
