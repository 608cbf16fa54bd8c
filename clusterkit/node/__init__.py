"""The node side: every program clusterkit runs on a node, and the runtime they share.

Nodes may lack clusterkit, and their Python may be as old as 3.8: what is here uses the
standard library only (the bench worker, torch too) and Python 3.8 syntax, and imports
nothing of clusterkit beyond this folder and the version
(tests/unit/architecture/test_layers.py: the "node" layer). The rest of clusterkit is the
control side; clusterkit/transport/ is the wire between them.

One module per program, shipped one way, by clusterkit/transport/nodescript.py: its text
with the prelude in place of `from clusterkit.node.prelude import ...`, sent over stdin
behind one bootstrap, answering with one framed JSON result (or a conversation, for net and
launch). The two that cannot go that way say why in their docstrings: srun_relay (sent as
`-c`: its stdin is the srun step's conversation with every node) and bench_worker (torch,
under torchrun).

  prelude       the shared runtime: result frame, bounded tools, file and interface readers
  (libraries)   code programs import beside the prelude, inserted after it, each once:
                kernellog, nvlink, probe_* (one fact or concern each), launch_*, bench_*
  collector     stage probe: the facts
  storage       stage storage: a token file in each shared path
  net           stage network: names, listeners and the mesh, in steps
  image         stage image: the image in the node's Docker engine
  launch        command launch: the node's share of the job
  srun_relay    the srun transport: every node's commands through one job step
  bench_worker  stage bench: one rank of the collective sweep

Layer: node. Start at: prelude.py.
"""
