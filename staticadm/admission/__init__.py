"""The request path: one admission request, parse -> match -> prepare inputs -> evaluate -> decide -> answer.

Laid out as kube-apiserver's ``plugin/policy``: ``request`` (parse), ``matching/`` (``plugin/policy/matching``),
``generic/`` (the dispatch both plugins share), ``cel/`` (``plugin/cel``: the activation, running expressions),
``validating/`` and ``mutating/`` side by side, ``outcomes``/``response``/``vocabulary`` (decisions and their
wording), ``endpoints`` (the daemon's entry and answer) and ``comparison`` (shadow differences). Pure: no I/O. The
offline tools (:mod:`staticadm.offline`) are built on it; nothing here imports them (``tests/test_layers.py``).
"""
