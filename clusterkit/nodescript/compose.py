"""Node-script composition, kept importable here: it lives in clusterkit/transport/compose.py,
the lower layer, since the srun transport ships its relay with it."""

from clusterkit.transport.compose import PRELUDE, compose, node_script, prelude_source

__all__ = ["PRELUDE", "compose", "node_script", "prelude_source"]
