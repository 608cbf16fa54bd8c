"""The command edge: every command's arguments (one module each, beside the option groups
they share in options.py and the parser in parser.py), each turned into its typed request
once. main.py builds the parser, parses and dispatches by name: commands are never imported.

Layer: cli. Start at: main.py.
"""

from clusterkit.cli.cost import PRICES_EXAMPLES
from clusterkit.cli.image import IMAGE_EXAMPLES
from clusterkit.cli.main import EXAMPLES, build_parser, dispatch, parse

__all__ = ["EXAMPLES", "IMAGE_EXAMPLES", "PRICES_EXAMPLES", "build_parser", "dispatch", "parse"]
