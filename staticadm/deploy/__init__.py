"""Deployment helpers: the serving certificates and the kube-apiserver webhook configurations.

Both the daemon (a certificate on first start) and the ``certs`` / ``webhook-config`` commands use
these modules, so that there is one implementation of each.
"""
