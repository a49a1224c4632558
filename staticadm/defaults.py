"""Defaults the command line shows in its help, kept apart from the modules that apply them.

Building the parser (every command, ``staticadm --help`` included) reads these; here they cost no import, while
the modules that use them pull in the CEL environment, aiohttp or cryptography. Each is defined once, here.
"""

from __future__ import annotations

#: The user of a request built for a plain object unless told otherwise (``--user``, a PolicyTest case's
#: ``user``): a name no policy singles out, in no group but the one every authenticated user is in.
DEFAULT_USERNAME = "admin"

#: A webhook configuration's timeoutSeconds unless told otherwise (``webhook-config --timeout``).
DEFAULT_TIMEOUT_SECONDS = 10

#: How long the authorizer's cache keeps a SubjectAccessReview answer: allowed, as kube-apiserver's webhook
#: authorizer; denied or no opinion.
DEFAULT_AUTHORIZED_TTL = 300.0
DEFAULT_UNAUTHORIZED_TTL = 30.0
