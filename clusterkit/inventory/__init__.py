"""Ansible inventories as a model: hosts with connection parameters, the cluster settings' types,
and the readers of each source format. Reading one into an Inventory, typed by the settings
schema, starts in clusterkit.settings.loader (load_inventory).

Layer: wire. Start at: model.py.
"""

from clusterkit.inventory.limit import select_hosts
from clusterkit.inventory.model import ClusterSettings, Expectations, Host, Inventory

__all__ = [
    "ClusterSettings",
    "Expectations",
    "Host",
    "Inventory",
    "select_hosts",
]
