"""Counted nouns that agree with their count: "1 host", "2 hosts", never "1 hosts"."""

from __future__ import annotations


def counted(count: float, noun: str, plural: str | None = None) -> str:
    """`count` and `noun`, the noun in the plural unless the count is exactly one."""
    word = noun if count == 1 else (plural or noun + "s")
    return f"{count:g} {word}" if isinstance(count, float) else f"{count} {word}"


def noun_for(count: float, noun: str, plural: str | None = None) -> str:
    """The noun alone, agreeing with `count` ("2 of 1 host" reads "of 1 host")."""
    return noun if count == 1 else (plural or noun + "s")
