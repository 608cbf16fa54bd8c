"""Stand-in for nvme-cli's `nvme` on test nodes, which have no NVMe drive.

    fake_nvme.py STATE_JSON [nvme arguments...]

It answers `nvme list -o json` and `nvme smart-log /dev/nvmeXnY -o json` as nvme-cli 2.x
prints them (tests/fixtures/nvme/README.md: one json-c pretty document, `"key":value`, the
keys in nvme-cli's order), from a per-node state file:
{"devices": [{"name": "nvme0", "model": ..., "serial": ..., "smart": {key: value, ...}}]};
a device's "smart" values replace the healthy defaults below. Anything else is refused as
nvme-cli refuses it. Stdlib only, Python 3.8 syntax: it runs under the node's python3.
"""

from __future__ import annotations

import json
import sys

# nvme-cli 2.x `json_smart_log` keys in its order, with a healthy drive's values (those of
# tests/fixtures/nvme/smart-log-2.x-verbose.json, which is a real one).
SMART_DEFAULTS = (
    ("critical_warning", 0),
    ("temperature", 308),
    ("avail_spare", 100),
    ("spare_thresh", 10),
    ("percent_used", 2),
    ("endurance_grp_critical_warning_summary", 0),
    ("data_units_read", 21331123),
    ("data_units_written", 129415397),
    ("host_read_commands", 342132364),
    ("host_write_commands", 2576184016),
    ("controller_busy_time", 7856),
    ("power_cycles", 683),
    ("power_on_hours", 12993),
    ("unsafe_shutdowns", 97),
    ("media_errors", 0),
    ("num_err_log_entries", 1860),
    ("warning_temp_time", 0),
    ("critical_comp_time", 0),
    ("temperature_sensor_1", 308),
    ("thm_temp1_trans_count", 0),
    ("thm_temp2_trans_count", 0),
    ("thm_temp1_total_time", 0),
    ("thm_temp2_total_time", 0),
)
SIZE = 3840755982336  # a 3.84 TB drive's bytes


def document(value: object) -> str:
    """One JSON document as json-c's JSON_C_TO_STRING_PRETTY writes it, and the newline."""
    return json.dumps(value, indent=2, separators=(",", ":")) + "\n"


def list_devices(state: dict) -> str:
    """`nvme list -o json`: one entry per namespace (one per drive here)."""
    devices = []
    for number, device in enumerate(state.get("devices", [])):
        devices.append(
            {
                "NameSpace": 1,
                "DevicePath": f"/dev/{device['name']}n1",
                "GenericPath": f"/dev/ng{number}n1",
                "Firmware": device.get("firmware", "GDC5302Q"),
                "ModelNumber": device.get("model", "SAMSUNG MZQL23T8HCLS-00A07"),
                "SerialNumber": device.get("serial", f"S64HNE0R{number:06d}"),
                "UsedBytes": SIZE // 4,
                "MaximumLBA": SIZE // 512,
                "PhysicalSize": SIZE,
                "SectorSize": 512,
            }
        )
    return document({"Devices": devices})


def smart_log(state: dict, path: str) -> str | None:
    """`nvme smart-log PATH -o json`; None when no drive has that path."""
    for device in state.get("devices", []):
        if path in (f"/dev/{device['name']}", f"/dev/{device['name']}n1"):
            values = dict(SMART_DEFAULTS)
            values.update(device.get("smart", {}))
            return document(values)
    return None


def run(state: dict, args: list) -> int:
    json_output = args[-2:] == ["-o", "json"] or "--output-format=json" in args
    if args[:1] == ["list"] and json_output:
        sys.stdout.write(list_devices(state))
        return 0
    if args[:1] == ["smart-log"] and len(args) >= 2 and json_output:
        text = smart_log(state, args[1])
        if text is None:
            sys.stderr.write(f"Failed to open {args[1]}: No such file or directory\n")
            return 1
        sys.stdout.write(text)
        return 0
    sys.stderr.write(f"ERROR: Invalid sub-command '{' '.join(args)}'\n")
    return 1


def main() -> int:
    with open(sys.argv[1]) as handle:
        state = json.load(handle)
    return run(state, sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
