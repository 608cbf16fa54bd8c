"""Test infrastructure: the namespace cluster and the stand-ins for hardware this machine lacks."""
