"""The `clusterkit` variable -> ClusterSettings: defaults, values, one value per cluster."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from clusterkit.errors import InventoryError
from clusterkit.inventory import Inventory
from clusterkit.inventory.model import (
    BenchSettings,
    ClusterSettings,
    CostSettings,
    Expectations,
    NetworkSettings,
    ProbeSettings,
)
from clusterkit.settings.loader import load_inventory
from clusterkit.settings.schema import SECTIONS, TOP_RULES, field_names
from tests.support.cli import run_cli

REPO = Path(__file__).resolve().parents[3]


def load(tmp_path: Path, text: str) -> Inventory:
    path = tmp_path / "inventory.yaml"
    path.write_text(textwrap.dedent(text))
    return load_inventory(path)


def error(tmp_path: Path, text: str) -> str:
    with pytest.raises(InventoryError) as caught:
        load(tmp_path, text)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_defaults_when_the_variable_is_absent(tmp_path: Path) -> None:
    inventory = load(tmp_path, "all:\n  hosts:\n    a:\n    b:\n")
    settings = inventory.settings
    assert (settings.master, settings.master_port, settings.rdzv_port) == (None, 29500, 29400)
    assert settings.interface is None and settings.image is None
    assert settings.image_run_args is None
    assert settings.expect.gpus_per_node is None
    assert (settings.bench, settings.network) == (BenchSettings(), NetworkSettings())
    assert (settings.probe, settings.cost) == (ProbeSettings(), CostSettings())
    assert inventory.master.name == "a"


def test_all_fields_and_typed_sections(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars:
            clusterkit:
              master: b
              master_port: 29600
              rdzv_port: "29401"
              interface: ib0
              image: reg.example.com/ml:1@sha256:abc
              expect:
                gpus_per_node: 4
                driver: ">=550"
                cuda: 12.10
                torch: 2.4.1
                nccl: 2.21.5
                python: 3.11
              image_run_args: [--shm-size, 8g, --network, host]
              bench:
                minbytes: 8M
                maxbytes: 2G
                stepfactor: 4
                iters: "50"
                warmup_iters: 0
                datatype: bfloat16
                gate_size: 1G
                min_busbw: 300
                timeout: 600
                join_timeout: 90.5
              network: {extra_ports: [8080, 9000], connect_timeout: 5}
              cost: {hours: 72, preempt_rate: "5-10%", capacity_wait_mean: off, hazard: weibull:0.7}
              probe: {timeout: 20, import_torch: true}
          hosts:
            a:
            b:
              ansible_host: 10.0.0.2
        """,
    )
    settings = inventory.settings
    assert (settings.master, settings.master_port, settings.rdzv_port) == ("b", 29600, 29401)
    assert (settings.interface, settings.image) == ("ib0", "reg.example.com/ml:1@sha256:abc")
    expect = settings.expect
    assert (expect.gpus_per_node, expect.driver, expect.cuda) == (4, ">=550", "12.10")
    assert (expect.torch, expect.nccl, expect.python) == ("2.4.1", "2.21.5", "3.11")
    assert settings.image_run_args == ("--shm-size", "8g", "--network", "host")
    assert settings.bench == BenchSettings(
        minbytes="8M",
        maxbytes="2G",
        stepfactor=4,
        iters=50,
        warmup_iters=0,
        datatype="bfloat16",
        gate_size="1G",
        min_busbw=300.0,
        timeout=600.0,
        join_timeout=90.5,
    )
    assert settings.network == NetworkSettings(extra_ports=(8080, 9000), connect_timeout=5.0)
    assert settings.probe == ProbeSettings(timeout=20.0, import_torch=True)
    assert settings.cost == CostSettings(
        hours=72.0, preempt_rate="5-10%", capacity_wait_mean="off", hazard="weibull:0.7"
    )
    assert inventory.master.name == "b"


def test_master_may_be_an_address_of_a_host_but_not_an_unknown_name(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master: 10.0.0.2}}
          hosts: {a: null, b: {ansible_host: 10.0.0.2}}
        """,
    )
    assert inventory.master.name == "b"
    # A name outside the inventory used to be accepted, and the rendezvous then tested on
    # the first host instead (issue 13, item 7): it is refused when the file is read.
    with pytest.raises(
        InventoryError, match=re.escape("clusterkit.master: 'head.dns' is not a host")
    ):
        load(tmp_path, "all:\n  vars: {clusterkit: {master: head.dns}}\n  hosts: {a: }\n")


def test_settings_resolve_with_precedence_and_must_agree(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master_port: 1}}
          children:
            gpu:
              vars: {clusterkit: {master_port: 2}}
              hosts: {a: null, b: null}
        """,
    )
    assert inventory.settings.master_port == 2
    message = error(
        tmp_path,
        """
        all:
          vars: {clusterkit: {master_port: 1}}
          children:
            gpu:
              vars: {clusterkit: {master_port: 2}}
              hosts: {a: null}
          hosts: {b: null}
        """,
    )
    assert "inventory.yaml:3: clusterkit: differs between hosts 'a' and 'b'" in message
    assert "all.vars" in message


@pytest.mark.parametrize(
    ("block", "line", "key", "problem"),
    [
        ("{expect: {gpu_per_node: 8}}", 4, "clusterkit.expect.gpu_per_node", "did you mean"),
        ("{master_prot: 1}", 4, "clusterkit.master_prot", "unknown key"),
        ("{master_port: 0}", 4, "clusterkit.master_port", "integer 1..65535"),
        ("{rdzv_port: 65536}", 4, "clusterkit.rdzv_port", "integer 1..65535"),
        ("{master_port: http}", 4, "clusterkit.master_port", "integer"),
        ("{master_port: true}", 4, "clusterkit.master_port", "integer"),
        ("{master: [a, b]}", 4, "clusterkit.master", "must be a string"),
        ("{interface: ''}", 4, "clusterkit.interface", "must not be empty"),
        ('{interface: "eth\\0"}', 4, "clusterkit.interface", "'eth\\x00' is not"),
        ('{interface: "eth0\\e[2J"}', 4, "clusterkit.interface", "not an interface name"),
        ("{interface: ../../x}", 4, "clusterkit.interface", "not an interface name"),
        ("{interface: 'eth0 eth1'}", 4, "clusterkit.interface", "not an interface name"),
        ("{interface: enp1s0f0np0-extra}", 4, "clusterkit.interface", "at most 15"),
        ("{interface: '..'}", 4, "clusterkit.interface", "not an interface name"),
        ("{interface: 'eth0,,ib0'}", 4, "clusterkit.interface", "not an interface name"),
        ("{interface: 'ib0:x'}", 4, "clusterkit.interface", "not an interface name"),
        ("{interface: '^'}", 4, "clusterkit.interface", "not an interface name"),
        ("{slurm: {srun_args: [--distribution=cyclic]}}", 4, "clusterkit.slurm.srun_args", "--dis"),
        ("{expect: {gpus_per_node: many}}", 4, "clusterkit.expect.gpus_per_node", "integer"),
        ("{expect: {driver: {min: 550}}}", 4, "clusterkit.expect.driver", "must be a string"),
        ("{expect: [driver]}", 4, "clusterkit.expect", "must be a mapping"),
        ("{bench: fast}", 4, "clusterkit.bench", "must be a mapping"),
        ("{bench: {min_busbw: fast}}", 4, "clusterkit.bench.min_busbw", "above 0 (GB/s)"),
        ("{bench: {min_busbw: 0}}", 4, "clusterkit.bench.min_busbw", "above 0"),
        ("{bench: {min_busbw: .nan}}", 4, "clusterkit.bench.min_busbw", "above 0"),
        ("{bench: {maxbytes: lots}}", 4, "clusterkit.bench.maxbytes", "K/M/G suffix"),
        ("{bench: {minbytes: 64M, maxbytes: 1M}}", 4, "clusterkit.bench.minbytes", "larger"),
        ("{bench: {iters: 0}}", 4, "clusterkit.bench.iters", "integer 1..1000000"),
        ("{bench: {iters: 2.5}}", 4, "clusterkit.bench.iters", "integer"),
        ("{bench: {datatype: fp8}}", 4, "clusterkit.bench.datatype", "one of"),
        ("{bench: {timeout: -1}}", 4, "clusterkit.bench.timeout", "above 0 (seconds)"),
        ("{bench: {size_mb: 256}}", 4, "clusterkit.bench.size_mb", "unknown key"),
        ("{bench: {min_bus_bw: 5}}", 4, "clusterkit.bench.min_bus_bw", "did you mean"),
        ("{network: {extra_ports: 80}}", 4, "clusterkit.network.extra_ports", "list of TCP"),
        ("{network: {extra_ports: [0]}}", 4, "clusterkit.network.extra_ports", "1..65535"),
        ("{network: {connect_timeout: no}}", 4, "clusterkit.network.connect_timeout", "number"),
        ("{network: {timeout_s: 5}}", 4, "clusterkit.network.timeout_s", "unknown key"),
        ("{probe: {import_torch: 'yes'}}", 4, "clusterkit.probe.import_torch", "true or false"),
        ("{probe: {timeout: 0}}", 4, "clusterkit.probe.timeout", "above 0"),
        ("{probe: {timeout_s: 20}}", 4, "clusterkit.probe.timeout_s", "did you mean"),
        ("{cost: {hourly: 2.5}}", 4, "clusterkit.cost.hourly", "unknown key"),
        ("{cost: {hours: 0}}", 4, "clusterkit.cost.hours", "above 0 (hours)"),
        ("{cost: {correlation: 0.5}}", 4, "clusterkit.cost.correlation", "at least 1"),
        ("{cost: {preempt_rate: often}}", 4, "clusterkit.cost.preempt_rate", "advisor bucket"),
        ("{cost: {preempt_rate: 150%}}", 4, "clusterkit.cost.preempt_rate", "below 100%"),
        ("{cost: {hazard: gamma}}", 4, "clusterkit.cost.hazard", "exponential, weibull:K"),
        ("{cost: {capacity_wait_mean: never}}", 4, "clusterkit.cost.capacity_wait_mean", "off"),
        ("{image_run_args: --ipc=host}", 4, "clusterkit.image_run_args", "must be a list"),
        ("{image_run_args: [[a]]}", 4, "clusterkit.image_run_args", "must be a string"),
        ("{image_run_arg: []}", 4, "clusterkit.image_run_arg", "did you mean"),
        ("{slurm: {srun_args: --gres=gpu:8}}", 4, "clusterkit.slurm.srun_args", "must be a list"),
        ("{slurm: {srun_args: [-G8]}}", 4, "clusterkit.slurm.srun_args", "one long option"),
        ("{slurm: {srun_args: ['--gres gpu:8 -x']}}", 4, "clusterkit.slurm.srun_args", "long"),
        ('{slurm: {srun_args: ["--comment=a\\nb"]}}', 4, "clusterkit.slurm.srun_args", "control"),
        ("{slurm: {srun_args: [--time=5]}}", 4, "clusterkit.slurm.srun_args", "sets --time"),
        ("{slurm: {srun_args: [--nodel=n1]}}", 4, "clusterkit.slurm.srun_args", "--nodelist"),
        ("{slurm: {srun_arg: []}}", 4, "clusterkit.slurm.srun_arg", "did you mean"),
        ("[master]", 4, "clusterkit", "must be a mapping"),
        ("{image: '{{ image }}'}", 4, "clusterkit.image", "Jinja template"),
    ],
)
def test_invalid_settings_name_the_key_path(
    tmp_path: Path, block: str, line: int, key: str, problem: str
) -> None:
    message = error(tmp_path, f"all:\n  hosts: {{a: }}\n  vars:\n    clusterkit: {block}\n")
    assert f"inventory.yaml:{line}: {key}: " in message
    assert problem in message


def test_nested_key_errors_point_at_their_own_line(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        all:
          hosts: {a: }
          vars:
            clusterkit:
              master: a
              expect:
                gpus_per_node: 8
                drivers: ">=550"
        """,
    )
    assert "inventory.yaml:9: clusterkit.expect.drivers: unknown key" in message
    assert "did you mean clusterkit.expect.driver?" in message


def test_a_section_error_names_the_line_of_its_own_key(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        all:
          hosts: {a: }
          vars:
            clusterkit:
              master: a
              bench:
                maxbytes: 64M
                min_busbw: fast
        """,
    )
    assert (
        "inventory.yaml:9: clusterkit.bench.min_busbw: must be a number above 0 (GB/s)" in message
    )
    assert "'fast'" in message


def test_unknown_section_key_suggests_the_known_one(tmp_path: Path) -> None:
    message = error(
        tmp_path,
        """
        all:
          hosts: {a: }
          vars:
            clusterkit:
              network:
                connect_timeout: 2
                extra_port: [8080]
        """,
    )
    assert "inventory.yaml:8: clusterkit.network.extra_port: unknown key" in message
    assert "did you mean clusterkit.network.extra_ports?" in message


def test_an_unknown_key_with_nothing_close_lists_the_known_ones(tmp_path: Path) -> None:
    message = error(tmp_path, "all:\n  hosts: {a: }\n  vars:\n    clusterkit: {probe: {zzz: 1}}\n")
    assert "clusterkit.probe.zzz: unknown key (known: timeout, import_torch)" in message


def test_errors_in_group_vars_files_name_that_file(tmp_path: Path) -> None:
    (tmp_path / "group_vars").mkdir()
    (tmp_path / "group_vars" / "all.yaml").write_text(
        "clusterkit:\n  cost:\n    spot_price: free\n"
    )
    message = error(tmp_path, "all:\n  hosts: {a: }\n")
    assert "group_vars/all.yaml:3: clusterkit.cost.spot_price: must be a number above 0" in message


def test_srun_args_are_kept_in_order(tmp_path: Path) -> None:
    block = "{slurm: {srun_args: ['--gres=gpu:8', --exclusive, '--comment=pre flight']}}"
    inventory = load(tmp_path, f"all:\n  hosts: {{a: }}\n  vars:\n    clusterkit: {block}\n")
    assert inventory.settings.slurm.srun_args == (
        "--gres=gpu:8",
        "--exclusive",
        "--comment=pre flight",
    )


def test_every_field_of_every_section_has_a_rule() -> None:
    """A field without a rule could never be set; a rule without a field would crash."""
    for model, rules in SECTIONS.values():
        assert field_names(model) == set(rules), model.__name__
    assert field_names(ClusterSettings) == set(TOP_RULES) | set(SECTIONS)
    assert field_names(Expectations) == set(SECTIONS["expect"][1])


def _leaf_keys() -> set[str]:
    """Every key that takes a value: top-level ones and each section's."""
    return {f"clusterkit.{name}" for name in TOP_RULES} | {
        f"clusterkit.{section}.{key}" for section, (_, rules) in SECTIONS.items() for key in rules
    }


def _known_keys() -> set[str]:
    return _leaf_keys() | {f"clusterkit.{section}" for section in SECTIONS}


def test_keys_named_in_the_docs_are_accepted() -> None:
    """Every `clusterkit.<key>` the docs name is a key the loader accepts."""
    texts = [REPO / "README.md", REPO / "inventory.example.yaml", *sorted(REPO.glob("docs/*.md"))]
    pattern = re.compile(r"`(clusterkit\.[a-z_]+(?:\.[a-z_]+)?)`")
    named = {match for path in texts for match in pattern.findall(path.read_text())}
    assert "clusterkit.image_run_args" in named
    assert named <= _known_keys(), sorted(named - _known_keys())


def test_the_settings_reference_lists_every_key_and_no_other() -> None:
    rows = re.findall(r"^\| `([a-z_.]+)` \|", (REPO / "docs/settings.md").read_text(), re.M)
    assert len(rows) == len(set(rows)), "a key is listed twice"
    assert {f"clusterkit.{row}" for row in rows} == _leaf_keys()


@pytest.mark.parametrize(
    "value", ["eth0", "=eth0", "^docker,lo", "^=eth1", "ib0:1", "ib", "bond0.100", "enp1s0f0np0"]
)
def test_interface_takes_nccl_syntax(tmp_path: Path, value: str) -> None:
    inventory = load(
        tmp_path, f"all:\n  hosts: {{a: }}\n  vars:\n    clusterkit: {{interface: '{value}'}}\n"
    )
    assert inventory.settings.interface == value


def test_a_bad_interface_is_one_line_naming_the_file_and_setting(tmp_path: Path) -> None:
    """A NUL in the interface once passed the load and showed up as a lost node."""
    path = tmp_path / "inventory.yaml"
    path.write_text('all:\n  hosts: {node4: }\n  vars:\n    clusterkit: {interface: "eth\\0"}\n')
    done = run_cli(["check", str(path)])
    assert done.status == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert f"{path}:4: clusterkit.interface: " in done.stderr and "node4" not in done.stderr
