"""Shared helpers for tests that need real daemons."""
