"""The schema of the `clusterkit` inventory variable: every setting typed and checked at load.

It sits above the features it configures (the bench's sweep, the cost model's rates): its
rules check values with those features' own parsers. The typed sections themselves
(ClusterSettings and friends, inventory/model.py) sit below everything, where every layer
can read them; the loader (loader.py) reads an inventory and types the variable as it reads.

Layer: settings. Start at: loader.py.
"""

from clusterkit.settings.schema import VARIABLE, parse_settings

__all__ = ["VARIABLE", "parse_settings"]
