"""One module per `clusterkit` command: each turns its typed request into a run of the
features and stages below, prints the report and returns the exit status.

Layer: commands. Start at: check.py.
"""
