"""The daemon: aiohttp application, listeners, health, metrics, logging and systemd integration.

Only this package and :mod:`staticadm.cli` do I/O on requests; evaluation itself stays pure.
"""
