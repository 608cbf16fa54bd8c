"""Entry point: parse, run, and map the outcome to a documented exit status."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from clusterkit.status import ExitStatus


def main(argv: Sequence[str] | None = None) -> int:
    from clusterkit import cli, logs
    from clusterkit.errors import ClusterkitError

    try:
        args = cli.parse(argv)
        logs.configure(args.verbose)  # the only place logging is set up
        return int(cli.dispatch(args))
    except ClusterkitError as error:
        print(f"clusterkit: error: {error}", file=sys.stderr)
        return int(error.exit_status)
    except KeyboardInterrupt:
        print("clusterkit: interrupted", file=sys.stderr)
        return int(ExitStatus.INTERRUPTED)
    except BrokenPipeError:
        return int(ExitStatus.PASSED)


if __name__ == "__main__":
    sys.exit(main())
