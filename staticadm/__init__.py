"""staticadm: static admission policy sidecar for kube-apiserver."""

__version__ = "0.1.0"
