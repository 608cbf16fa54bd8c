"""Cost's input resolution over typed inputs (clusterkit/cost/inputs.py): the flags over the
inventory's `clusterkit.cost` block over the defaults, each value named by where it came from
when it is refused. No file is read: the inventory arrives as its host count and block."""

from __future__ import annotations

import pytest

from clusterkit.cost.inputs import CostRequest, InventoryCost, build
from clusterkit.errors import UsageError
from clusterkit.inventory.model import CostSettings

BLOCK = CostSettings(
    hours=10, on_demand_price=98, spot_price=40, preempt_rate="0.01", checkpoint_min=7
)


def test_a_flag_wins_over_the_inventory_and_the_rest_comes_from_it() -> None:
    inventory = InventoryCost("inventory.yaml", 4, BLOCK)
    result = build(CostRequest(CostSettings(hours=24), inventory=inventory, trials=0))
    assert result.scenario.nodes == 4  # the inventory's hosts
    assert result.scenario.hours == 24  # the flag, not the inventory's 10
    assert result.scenario.checkpoint_h == pytest.approx(7 / 60)  # the inventory's
    assert result.scenario.on_demand_price == 98


def test_the_node_flag_wins_over_the_inventory_host_count() -> None:
    inventory = InventoryCost("inventory.yaml", 4, BLOCK)
    result = build(CostRequest(nodes=16, inventory=inventory, trials=0))
    assert result.scenario.nodes == 16


def test_a_bad_inventory_value_is_refused_by_its_key() -> None:
    block = CostSettings(hours=-1, on_demand_price=98, spot_price=40, preempt_rate="0.01")
    with pytest.raises(UsageError) as raised:
        build(CostRequest(inventory=InventoryCost("inv.yaml", 2, block), trials=0))
    assert "inventory inv.yaml: clusterkit.cost.hours -1: must be above 0" in str(raised.value)


def test_without_a_node_count_the_request_is_refused() -> None:
    with pytest.raises(UsageError, match="no node count"):
        build(CostRequest(BLOCK, trials=0))
