"""Shared by every test: the Ctrl-C tests' SIGINT."""

from __future__ import annotations

import signal

# The Ctrl-C tests send SIGINT to the clusterkit they start, which keeps a SIGINT its parent
# ignores, as any program does. A suite started in the background of a shell without job
# control (`cmd &` in a script) inherits SIGINT ignored and would hand that on to every
# child: take it back here, as a shell on a terminal would start the suite.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
