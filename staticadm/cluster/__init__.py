"""The live cluster view: what kube-apiserver knows that a request does not carry (--kubeconfig)."""
