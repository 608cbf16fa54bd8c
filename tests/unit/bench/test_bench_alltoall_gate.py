"""The alltoall gate against NVIDIA's published alltoall figures (sources in
clusterkit/data/busbw_thresholds.json): within a node 0.77-1.0 x the all_reduce figure; across
nodes one NIC's worth, since alltoall cannot spread over a node's NICs."""

from __future__ import annotations

from clusterkit.bench import thresholds

H100_NODE = {"gpu_model": "NVIDIA H100 80GB HBM3", "gpus_per_node": 8, "nvlink": True}
NDR_HEALTHY = 46.0  # GB/s busbw of one 400G NIC, the table's low bound (48-49 published)


def per_collective(
    fabric: thresholds.Fabric, flag: float | None = None
) -> dict[str, thresholds.Threshold]:
    reduce = thresholds.resolve_threshold(
        flag=flag, environ={}, inventory_min_busbw=None, fabric=fabric, backend="nccl"
    )
    return {name: thresholds.collective_threshold(reduce, name)
            for name in ("all_reduce", "all_gather", "alltoall")}  # fmt: skip


def test_across_nodes_a_healthy_single_nic_alltoall_passes_the_default_gate() -> None:
    """Two 8x H100 nodes with eight 400G InfiniBand ports each: all_reduce is gated at 0.9 x
    365 (NVLink, just under the eight NICs' 8 x 46); a healthy alltoall reaches one NIC's
    ~46-49 GB/s, which half the all_reduce gate (164.25) would have failed."""
    fabric = thresholds.Fabric(nodes=2, **H100_NODE, rdma_link_layer="InfiniBand",
                         rdma_port_rates=(400.0,) * 8)  # fmt: skip
    found = per_collective(fabric)
    assert found["all_reduce"].value == 328.5 and found["all_reduce"].nics_per_node == 8
    assert found["all_gather"].value == 328.5
    alltoall = found["alltoall"]
    assert alltoall.value is not None and round(alltoall.value, 2) == 20.53
    assert alltoall.value < thresholds.NCCL_TESTS_RULE * NDR_HEALTHY
    assert "/ 8 RDMA ports" in alltoall.detail and alltoall.source == "fabric default"


def test_a_users_all_reduce_threshold_is_spread_the_same_way() -> None:
    fabric = thresholds.Fabric(nodes=4, **H100_NODE, rdma_link_layer="Ethernet",
                         rdma_port_rates=(400.0,) * 4)  # fmt: skip
    alltoall = per_collective(fabric, flag=300.0)["alltoall"]
    assert alltoall.value == 37.5 and alltoall.source == "--min-busbw"
    assert (
        alltoall.detail == "0.5 x (--min-busbw 300) / 4 RDMA ports (one NIC's worth per GPU)"
        " for alltoall"
    )


def test_within_a_node_alltoall_stays_under_the_published_ratio() -> None:
    """One 8x H100 node: the ring figure (365) gates all_reduce; NVIDIA's alltoall target is
    the same ~370, or 1/1.3 of an NVLink-SHARP all_reduce: 0.5 stays below both."""
    found = per_collective(thresholds.Fabric(nodes=1, **H100_NODE, rdma_link_layer=None,
                                   rdma_port_rates=()))  # fmt: skip
    assert found["all_reduce"].value == 328.5 and found["all_reduce"].nics_per_node == 0
    assert found["alltoall"].value == 164.25 < 328.5 / 1.3
    assert "RDMA" not in found["alltoall"].detail


def test_across_nodes_over_tcp_only_the_factor_applies() -> None:
    fabric = thresholds.Fabric(nodes=2, **H100_NODE, rdma_link_layer=None, rdma_port_rates=())
    found = per_collective(fabric)
    assert found["alltoall"].value == round(found["all_reduce"].value * 0.5, 4)
