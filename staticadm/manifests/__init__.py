"""Static admission manifests: directory -> documents -> typed objects -> defaulted -> validated.

The stages mirror kube-apiserver's manifest loader (KEP-5793): :mod:`files` lists and reads the
directory, :mod:`documents` splits and parses, :mod:`decode` builds the typed model strictly,
:mod:`defaults` and :mod:`validation` apply REST defaulting and create validation, and :mod:`loader`
runs them in order and adds the static-manifest rules. Unlike kube-apiserver we keep going after an
error so that one run reports everything that is wrong.
"""

from staticadm.manifests.errors import ManifestError
from staticadm.manifests.loader import DEFAULT_MAX_FILE_BYTES, LoadResult, load_manifest_directory

__all__ = ["DEFAULT_MAX_FILE_BYTES", "LoadResult", "ManifestError", "load_manifest_directory"]
