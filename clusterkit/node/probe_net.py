"""Network facts: interfaces with their addresses, the main table's routes, and RDMA ports
with their error counters from sysfs.
"""

import json
import os
import re

from clusterkit.node.prelude import ToolError, read_interfaces, read_text, run_tool

MAX_ROUTES = 256  # a node's own routes, not a router's full table


def collect_network(options):
    """Per interface: MTU, operstate, kind, ip's flags and addresses as "address/prefixlen";
    the main table's IPv4 routes (destination, interface), so the checks can tell which
    interface carries the traffic to the master."""
    interfaces = {}  # type: dict[str, dict]
    listed, error = read_interfaces(5)
    for entry in listed:
        iface = interfaces[entry["name"]] = {
            "mtu": entry["mtu"],
            "state": entry["operstate"],
            "kind": entry.get("kind"),
            "addresses": ["%s/%s" % (a["address"], a["prefixlen"]) for a in entry["addresses"]],
        }
        if entry["flags"] is not None:
            iface["flags"] = entry["flags"]
    facts = {"interfaces": interfaces, "routes": read_routes()}  # type: dict[str, object]
    if error:
        facts["error"] = error
    return facts


def read_routes():
    # type: () -> list[dict] | None
    """The first MAX_ROUTES IPv4 routes of the main table as {dst, dev}; None if unreadable."""
    try:
        listed = json.loads(run_tool(["ip", "-j", "-4", "route", "show"], 5) or "[]")
        return [
            {"dst": str(item.get("dst")), "dev": str(item.get("dev"))}
            for item in listed[:MAX_ROUTES]
            if isinstance(item, dict) and item.get("dst") and item.get("dev")
        ]
    except (ToolError, ValueError, TypeError):
        return None


IB_COUNTERS = ("link_downed", "symbol_error", "port_rcv_errors", "link_error_recovery")


def _sysfs_label(text):
    """`5: LinkUp` -> `LinkUp`; None for a missing file."""
    return text.split(":")[-1].strip() if text else None


def _ib_counters(directory):
    """The port's error counters (since the driver loaded or they were cleared)."""
    counters = {}
    for name in IB_COUNTERS:
        value = (read_text(os.path.join(directory, name)) or "").strip()
        if value.isdigit():
            counters[name] = int(value)
    return counters


def collect_infiniband(options):
    """RDMA ports from sysfs (no tools): state, physical state, rate, error counters. The
    root is `options["sysfs"]` so tests read a tree laid out like /sys."""
    base = os.path.join(options.get("sysfs", "/sys"), "class", "infiniband")
    if not os.path.isdir(base):
        return {"devices": []}
    devices = []
    for name in sorted(os.listdir(base)):
        ports = []
        ports_dir = os.path.join(base, name, "ports")
        for port in sorted(os.listdir(ports_dir)) if os.path.isdir(ports_dir) else []:
            path = os.path.join(ports_dir, port)
            rate = read_text(os.path.join(path, "rate")) or ""
            match = re.match(r"([\d.]+) Gb/sec", rate)
            ports.append(
                {
                    "port": port,
                    "state": (read_text(os.path.join(path, "state")) or "").split(":")[-1].strip(),
                    "phys_state": _sysfs_label(read_text(os.path.join(path, "phys_state"))),
                    "rate_gbps": float(match.group(1)) if match else None,
                    "rate": rate.strip()[:40] or None,
                    "link_layer": read_text(os.path.join(path, "link_layer")),
                    "counters": _ib_counters(os.path.join(path, "counters")),
                }
            )
        devices.append({"name": name, "ports": ports})
    return {"devices": devices}
