"""Facts from the nodes: the runner starts the collector (clusterkit/node/collector.py) on
each over its transport.

PROBE_SECONDS bounds one host's probe for every command that probes a cluster (`check`,
`launch`, `bench`); `node-check` keeps its own, shorter bound (Slurm kills a health check at
60 s), and each tool the collector runs has its own bound inside either.

Layer: features. Start at: stage.py.
"""

PROBE_SECONDS = 60.0
