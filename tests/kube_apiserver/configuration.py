"""What kube-apiserver reads before it calls a webhook: its admission configuration, the static webhook
manifests, and the webhook kubeconfig.

- ``--admission-control-config-file``: an AdmissionConfiguration whose ValidatingAdmissionWebhook and
  MutatingAdmissionWebhook plugins carry a WebhookAdmissionConfiguration (inline ``configuration``, or a
  ``path`` relative to the admission configuration's directory). ``kubeConfigFile`` must be absolute
  (``plugin/webhook/config/kubeconfig.go``), as must ``staticManifestsDir``.
- ``staticManifestsDir``: the plugin's own kind only, from the direct children named ``*.yaml``,
  ``*.yml``, ``*.json`` in name order, each configuration named ``*.static.k8s.io`` and unique, URL client
  configs only (``plugin/webhook/manifest/loader``); defaulted as the v1 API defaults webhooks
  (failurePolicy Fail, matchPolicy Equivalent, empty selectors, timeoutSeconds 10, scope ``*``,
  reinvocationPolicy Never) and checked for the fields the dispatchers rely on.
- the kubeconfig: the user for a webhook at ``host:port`` is the ``users`` entry of that exact name, then
  ``*.<domain suffix>`` entries, then ``*``, then the current context's user, else anonymous
  (``util/webhook/authentication.go``); relative certificate paths are relative to the kubeconfig.

``root`` re-roots every absolute path kube-apiserver would open (a node's file system laid out under a
temporary directory); the files themselves are read exactly as installed.
"""

from __future__ import annotations

import base64
import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import yaml

ADMISSION_CONFIG_VERSIONS = ("apiserver.config.k8s.io/v1", "apiserver.config.k8s.io/v1alpha1")
WEBHOOK_PLUGINS = {"ValidatingAdmissionWebhook": "ValidatingWebhookConfiguration",
                   "MutatingAdmissionWebhook": "MutatingWebhookConfiguration"}
STATIC_SUFFIX = ".static.k8s.io"
MANIFEST_EXTENSIONS = (".yaml", ".yml", ".json")
ADMISSION_REVIEW_VERSIONS = ("v1", "v1beta1")


class ConfigurationError(ValueError):
    """kube-apiserver would refuse to start (or to load a static manifest) with this; the message says why."""


@dataclass(frozen=True)
class Node:
    """The node's file system as kube-apiserver sees it; ``root`` None is the real one."""

    root: Path | None = None

    def path(self, absolute: str) -> Path:
        if self.root is None:
            return Path(absolute)
        return self.root / PurePosixPath(absolute).relative_to("/")


@dataclass(frozen=True)
class ClientCredentials:
    """The part of a kubeconfig user kube-apiserver uses to call a webhook (``restConfigFromKubeconfig``)."""

    certificate: bytes | None = None
    key: bytes | None = None
    bearer_token: str | None = None
    #: Which users entry was chosen, for the test's messages ("" when anonymous).
    entry: str = ""


@dataclass(frozen=True)
class WebhookKubeconfig:
    users: Mapping[str, Mapping[str, Any]]
    contexts: Mapping[str, Mapping[str, Any]]
    current_context: str
    directory: Path | None

    @classmethod
    def empty(cls) -> WebhookKubeconfig:
        return cls({}, {}, "", None)

    @classmethod
    def load(cls, path: Path) -> WebhookKubeconfig:
        try:
            document = yaml.safe_load(path.read_text()) or {}
        except OSError as error:
            raise ConfigurationError(f"kubeConfigFile {path}: {error.strerror}") from error
        users = {entry["name"]: entry.get("user") or {} for entry in document.get("users") or []}
        contexts = {entry["name"]: entry.get("context") or {} for entry in document.get("contexts") or []}
        return cls(users, contexts, document.get("current-context") or "", path.parent)

    def credentials_for(self, host_port: str, node: Node) -> ClientCredentials:
        """``defaultAuthenticationInfoResolver.ClientConfigFor``."""
        if host_port in self.users:
            return self._credentials(host_port, node)
        steps = host_port.split(".")
        for index in range(1, len(steps)):
            wildcard = "*." + ".".join(steps[index:])
            if wildcard in self.users:
                return self._credentials(wildcard, node)
        if "*" in self.users:
            return self._credentials("*", node)
        context = self.contexts.get(self.current_context) or {}
        if context.get("user") in self.users:
            return self._credentials(context["user"], node)
        return ClientCredentials()

    def _credentials(self, name: str, node: Node) -> ClientCredentials:
        user = self.users[name]
        if user.get("auth-provider") is not None:
            raise ConfigurationError(f"kubeconfig user {name!r}: auth provider not supported")
        token = user.get("token") or None
        if token is None and user.get("tokenFile"):
            token = self._read(user["tokenFile"], node).decode()
        certificate = key = None
        if user.get("client-certificate") or user.get("client-certificate-data"):
            certificate = (base64.b64decode(user["client-certificate-data"]) if user.get("client-certificate-data")
                           else self._read(user["client-certificate"], node))
            key = (base64.b64decode(user["client-key-data"]) if user.get("client-key-data")
                   else self._read(user["client-key"], node) if user.get("client-key") else None)
        return ClientCredentials(certificate, key, token, name)

    def _read(self, name: str, node: Node) -> bytes:
        # clientcmd resolves relative file names against the kubeconfig's own directory.
        path = node.path(name) if name.startswith("/") else (self.directory or Path()) / name
        try:
            return path.read_bytes()
        except OSError as error:
            raise ConfigurationError(f"kubeconfig file {name} ({path}): {error.strerror}") from error


@dataclass(frozen=True)
class Webhook:
    """One defaulted webhook of a configuration, as the dispatchers see it (``webhook.WebhookAccessor``)."""

    uid: str
    configuration_name: str
    mutating: bool
    spec: Mapping[str, Any]

    @property
    def name(self) -> str:
        return str(self.spec["name"])

    @property
    def failure_policy(self) -> str:
        return str(self.spec["failurePolicy"])

    @property
    def url(self) -> str:
        return str(self.spec["clientConfig"]["url"])

    @property
    def ca_bundle(self) -> bytes:
        bundle = self.spec["clientConfig"].get("caBundle")
        return base64.b64decode(bundle) if bundle else b""


@dataclass(frozen=True)
class PluginConfiguration:
    plugin: str
    kubeconfig: WebhookKubeconfig
    static_manifests_dir: Path | None
    webhooks: tuple[Webhook, ...] = field(default=())


@dataclass(frozen=True)
class AdmissionConfiguration:
    validating: PluginConfiguration
    mutating: PluginConfiguration

    @classmethod
    def load(cls, config_file: str, node: Node) -> AdmissionConfiguration:
        """``--admission-control-config-file=<config_file>`` on a node laid out under ``node``."""
        path = node.path(config_file)
        document = yaml.safe_load(path.read_text()) or {}
        kind = document.get("kind")
        if document.get("apiVersion") not in ADMISSION_CONFIG_VERSIONS or kind != "AdmissionConfiguration":
            raise ConfigurationError(f"{config_file}: not an AdmissionConfiguration "
                                     f"({document.get('apiVersion')}, {document.get('kind')})")
        plugins: dict[str, PluginConfiguration] = {}
        for entry in document.get("plugins") or []:
            name = entry.get("name")
            if name not in WEBHOOK_PLUGINS:
                continue
            configuration = entry.get("configuration")
            if configuration is None and entry.get("path"):
                # A relative plugin path is relative to the admission configuration file's directory.
                plugin_path = Path(entry["path"])
                plugin_file = node.path(str(plugin_path)) if plugin_path.is_absolute() else path.parent / plugin_path
                configuration = yaml.safe_load(plugin_file.read_text())
            plugins[name] = _plugin(name, configuration or {}, node, config_file)
        return cls(plugins.get("ValidatingAdmissionWebhook") or PluginConfiguration(
                       "ValidatingAdmissionWebhook", WebhookKubeconfig.empty(), None),
                   plugins.get("MutatingAdmissionWebhook") or PluginConfiguration(
                       "MutatingAdmissionWebhook", WebhookKubeconfig.empty(), None))


def _plugin(name: str, configuration: Mapping[str, Any], node: Node, source: str) -> PluginConfiguration:
    if configuration.get("kind") != "WebhookAdmissionConfiguration":
        raise ConfigurationError(f"{source}: plugin {name}: expected a WebhookAdmissionConfiguration")
    kubeconfig = WebhookKubeconfig.empty()
    if configuration.get("kubeConfigFile"):
        if not configuration["kubeConfigFile"].startswith("/"):
            raise ConfigurationError(f"{source}: plugin {name}: kubeConfigFile: Invalid value: "
                                     f"{configuration['kubeConfigFile']!r}: must be an absolute file path")
        kubeconfig = WebhookKubeconfig.load(node.path(configuration["kubeConfigFile"]))
    directory = configuration.get("staticManifestsDir")
    if not directory:
        return PluginConfiguration(name, kubeconfig, None)
    if not directory.startswith("/"):
        raise ConfigurationError(f"{source}: plugin {name}: staticManifestsDir {directory!r} must be absolute")
    static_dir = node.path(directory)
    return PluginConfiguration(name, kubeconfig, static_dir, load_static_webhooks(static_dir, WEBHOOK_PLUGINS[name]))


def load_static_webhooks(directory: Path, kind: str) -> tuple[Webhook, ...]:
    """The webhooks of every ``kind`` configuration in ``directory``, configurations in name order."""
    if not directory.is_dir():
        raise ConfigurationError(f"staticManifestsDir {directory}: not a directory")
    configurations: list[dict[str, Any]] = []
    seen: dict[str, str] = {}
    for path in sorted(directory.iterdir(), key=lambda entry: entry.name.encode()):
        if path.is_dir() or path.suffix.lower() not in MANIFEST_EXTENSIONS or not path.stat().st_size:
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document is None:
                continue
            items = (document.get("items") or []) if document.get("kind") == "List" else [document]
            for item in items:
                configurations.append(_checked_configuration(item, kind, path, seen))
    configurations.sort(key=lambda configuration: configuration["metadata"]["name"])
    webhooks: list[Webhook] = []
    for configuration in configurations:
        counts: dict[str, int] = {}
        for spec in configuration["webhooks"]:
            index = counts.get(spec["name"], 0)
            counts[spec["name"]] = index + 1
            uid = f"manifest/{configuration['metadata']['name']}/{spec['name']}/{index}"
            webhooks.append(Webhook(uid, configuration["metadata"]["name"], kind.startswith("Mutating"), spec))
    return tuple(webhooks)


def _checked_configuration(document: Mapping[str, Any], kind: str, path: Path, seen: dict[str, str]) -> dict[str, Any]:
    where = f"error loading {path}"
    if document.get("apiVersion") != "admissionregistration.k8s.io/v1" or document.get("kind") != kind:
        raise ConfigurationError(f"{where}: unsupported type {document.get('apiVersion')}, Kind={document.get('kind')}"
                                 f" (this plugin's directory holds {kind} only)")
    name = (document.get("metadata") or {}).get("name") or ""
    if not name.endswith(STATIC_SUFFIX):
        raise ConfigurationError(f"{where}: {kind} {name!r} must have a name ending in {STATIC_SUFFIX}")
    if name in seen:
        raise ConfigurationError(f"{where}: duplicate name {name!r}, also in {seen[name]}")
    seen[name] = str(path)
    configuration = copy.deepcopy(dict(document))
    names: set[str] = set()
    for spec in configuration.get("webhooks") or []:
        _default_and_check(spec, kind.startswith("Mutating"), f"{where}: webhook {spec.get('name')!r} in {name!r}")
        if spec["name"] in names:
            raise ConfigurationError(f"{where}: webhooks[].name {spec['name']!r}: Duplicate value")
        names.add(spec["name"])
    configuration.setdefault("webhooks", [])
    return configuration


def _default_and_check(spec: dict[str, Any], mutating: bool, where: str) -> None:
    # v1 defaults (SetDefaults_ValidatingWebhook / SetDefaults_MutatingWebhook / SetDefaults_Rule).
    spec.setdefault("failurePolicy", "Fail")
    spec.setdefault("matchPolicy", "Equivalent")
    spec["namespaceSelector"] = spec.get("namespaceSelector") or {}
    spec["objectSelector"] = spec.get("objectSelector") or {}
    spec.setdefault("timeoutSeconds", 10)
    if mutating:
        spec.setdefault("reinvocationPolicy", "Never")
    for rule in spec.get("rules") or []:
        rule.setdefault("scope", "*")
    # What the v1 validation requires of the fields the dispatchers read.
    if len(str(spec.get("name", "")).split(".")) < 3:
        raise ConfigurationError(f"{where}: name must be a fully qualified domain name (at least three segments)")
    if spec.get("sideEffects") not in ("None", "NoneOnDryRun"):
        raise ConfigurationError(f"{where}: sideEffects: Unsupported value: {spec.get('sideEffects')!r}")
    versions = spec.get("admissionReviewVersions") or []
    if not any(version in ADMISSION_REVIEW_VERSIONS for version in versions):
        raise ConfigurationError(f"{where}: admissionReviewVersions must include at least one of v1, v1beta1")
    if not 1 <= int(spec["timeoutSeconds"]) <= 30:
        raise ConfigurationError(f"{where}: timeoutSeconds: Invalid value: the timeout value must be between 1 and "
                                 "30 seconds")
    if spec["failurePolicy"] not in ("Fail", "Ignore") or spec["matchPolicy"] not in ("Exact", "Equivalent"):
        raise ConfigurationError(f"{where}: failurePolicy/matchPolicy: Unsupported value")
    client = spec.get("clientConfig") or {}
    if client.get("service") is not None:
        raise ConfigurationError(f"{where}: clientConfig.service is not supported for static manifests; use "
                                 "clientConfig.url instead")
    if not client.get("url"):
        raise ConfigurationError(f"{where}: clientConfig.url is required for static manifests")
    parsed = urlsplit(client["url"])
    if parsed.scheme != "https" or not parsed.hostname or parsed.query or parsed.fragment or parsed.username:
        raise ConfigurationError(f"{where}: clientConfig.url: Invalid value: {client['url']!r}")


def host_port(url: str) -> str:
    """The name kube-apiserver looks the webhook's credentials up by: the URL's host, port 443 by default."""
    parsed = urlsplit(url)
    netloc = parsed.netloc
    return netloc if parsed.port is not None else f"{netloc}:443"


def match_conditions(spec: Mapping[str, Any]) -> Sequence[Mapping[str, Any]]:
    return list(spec.get("matchConditions") or [])
