"""Shared by every test: findings emitted by clusterkit carry registered check ids."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from tests.support import check_ids

check_ids.install()

# The Ctrl-C tests send SIGINT to the clusterkit they start, which keeps a SIGINT its parent
# ignores, as any program does. A suite started in the background of a shell without job
# control (`cmd &` in a script) inherits SIGINT ignored and would hand that on to every
# child: take it back here, as a shell on a terminal would start the suite.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True)
def _registered_check_ids() -> Iterator[None]:
    check_ids.take()
    yield
    seen = check_ids.take()
    assert not seen, (
        "check ids emitted but not registered in clusterkit/checks/registry.py (and "
        f"documented in docs/): {seen}"
    )
