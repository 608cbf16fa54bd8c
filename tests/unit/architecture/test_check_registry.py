"""The check-id registry and the docs' tables name the same ids, each on the same page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.checks.registry import CHECKS, describe

DOCS = Path(__file__).resolve().parents[3] / "docs"
PAGES = ("checks.md", "network.md", "bench.md", "images.md", "launch.md")
ROW = re.compile(r"^\| `([a-z]+\.[a-z0-9_-]+)` \|")


def documented(page: str) -> set[str]:
    """Ids in the first column of the page's check tables (the rows under an `Id` header)."""
    ids: set[str] = set()
    in_checks = False
    for line in (DOCS / page).read_text().splitlines():
        if line.lower().startswith("| id "):
            in_checks = True
        elif not line.startswith("|"):
            in_checks = False
        elif in_checks and (match := ROW.match(line)):
            ids.add(match[1])
    return ids


@pytest.mark.parametrize("page", PAGES)
def test_every_documented_id_is_registered_on_its_page(page: str) -> None:
    registered = {check_id for check_id, info in CHECKS.items() if info.doc == page}
    docs = documented(page)
    assert docs - registered == set(), f"documented in docs/{page} but not registered"
    assert registered - docs == set(), f"registered for docs/{page} but not documented there"


def test_every_registered_id_names_a_known_page_and_says_what_it_checks() -> None:
    assert {info.doc for info in CHECKS.values()} <= set(PAGES)
    assert all(info.what and len(info.what) < 90 for info in CHECKS.values())
    assert describe("net.mesh").endswith("(docs/network.md)")
    assert describe("made.up") == "made.up"


def test_checks_md_points_to_the_pages_of_the_stage_ids() -> None:
    text = (DOCS / "checks.md").read_text()
    assert all(f"({page})" in text for page in PAGES[1:])


def test_an_unregistered_id_is_a_type_error_where_the_finding_is_made(tmp_path: Path) -> None:
    """A Finding's id is a CheckId: mypy refuses a misspelled one, and an id computed from
    text, before any test runs; a registered id passes."""
    from mypy import api

    source = tmp_path / "made_up.py"
    source.write_text(
        "from clusterkit.checks.model import Finding, Status\n"
        "ok = Finding('net.mesh', Status.OK, 'registered')\n"
        "typo = Finding('net.mesch', Status.OK, 'misspelled')\n"
        "def computed(name: str) -> Finding:\n"
        "    return Finding(f'net.{name}', Status.OK, 'computed')\n"
    )
    out, _, status = api.run(
        [
            "--no-incremental",
            "--cache-dir=/dev/null",
            "--follow-imports=silent",
            "--python-version=3.10",
            str(source),
        ]
    )
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1
    assert [line.split(":")[1] for line in errors] == ["3", "5"], out
