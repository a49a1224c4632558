"""Stage: match (kube-apiserver's ``plugin/policy/matching``): ``matcher`` as written, ``plan`` precompiled."""
