"""Declarative policy tests: ``staticadm test`` (spec: the file format; runner: evaluation; report)."""
