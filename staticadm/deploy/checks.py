"""``staticadm check``'s findings about the webhook registration: policies it does not send their requests
(``--webhook-config-dir``) and the control-plane writes an outage of staticadm would block."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from staticadm.deploy.exclusions import class_of, policies_reaching
from staticadm.deploy.outage import BlockedWrite, blocked_writes
from staticadm.deploy.registration import Unregistered, read_registration, unregistered
from staticadm.deploy.webhooks import WebhookSettings, active_pairs, webhook_configurations
from staticadm.manifests.check import ExtraCheck, Finding
from staticadm.manifests.errors import ManifestError
from staticadm.manifests.loader import LoadResult
from staticadm.model import Policy

#: The command that makes the registration follow the policies (docs/deployment.md).
FIX_COMMAND = ("staticadm webhook-config --manifests {manifests} --out-dir {directory} (URL, CA and failurePolicy "
               "kept from what is installed; kube-apiserver rereads the files within about a minute)")


def _at(policy: Policy, message: str) -> ManifestError:
    origin = policy.origin
    return ManifestError(origin.path, message, document=origin.document, items=origin.items, kind=policy.KIND,
                         name=policy.name)


def unregistered_message(entry: Unregistered, directory: str, manifests: str) -> str:
    return (f"the installed webhook registration ({directory}) does not send this {entry.plugin} policy all of its "
            f"requests, so kube-apiserver never asks it about them: {entry.describe()}; regenerate it: "
            + FIX_COMMAND.format(manifests=manifests, directory=directory))


def registration_gaps(result: LoadResult, directory: str) -> list[Unregistered]:
    registration = read_registration(directory)
    return [*unregistered(registration, "validating", result.validating_policies, result.validating_bindings),
            *unregistered(registration, "mutating", result.mutating_policies, result.mutating_bindings)]


def registration_check(directory: str) -> ExtraCheck:
    """``check --webhook-config-dir DIR``: an error for every policy the registration in DIR does not serve."""
    def check(result: LoadResult) -> Sequence[Finding]:
        return [Finding(_at(entry.policy, unregistered_message(entry, directory, result.directory)), "unregistered",
                        {"policy": entry.policy.name, "plugin": entry.plugin, "missing": list(entry.gaps)},
                        severity="error")
                for entry in registration_gaps(result, directory)]
    return check


def _webhooks(result: LoadResult, directory: str | None) -> list[Mapping[str, Any]]:
    if directory is not None:
        installed = read_registration(directory)
        return [webhook for webhooks in installed.webhooks.values() for webhook in webhooks]
    # What `webhook-config` would generate from this directory; the URL and CA play no part in matching.
    generated = webhook_configurations(result, WebhookSettings(url="https://127.0.0.1:8443", ca_bundle=b""))
    return [webhook for document in generated.documents for webhook in document["webhooks"]]


def outage_message(blocked: BlockedWrite, reaching: Sequence[str], installed: bool) -> str:
    which = "the installed registration" if installed else "the registration webhook-config generates"
    if reaching:
        why = (f"policies that can match it: {', '.join(reaching)}; exempt that class of writes from them (a "
               "namespaceSelector excluding kube-system, ...) to leave it out of the registration")
    else:
        why = "no loaded policy can match it: regenerate the registration (staticadm webhook-config ... --out-dir)"
    return (f"while staticadm is down, kube-apiserver refuses {blocked.write.subject} ({blocked.write.description}): "
            f"{which} sends it to webhook {blocked.webhook} with failurePolicy Fail; {why}")


def outage_findings(result: LoadResult, directory: str | None) -> list[Finding]:
    active = [*active_pairs(result.validating_policies, result.validating_bindings),
              *active_pairs(result.mutating_policies, result.mutating_bindings)]
    findings = []
    for blocked in blocked_writes(_webhooks(result, directory)):
        request = blocked.write.request
        entry = class_of(request.resource.group, request.resource.resource, request.namespace or "")
        reaching = policies_reaching(active, entry) if entry is not None else []
        message = outage_message(blocked, reaching, directory is not None)
        policy = next((policy for policy, _ in active if policy.name in reaching), None)
        problem = _at(policy, message) if policy is not None else ManifestError(result.directory, message)
        findings.append(Finding(problem, "outageBlocks", {**blocked.to_json(), "policies": reaching},
                                severity="warning"))
    return findings


def outage_check(directory: str | None) -> ExtraCheck:
    """The control-plane writes refused while staticadm is down, as warnings (a choice the operator may make)."""
    def check(result: LoadResult) -> Sequence[Finding]:
        return outage_findings(result, directory)
    return check


def registration_directory_problem(directory: str) -> str | None:
    """Why ``directory`` cannot be a registration directory, for the command line."""
    if not os.path.isdir(directory):
        return f"--webhook-config-dir {directory}: not a directory"
    return None
