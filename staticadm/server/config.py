"""``serve`` settings: command-line flags and a YAML file with the same names; flags win.

Every flag is declared with ``default=None`` so that "not given" can be told apart from "given the
default value"; the precedence is then flag, file, built-in default.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from staticadm.defaults import DEFAULT_AUTHORIZED_TTL, DEFAULT_UNAUTHORIZED_TTL
from staticadm.server.event_loop import DEFAULT_EVENT_LOOP, EVENT_LOOPS

DEFAULT_LISTEN = "127.0.0.1:8443"
DEFAULT_SOCKET_MODE = 0o660
DEFAULT_POLL_INTERVAL = 60.0
DEFAULT_SHUTDOWN_GRACE = 10.0
DEFAULT_BODY_TIMEOUT = 10.0
DEFAULT_HEADER_TIMEOUT = 10.0
DEFAULT_IDLE_TIMEOUT = 90.0
DEFAULT_MAX_CONNECTIONS = 4096
#: cel-expr-python 0.1.3 keeps the argument tuple of every call it makes into Python (~50-100 bytes;
#: docs/known-gaps.md): with --workers, a worker is replaced once it has grown this much.
DEFAULT_WORKER_MEMORY_GROWTH_MIB = 64
LOG_FORMATS = ("json", "console")
LOG_LEVELS = ("debug", "info", "warning", "error")


class ConfigError(Exception):
    """A setting that cannot be used; the message names it."""


def default_runtime_dir() -> Path:
    # systemd's RuntimeDirectory= first; then the system location when we may write there; then the
    # per-user runtime directory so that a first run from a checkout needs no privileges.
    if os.environ.get("RUNTIME_DIRECTORY"):
        return Path(os.environ["RUNTIME_DIRECTORY"].split(":")[0])
    system = Path("/run/staticadm")
    if _writable_or_creatable(system):
        return system
    if os.environ.get("XDG_RUNTIME_DIR"):
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "staticadm"
    return Path("/tmp") / f"staticadm-{os.getuid()}"


def default_state_dir() -> Path:
    if os.environ.get("STATE_DIRECTORY"):
        return Path(os.environ["STATE_DIRECTORY"].split(":")[0])
    system = Path("/var/lib/staticadm")
    if _writable_or_creatable(system):
        return system
    base = Path(os.environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "staticadm"


def _writable_or_creatable(path: Path) -> bool:
    if path.exists():
        return os.access(path, os.W_OK | os.X_OK)
    return os.access(path.parent, os.W_OK | os.X_OK)


@dataclass(frozen=True, slots=True)
class ServeConfig:
    manifests: Path = Path("manifests")
    #: None disables the unix socket listener.
    socket: Path | None = None
    socket_mode: int = DEFAULT_SOCKET_MODE
    #: (host, port); None disables the HTTPS listener.
    listen: tuple[str, int] | None = ("127.0.0.1", 8443)
    tls_cert: Path | None = None
    tls_key: Path | None = None
    client_ca: Path | None = None
    namespaces: Path | None = None
    #: kube-apiserver for namespace labels, namespaceObject and authorizer checks (the live cluster view).
    kubeconfig: Path | None = None
    #: How long SubjectAccessReview answers are reused (kube-apiserver's webhook authorizer defaults).
    authorization_cache_authorized_ttl: float = DEFAULT_AUTHORIZED_TTL
    authorization_cache_unauthorized_ttl: float = DEFAULT_UNAUTHORIZED_TTL
    state_dir: Path | None = None
    poll_interval: float = DEFAULT_POLL_INTERVAL
    log_format: str = "json"
    log_level: str = "info"
    #: Bound on finishing in-flight requests after SIGTERM.
    shutdown_grace: float = DEFAULT_SHUTDOWN_GRACE
    #: Bound on receiving a request body, against slow clients.
    body_timeout: float = DEFAULT_BODY_TIMEOUT
    #: Bound on receiving a request's headers (and on a new connection's first request).
    header_timeout: float = DEFAULT_HEADER_TIMEOUT
    #: How long an idle keep-alive connection is kept.
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT
    #: Open connections at most (lowered to fit the open-file limit); idle ones are shed first.
    max_connections: int = DEFAULT_MAX_CONNECTIONS
    #: Load a manifest directory or file that any local user may write (refused by default).
    allow_world_writable_manifests: bool = False
    #: Processes answering requests; 1 serves from the main process itself (no supervisor).
    workers: int = 1
    #: With workers: MiB a worker may grow beyond its size after loading its snapshot before it is replaced.
    worker_memory_growth: int = DEFAULT_WORKER_MEMORY_GROWTH_MIB
    #: A second manifest directory evaluated beside the live one on every request, never affecting answers.
    shadow_manifests: Path | None = None
    #: The installed static webhook registration (webhook-config --out-dir), read to compare with the policies.
    webhook_config_dir: Path | None = None
    #: (host, port) of the HTTPS listener that serves only /metrics, to a bearer token; None: none.
    metrics_listen: tuple[str, int] | None = None
    #: The bearer token the metrics listener requires (Prometheus' credentials_file holds the same).
    metrics_token_file: Path | None = None
    #: The event loop: ``auto`` (uvloop when importable), ``asyncio`` or ``uvloop`` (staticadm.server.event_loop).
    event_loop: str = DEFAULT_EVENT_LOOP


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    add = parser.add_argument
    add("--manifests", metavar="DIR", default=None,
        help="directory of static ValidatingAdmissionPolicy and MutatingAdmissionPolicy manifests and their "
             "bindings (default: manifests, relative to the working directory)")
    add("--shadow-manifests", metavar="DIR", default=None,
        help="a second manifest directory, loaded and reloaded by the same rules, evaluated beside --manifests "
             "on every request without affecting the answer; differences are logged (shadow difference) and "
             "counted (staticadm_shadow_differences_total); an invalid shadow directory never affects the "
             "live one (default: none)")
    add("--webhook-config-dir", metavar="DIR", default=None,
        help="the installed static webhook registration (the --out-dir of webhook-config: validating-webhooks/ and "
             "mutating-webhooks/), read only, on every load and when its files change: a policy it does not send "
             "all of its requests is logged, counted (staticadm_findings{finding=\"unregistered\"}) and noted in "
             "/readyz?verbose (default: none)")
    add("--socket", metavar="PATH", default=None,
        help="unix socket to serve plain HTTP on; '' disables it (default: staticadm.sock under "
             "$RUNTIME_DIRECTORY, /run/staticadm or the user's runtime directory)")
    add("--socket-mode", metavar="OCTAL", default=None,
        help=f"permission bits of the unix socket (default: {DEFAULT_SOCKET_MODE:04o})")
    add("--listen", metavar="HOST:PORT", default=None,
        help=f"HTTPS listener address; '' disables it (default: {DEFAULT_LISTEN})")
    add("--tls-cert", metavar="FILE", default=None,
        help="serving certificate chain (PEM), reloaded when it changes (default: a certificate signed by a "
             "self-signed CA created in the state directory)")
    add("--tls-key", metavar="FILE", default=None, help="private key for --tls-cert (default: generated with it)")
    add("--client-ca", metavar="FILE", default=None,
        help="require HTTPS clients to present a certificate signed by this CA (default: no client certificates)")
    add("--namespaces", metavar="FILE", default=None,
        help="Namespace objects (YAML/JSON) for namespaceSelector and namespaceObject (default: none)")
    add("--kubeconfig", metavar="FILE", default=None,
        help="kubeconfig (its current context) through which kube-apiserver answers what a request does not "
             "carry, as for its own admission plugins: namespaces (namespaceSelector labels, namespaceObject) "
             "and authorizer checks (SubjectAccessReview) (default: none; only the name label, checks fail)")
    add("--authorization-cache-authorized-ttl", metavar="SECONDS", default=None,
        help=f"with --kubeconfig: how long an allowed authorizer check's SubjectAccessReview answer is reused "
             f"(default: {DEFAULT_AUTHORIZED_TTL:g}, as kube-apiserver's webhook authorizer)")
    add("--authorization-cache-unauthorized-ttl", metavar="SECONDS", default=None,
        help=f"with --kubeconfig: how long any other answer is reused; errors never are (default: "
             f"{DEFAULT_UNAUTHORIZED_TTL:g})")
    add("--config", metavar="FILE", default=None,
        help="YAML file with any of these options under the same names; flags win (default: none)")
    add("--state-dir", metavar="DIR", default=None,
        help="where the generated CA and serving certificate live (default: $STATE_DIRECTORY, "
             "/var/lib/staticadm or ~/.local/state/staticadm)")
    add("--poll-interval", metavar="SECONDS", default=None,
        help=f"re-read the manifest directory this often even without file events (default: "
             f"{DEFAULT_POLL_INTERVAL:g})")
    add("--log-format", choices=LOG_FORMATS, default=None, help="log line format (default: json)")
    add("--log-level", choices=LOG_LEVELS, default=None,
        help="least severe level logged; allowed requests are logged at debug (default: info)")
    add("--shutdown-grace", metavar="SECONDS", default=None,
        help=f"after SIGTERM, how long in-flight requests may take to finish (default: {DEFAULT_SHUTDOWN_GRACE:g})")
    add("--body-timeout", metavar="SECONDS", default=None,
        help=f"how long a client may take to send a request body (default: {DEFAULT_BODY_TIMEOUT:g})")
    add("--header-timeout", metavar="SECONDS", default=None,
        help=f"how long a client may take to send request headers, and a new connection its first request "
             f"(default: {DEFAULT_HEADER_TIMEOUT:g})")
    add("--idle-timeout", metavar="SECONDS", default=None,
        help=f"how long an idle keep-alive connection is kept open (default: {DEFAULT_IDLE_TIMEOUT:g})")
    add("--max-connections", metavar="N", default=None,
        help=f"open connections at most, lowered to fit the open-file limit; over it the longest-idle "
             f"connection is closed (default: {DEFAULT_MAX_CONNECTIONS})")
    add("--workers", metavar="N", default=None,
        help="processes answering requests on the same sockets, under one supervisor that owns reloads and "
             "systemd notifications; 'auto' is the node's cores, at least 2 and at most 4; 1 is a single "
             "process, which nothing replaces when the CEL engine's memory grows (default: auto)")
    add("--worker-memory-growth", metavar="MIB", default=None,
        help=f"with --workers: a worker that has grown this many MiB beyond its size after loading its "
             f"snapshot is replaced by a new one (which starts first; the old one then drains), bounding the "
             f"memory the CEL engine does not give back (default: {DEFAULT_WORKER_MEMORY_GROWTH_MIB})")
    add("--metrics-listen", metavar="HOST:PORT", default=None,
        help="an HTTPS listener (the serving certificate, no client certificate asked) that serves only GET /metrics, "
             "to a request carrying the bearer token of --metrics-token-file: Prometheus' door, apart from "
             "kube-apiserver's client CA (default: none; /metrics is also on the unix socket and --listen)")
    add("--metrics-token-file", metavar="FILE", default=None,
        help="the bearer token --metrics-listen requires (Prometheus: authorization.credentials_file); read again "
             "when it changes (default: none)")
    add("--event-loop", choices=EVENT_LOOPS, default=None,
        help="the event loop requests are served on: uvloop (libuv, less CPU per request), asyncio's own, or "
             "auto: uvloop when it is installed, else asyncio (default: asyncio)")
    # store_const rather than store_true: "not given" must stay None so the config file can set it.
    add("--allow-world-writable-manifests", action="store_const", const=True, default=None,
        help="load the manifest directory even when it or a manifest file is world-writable; otherwise such a "
             "directory is refused at startup and on every reload (default: refused)")


_OPTION_NAMES = ("manifests", "socket", "socket-mode", "listen", "tls-cert", "tls-key", "client-ca", "namespaces",
                 "kubeconfig", "authorization-cache-authorized-ttl", "authorization-cache-unauthorized-ttl",
                 "state-dir", "poll-interval", "log-format", "log-level", "shutdown-grace",
                 "body-timeout", "header-timeout", "idle-timeout", "max-connections", "allow-world-writable-manifests",
                 "workers", "worker-memory-growth", "shadow-manifests", "webhook-config-dir", "metrics-listen",
                 "metrics-token-file", "event-loop")


def resolve(args: argparse.Namespace) -> ServeConfig:
    """Flags over the config file over defaults; raises :class:`ConfigError` naming the bad setting."""
    merged: dict[str, Any] = {}
    if args.config is not None:
        merged.update(_read_config_file(Path(args.config)))
    for name in _OPTION_NAMES:
        value = getattr(args, name.replace("-", "_"), None)
        if value is not None:
            merged[name] = value
    return _build(merged)


def _read_config_file(path: Path) -> dict[str, Any]:
    # Imported here: every command builds its parser with add_serve_arguments, and only --config reads YAML.
    from staticadm.yamljson import ParseError, parse_yaml

    try:
        document = parse_yaml(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise ConfigError(f"--config {path}: {error.strerror or error}") from error
    except UnicodeDecodeError as error:
        raise ConfigError(f"--config {path}: not UTF-8: {error}") from error
    except ParseError as error:
        raise ConfigError(f"--config {path}: {error}") from error
    if document is None:
        return {}
    if not isinstance(document, Mapping):
        raise ConfigError(f"--config {path}: expected a mapping of option names to values")
    result: dict[str, Any] = {}
    for key, value in document.items():
        name = str(key).replace("_", "-")
        if name not in _OPTION_NAMES:
            raise ConfigError(f"--config {path}: unknown option {key!r} (known: {', '.join(_OPTION_NAMES)})")
        result[name] = value
    return result


def _build(values: Mapping[str, Any]) -> ServeConfig:
    config = ServeConfig()
    updates: dict[str, Any] = {}
    if "manifests" in values:
        updates["manifests"] = Path(str(values["manifests"]))
    socket = values.get("socket")
    if socket is None:
        updates["socket"] = default_runtime_dir() / "staticadm.sock"
    else:
        updates["socket"] = Path(str(socket)) if str(socket) else None
    if "socket-mode" in values:
        updates["socket_mode"] = _parse_mode(values["socket-mode"])
    if "listen" in values:
        updates["listen"] = parse_listen(str(values["listen"])) if values["listen"] not in ("", None) else None
    if values.get("metrics-listen") not in ("", None):
        updates["metrics_listen"] = parse_listen(str(values["metrics-listen"]), option="metrics-listen")
    for name in ("tls-cert", "tls-key", "client-ca", "namespaces", "kubeconfig", "state-dir", "shadow-manifests",
                 "webhook-config-dir", "metrics-token-file"):
        if values.get(name) not in (None, ""):
            updates[name.replace("-", "_")] = Path(str(values[name]))
    for name in ("poll-interval", "shutdown-grace", "body-timeout", "header-timeout", "idle-timeout",
                 "authorization-cache-authorized-ttl", "authorization-cache-unauthorized-ttl"):
        if name in values:
            updates[name.replace("-", "_")] = _parse_seconds(name, values[name])
    workers = values.get("workers", "auto")
    updates["workers"] = default_workers() if str(workers) == "auto" else _parse_count("workers", workers)
    if "max-connections" in values:
        updates["max_connections"] = _parse_count("max-connections", values["max-connections"])
    if "worker-memory-growth" in values:
        updates["worker_memory_growth"] = _parse_count("worker-memory-growth", values["worker-memory-growth"])
    if "event-loop" in values:
        updates["event_loop"] = _choice("event-loop", values["event-loop"], EVENT_LOOPS)
    if "log-format" in values:
        updates["log_format"] = _choice("log-format", values["log-format"], LOG_FORMATS)
    if "log-level" in values:
        updates["log_level"] = _choice("log-level", values["log-level"], LOG_LEVELS)
    if "allow-world-writable-manifests" in values:
        updates["allow_world_writable_manifests"] = _parse_bool("allow-world-writable-manifests",
                                                               values["allow-world-writable-manifests"])
    if updates.get("state_dir") is None:
        updates["state_dir"] = default_state_dir()
    config = replace(config, **updates)
    if (config.tls_cert is None) != (config.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key must be given together")
    if (config.metrics_listen is None) != (config.metrics_token_file is None):
        raise ConfigError("--metrics-listen and --metrics-token-file must be given together: the metrics listener "
                          "answers only requests carrying the file's bearer token")
    if config.namespaces is not None and config.kubeconfig is not None:
        raise ConfigError("--namespaces and --kubeconfig are two sources of namespaces: give one")
    return config


def effective_options(config: ServeConfig) -> dict[str, Any]:
    """The configuration as the option names spell it, for the start-up log line (every option, defaults
    included, so an operator reads what is in force without knowing the defaults)."""
    out: dict[str, Any] = {}
    for name in _OPTION_NAMES:
        value = getattr(config, name.replace("-", "_"))
        if isinstance(value, Path):
            value = str(value)
        elif name in ("listen", "metrics-listen") and value is not None:
            value = format_listen(value)
        elif name == "socket-mode":
            value = f"{value:04o}"
        out[name] = value
    return out


def format_listen(address: tuple[str, int]) -> str:
    host, port = address
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def default_workers(cores: int | None = None) -> int:
    """The node's cores, at least 2 and at most 4. At least 2: only workers are replaced when they grow
    (the CEL engine keeps memory with each call of a library in Python: docs/known-gaps.md), and replacing
    one fails no request only while another serves. At most 4: each worker holds its own compiled snapshot
    (about 90 MB at 100 policies, 135 MB at 1000), and the shipped unit caps the service at 1 GiB."""
    return max(2, min(cores if cores is not None else os.cpu_count() or 1, 4))


def parse_listen(text: str, *, option: str = "listen") -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(f"--{option} {text!r}: expected HOST:PORT")
    # [::1]:8443 is how an IPv6 host is written with a port.
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host, int(port)


def _parse_mode(value: Any) -> int:
    if isinstance(value, int) and not isinstance(value, bool):
        # PyYAML (YAML 1.1) already reads an unquoted 0660 as octal.
        mode = value
    else:
        try:
            mode = int(str(value), 8)
        except ValueError as error:
            raise ConfigError(f"--socket-mode {value!r}: expected octal permission bits such as 0660") from error
    if not 0 <= mode <= 0o777:
        raise ConfigError(f"--socket-mode {value!r}: expected permission bits between 0000 and 0777")
    return mode


def _parse_seconds(name: str, value: Any) -> float:
    try:
        seconds = float(value)
    except (TypeError, ValueError) as error:
        raise ConfigError(f"--{name} {value!r}: expected a number of seconds") from error
    if not seconds > 0:
        raise ConfigError(f"--{name} {value!r}: must be greater than zero")
    return seconds


def _parse_count(name: str, value: Any) -> int:
    try:
        count = int(str(value))
    except ValueError as error:
        raise ConfigError(f"--{name} {value!r}: expected a whole number") from error
    if count < 1:
        raise ConfigError(f"--{name} {value!r}: must be at least 1")
    return count


def _parse_bool(name: str, value: Any) -> bool:
    # YAML already gives true/false; a quoted "yes" is more likely a mistake than intent.
    if not isinstance(value, bool):
        raise ConfigError(f"--{name} {value!r}: expected true or false")
    return value


def _choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    if value not in choices:
        raise ConfigError(f"--{name} {value!r}: expected one of {', '.join(choices)}")
    return str(value)

