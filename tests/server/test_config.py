"""``serve`` settings: every option from the YAML file, flags over the file, refusals naming the setting."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from staticadm.server.config import (
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_POLL_INTERVAL,
    DEFAULT_SHUTDOWN_GRACE,
    DEFAULT_SOCKET_MODE,
    ConfigError,
    ServeConfig,
    add_serve_arguments,
    default_workers,
    resolve,
)
from tests.server import forked
from tests.server.harness import REPO_ROOT, DaemonFactory, denied_message, review

#: Every option, as the config file spells it, with a non-default value and what it becomes.
FILE_VALUES: dict[str, tuple[Any, str, Any]] = {
    "manifests": ("/etc/staticadm/manifests", "manifests", Path("/etc/staticadm/manifests")),
    "socket": ("/run/x/a.sock", "socket", Path("/run/x/a.sock")),
    "socket-mode": ("0600", "socket_mode", 0o600),
    "listen": ("[::1]:9443", "listen", ("::1", 9443)),
    "tls-cert": ("/pki/tls.crt", "tls_cert", Path("/pki/tls.crt")),
    "tls-key": ("/pki/tls.key", "tls_key", Path("/pki/tls.key")),
    "client-ca": ("/pki/clients.crt", "client_ca", Path("/pki/clients.crt")),
    "namespaces": ("/etc/staticadm/ns.yaml", "namespaces", Path("/etc/staticadm/ns.yaml")),
    "state-dir": ("/var/lib/x", "state_dir", Path("/var/lib/x")),
    "poll-interval": (5, "poll_interval", 5.0),
    "log-format": ("console", "log_format", "console"),
    "log-level": ("warning", "log_level", "warning"),
    "shutdown-grace": (2.5, "shutdown_grace", 2.5),
    "body-timeout": ("3", "body_timeout", 3.0),
    "header-timeout": (4, "header_timeout", 4.0),
    "idle-timeout": ("30", "idle_timeout", 30.0),
    "max-connections": (500, "max_connections", 500),
    "allow-world-writable-manifests": (True, "allow_world_writable_manifests", True),
    "workers": (3, "workers", 3),
    "worker-memory-growth": ("96", "worker_memory_growth", 96),
    "shadow-manifests": ("/etc/staticadm/next", "shadow_manifests", Path("/etc/staticadm/next")),
    "webhook-config-dir": ("/etc/kubernetes/admission", "webhook_config_dir", Path("/etc/kubernetes/admission")),
    "authorization-cache-authorized-ttl": ("60", "authorization_cache_authorized_ttl", 60.0),
    "authorization-cache-unauthorized-ttl": (5, "authorization_cache_unauthorized_ttl", 5.0),
    "metrics-listen": ("0.0.0.0:9443", "metrics_listen", ("0.0.0.0", 9443)),
    "metrics-token-file": ("/etc/staticadm/metrics-token", "metrics_token_file", Path("/etc/staticadm/metrics-token")),
    "event-loop": ("asyncio", "event_loop", "asyncio"),
    # Excludes "namespaces" (two sources of namespaces): checked on its own.
    "kubeconfig": ("/etc/staticadm/kubeconfig", "kubeconfig", Path("/etc/staticadm/kubeconfig")),
}
#: Options that cannot be given together with every other one.
ALONE = ("kubeconfig",)

#: The same options given as flags, with values different from the file's.
FLAG_VALUES: dict[str, tuple[str, Any]] = {
    "manifests": ("/flag/manifests", Path("/flag/manifests")),
    "socket": ("/flag/a.sock", Path("/flag/a.sock")),
    "socket-mode": ("0640", 0o640),
    "listen": ("127.0.0.2:8444", ("127.0.0.2", 8444)),
    "tls-cert": ("/flag/tls.crt", Path("/flag/tls.crt")),
    "tls-key": ("/flag/tls.key", Path("/flag/tls.key")),
    "client-ca": ("/flag/ca.crt", Path("/flag/ca.crt")),
    "namespaces": ("/flag/ns.yaml", Path("/flag/ns.yaml")),
    "state-dir": ("/flag/state", Path("/flag/state")),
    "poll-interval": ("7", 7.0),
    "log-format": ("json", "json"),
    "log-level": ("debug", "debug"),
    "shutdown-grace": ("4", 4.0),
    "body-timeout": ("6", 6.0),
    "header-timeout": ("5", 5.0),
    "idle-timeout": ("45", 45.0),
    "max-connections": ("800", 800),
    "workers": ("1", 1),
    "worker-memory-growth": ("32", 32),
    "webhook-config-dir": ("/flag/admission", Path("/flag/admission")),
    "metrics-listen": ("127.0.0.1:9444", ("127.0.0.1", 9444)),
    "metrics-token-file": ("/flag/token", Path("/flag/token")),
    "event-loop": ("uvloop", "uvloop"),
}


def _parse(*argv: str) -> ServeConfig:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return resolve(parser.parse_args(list(argv)))


def _yaml(values: dict[str, Any]) -> str:
    lines = []
    for key, value in values.items():
        text = "true" if value is True else "false" if value is False else f'"{value}"' if isinstance(value, str) \
            else str(value)
        lines.append(f"{key}: {text}")
    return "\n".join(lines) + "\n"


def test_every_option_can_come_from_the_file(tmp_path: Path) -> None:
    config_file = tmp_path / "staticadm.yaml"
    config_file.write_text(_yaml({key: value for key, (value, _, _) in FILE_VALUES.items() if key not in ALONE}))
    config = _parse("--config", str(config_file))
    for key, (_, attribute, expected) in FILE_VALUES.items():
        if key not in ALONE:
            assert getattr(config, attribute) == expected, key
    for key in ALONE:
        value, attribute, expected = FILE_VALUES[key]
        config_file.write_text(_yaml({key: value}))
        assert getattr(_parse("--config", str(config_file)), attribute) == expected, key
    assert set(FILE_VALUES) | {"config"} == _documented_options(), "an option is missing from this test"


def test_flags_win_over_the_file(tmp_path: Path) -> None:
    config_file = tmp_path / "staticadm.yaml"
    config_file.write_text(_yaml({key: value for key, (value, _, _) in FILE_VALUES.items() if key not in ALONE}
                                 | {"allow-world-writable-manifests": False}))
    argv = ["--config", str(config_file)]
    for key, (flag_value, _) in FLAG_VALUES.items():
        argv += [f"--{key}", flag_value]
    config = _parse(*argv, "--allow-world-writable-manifests")
    for key, (_, expected) in FLAG_VALUES.items():
        assert getattr(config, FILE_VALUES[key][1]) == expected, key
    assert config.allow_world_writable_manifests is True
    # A flag that is not given leaves the file's value alone.
    partial = _parse("--config", str(config_file), "--log-level", "error")
    assert partial.log_level == "error" and partial.poll_interval == 5.0 and partial.socket_mode == 0o600


def test_defaults_without_flags_or_file() -> None:
    config = _parse()
    assert config.listen == ("127.0.0.1", 8443)
    assert config.socket_mode == DEFAULT_SOCKET_MODE
    assert config.poll_interval == DEFAULT_POLL_INTERVAL
    assert config.shutdown_grace == DEFAULT_SHUTDOWN_GRACE and config.body_timeout == DEFAULT_BODY_TIMEOUT
    assert config.allow_world_writable_manifests is False
    assert config.log_format == "json" and config.log_level == "info"
    assert config.workers == max(2, min(os.cpu_count() or 1, 4))
    assert config.socket is not None and config.socket.name == "staticadm.sock"
    # '' disables a listener, from the file as from a flag.
    assert _parse("--socket", "", "--listen", "").socket is None


@pytest.mark.parametrize(("text", "named"), [
    ("manifests: /x\nlisten_adress: 1.2.3.4:1\n", "'listen_adress'"),
    ("config: other.yaml\n", "'config'"),
    ("poll-interval: soon\n", "--poll-interval"),
    ("poll-interval: 0\n", "--poll-interval"),
    ("body-timeout: -1\n", "--body-timeout"),
    ("max-connections: 0\n", "--max-connections"),
    ("max-connections: many\n", "--max-connections"),
    ("shutdown-grace: [1]\n", "--shutdown-grace"),
    ("socket-mode: '0999'\n", "--socket-mode"),
    ("socket-mode: 0o7777\n", "--socket-mode"),
    ("listen: nowhere\n", "--listen"),
    ("log-format: xml\n", "--log-format"),
    ("log-level: verbose\n", "--log-level"),
    ("allow-world-writable-manifests: 'yes please'\n", "--allow-world-writable-manifests"),
    ("tls-cert: /a.crt\n", "--tls-cert and --tls-key"),
    ("- manifests\n", "expected a mapping"),
    ("manifests: [\n", "invalid YAML"),
])
def test_bad_settings_are_refused_naming_the_setting(tmp_path: Path, text: str, named: str) -> None:
    config_file = tmp_path / "staticadm.yaml"
    config_file.write_text(text)
    with pytest.raises(ConfigError) as caught:
        _parse("--config", str(config_file))
    assert named in str(caught.value)
    assert str(config_file) in str(caught.value) or named.startswith("--")


def test_missing_config_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"absent\.yaml"):
        _parse("--config", str(tmp_path / "absent.yaml"))


def _help() -> str:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    completed = forked.run([sys.executable, "-m", "staticadm", "serve", "--help"], env=env)
    assert completed.returncode == 0, completed.stderr
    return completed.stdout


def _documented_options() -> set[str]:
    return set(re.findall(r"^\s+--([a-z-]+)", _help(), re.MULTILINE)) - {"help"}


def test_help_documents_every_option_with_its_default() -> None:
    text = _help()
    # Each option's block: from its flag to the next flag.
    blocks = re.split(r"\n(?=\s{2}--)", text.split("options:", 1)[1])
    documented = {}
    for block in blocks:
        match = re.match(r"\s+--([a-z-]+)", block)
        if match and match.group(1) != "help":
            documented[match.group(1)] = " ".join(block.split())
    assert set(documented) == set(FILE_VALUES) | {"config"}
    for option, block in documented.items():
        assert "(default:" in block, f"--{option} does not say its default: {block}"


def test_daemon_started_from_a_config_file_and_refusing_an_unknown_key(make_daemon: DaemonFactory,
                                                                       tmp_path: Path) -> None:
    config_file = tmp_path / "staticadm.yaml"
    daemon = make_daemon(start=False)
    # The harness passes --manifests, --socket and friends as flags; the file supplies the rest.
    config_file.write_text("socket-mode: '0600'\nlog-format: console\nlog-level: error\nbody-timeout: 2\n")
    daemon.args = ["--config", str(config_file)]
    daemon.start()
    assert daemon.socket_path is not None and oct(daemon.socket_path.stat().st_mode & 0o777) == oct(0o600)
    assert "v1: pods labelled" in (denied_message(daemon) or "")
    daemon.validate(review({"deny": "no"}, uid="allowed-uid"))
    log = daemon.log()
    # log-format from the file (console, not JSON lines); log-level error from the file lost to the
    # harness's --log-level debug flag, so even allowed requests are logged.
    assert "allowed-uid" in log and '{"' not in log and "admission allowed" in log
    assert daemon.stop() == 0

    config_file.write_text("manifests: /x\nwatch-interval: 3\n")
    result = subprocess.run([*daemon.command()], capture_output=True, text=True, cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)}, timeout=60)
    assert result.returncode == 2
    assert "unknown option 'watch-interval'" in result.stderr and str(config_file) in result.stderr


@pytest.mark.parametrize("value", ["0", "-1", "two", ""])
def test_a_bad_worker_count_names_the_option(value: str) -> None:
    with pytest.raises(ConfigError, match="--workers"):
        _parse("--workers", value)


def test_namespaces_and_kubeconfig_are_one_or_the_other(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="two sources of namespaces"):
        _parse("--namespaces", "/a.yaml", "--kubeconfig", "/kubeconfig")


def test_auto_workers_are_at_least_two_so_that_growing_ones_can_be_replaced() -> None:
    # One process grows with the CEL engine's kept memory until MemoryMax kills it, failing what it serves.
    assert [default_workers(cores) for cores in (1, 2, 3, 4, 16)] == [2, 2, 3, 4, 4]


def test_the_metrics_listener_needs_its_token() -> None:
    with pytest.raises(ConfigError, match="--metrics-listen and --metrics-token-file must be given together"):
        _parse("--metrics-listen", "127.0.0.1:9443")
    with pytest.raises(ConfigError, match="--metrics-listen 'nine': expected HOST:PORT"):
        _parse("--metrics-listen", "nine", "--metrics-token-file", "/t")
