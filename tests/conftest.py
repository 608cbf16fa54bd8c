"""Shared by every test: findings emitted by clusterkit carry registered check ids."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support import check_ids

check_ids.install()


@pytest.fixture(autouse=True)
def _registered_check_ids() -> Iterator[None]:
    check_ids.take()
    yield
    seen = check_ids.take()
    assert not seen, (
        "check ids emitted but not registered in clusterkit/checks/registry.py (and "
        f"documented in docs/): {seen}"
    )
