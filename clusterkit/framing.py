"""Framed JSON between node-side scripts and the control side.

Node scripts print their result between two markers, so a login banner, MOTD or a noisy
shell profile around it cannot corrupt the result. They frame it with the node-side prelude
(clusterkit/node/prelude.py), whose `BEGIN`/`END` must equal these (a test holds them
so); clusterkit/transport/nodescript.py turns a missing or broken frame into its reason.
"""

from __future__ import annotations

import json
from typing import Any

BEGIN = b"\n--clusterkit-begin--\n"
END = b"\n--clusterkit-end--\n"


class FrameError(ValueError):
    """No complete frame in the output: the script crashed, was killed, or never ran."""


class NoFrame(FrameError):
    """Not even the start of a frame: the script printed no result at all."""


def encode(payload: Any) -> bytes:
    return BEGIN + json.dumps(payload, separators=(",", ":"), default=str).encode() + END


def decode(output: bytes) -> Any:
    start = output.rfind(BEGIN)
    if start < 0:
        raise NoFrame("no result frame in the output")
    end = output.find(END, start + len(BEGIN))
    if end < 0:
        raise FrameError("result frame is cut short")
    try:
        return json.loads(output[start + len(BEGIN) : end])
    except ValueError as error:
        raise FrameError(f"result frame is not JSON: {error}") from None
