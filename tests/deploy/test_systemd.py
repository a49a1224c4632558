"""The systemd units verify, keep their hardening, and the hardening does not break the native CEL engine.

``systemd-analyze verify`` needs no running systemd (it loads the units offline), but it does insist
that ExecStart's binary exists. The tests therefore verify a copy of the unit whose ExecStart names this
environment's ``staticadm`` script; everything else is verified exactly as shipped.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from staticadm.cli import build_parser
from staticadm.server.config import resolve
from tests.deploy.conftest import EXAMPLES, SYSTEMD, run_subprocess

SHIPPED_EXEC = "/usr/local/bin/staticadm"
#: ``systemd-analyze security`` exposure, times ten (the tool's scale): 2.0 of 10 is "OK" territory.
EXPOSURE_THRESHOLD = 20


def _systemd_analyze() -> str:
    path = shutil.which("systemd-analyze")
    if path is None:
        pytest.fail("systemd-analyze is required for the unit tests (Debian/Ubuntu: apt-get install systemd)")
    return path


def _staticadm_script() -> Path:
    script = Path(sys.executable).parent / "staticadm"
    assert script.exists(), f"the test environment's console script is missing: {script}"
    return script


def _units_for_verify(directory: Path) -> list[Path]:
    service = (SYSTEMD / "staticadm.service").read_text()
    assert f"ExecStart={SHIPPED_EXEC} " in service
    (directory / "staticadm.service").write_text(
        service.replace(f"ExecStart={SHIPPED_EXEC} ", f"ExecStart={_staticadm_script()} "))
    shutil.copy(SYSTEMD / "staticadm.socket", directory / "staticadm.socket")
    return [directory / "staticadm.service", directory / "staticadm.socket"]


def _directives(unit: str) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in (SYSTEMD / unit).read_text().splitlines():
        if not line.strip() or line.lstrip().startswith(("#", ";", "[")):
            continue
        key, _, value = line.partition("=")
        found.setdefault(key.strip(), []).append(value.strip())
    return found


def test_units_pass_systemd_analyze_verify(tmp_path: Path) -> None:
    units = _units_for_verify(tmp_path)
    completed = subprocess.run([_systemd_analyze(), "verify", *map(str, units)], capture_output=True, text=True,
                               check=False, timeout=60)
    # verify exits 0 on unknown keys and bad values, only warning about them: any output is a failure.
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == "" and completed.stderr.strip() == "", completed.stdout + completed.stderr


def test_verify_would_catch_a_broken_unit(tmp_path: Path) -> None:
    # The check above is only worth something if verify notices mistakes in this environment.
    units = _units_for_verify(tmp_path)
    service = units[0]
    service.write_text(service.read_text().replace("ProtectKernelLogs=yes", "ProtectKernelLog=yes"))
    completed = subprocess.run([_systemd_analyze(), "verify", *map(str, units)], capture_output=True, text=True,
                               check=False, timeout=60)
    assert "ProtectKernelLog" in completed.stderr


def test_service_exposure_is_low(tmp_path: Path) -> None:
    units = _units_for_verify(tmp_path)
    completed = subprocess.run([_systemd_analyze(), "security", "--offline=true",
                                f"--threshold={EXPOSURE_THRESHOLD}", str(units[0])],
                               capture_output=True, text=True, check=False, timeout=60)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr


def test_service_has_the_required_settings() -> None:
    service = _directives("staticadm.service")
    expected = {
        "Type": ["notify"], "Restart": ["always"], "RuntimeDirectory": ["staticadm"],
        "StateDirectory": ["staticadm"], "NoNewPrivileges": ["yes"], "ProtectSystem": ["strict"],
        "ProtectHome": ["yes"], "PrivateTmp": ["yes"], "PrivateDevices": ["yes"], "ProtectKernelTunables": ["yes"],
        "ProtectKernelModules": ["yes"], "ProtectKernelLogs": ["yes"], "ProtectControlGroups": ["yes"],
        "RestrictNamespaces": ["yes"], "LockPersonality": ["yes"], "MemoryDenyWriteExecute": ["yes"],
        "CapabilityBoundingSet": [""], "RestrictAddressFamilies": ["AF_UNIX AF_INET AF_INET6"],
        # The socket unit's socket lives in the runtime directory: it must survive a service stop.
        "RuntimeDirectoryPreserve": ["yes"],
    }
    for key, value in expected.items():
        assert service.get(key) == value, key
    assert service["SystemCallFilter"][0] == "@system-service"
    assert service["WatchdogSec"] and service["ReadOnlyPaths"]
    # The read-only manifests directory is the one the example configuration serves.
    config = yaml.safe_load((SYSTEMD / "staticadm.yaml").read_text())
    assert service["ReadOnlyPaths"] == [f"-{config['manifests']}"]
    assert service["ExecStart"] == [f"{SHIPPED_EXEC} serve --config /etc/staticadm/staticadm.yaml"]


def test_socket_unit_serves_the_webhook_port_and_the_unix_socket() -> None:
    socket_unit = _directives("staticadm.socket")
    assert socket_unit["ListenStream"] == ["/run/staticadm/staticadm.sock", "127.0.0.1:8443"]
    assert socket_unit["Accept"] == ["no"]
    assert socket_unit["Service"] == ["staticadm.service"]


def test_example_config_is_accepted_by_serve_with_every_documented_option(tmp_path: Path) -> None:
    # Uncomment every "#key: value" line: each documented option must be one `serve --config` knows.
    lines = (SYSTEMD / "staticadm.yaml").read_text().splitlines()
    uncommented = [line[1:] if line.startswith("#") and ":" in line and not line.startswith("# ") else line
                   for line in lines]
    assert len([1 for a, b in zip(lines, uncommented, strict=True) if a != b]) >= 10
    config_file = tmp_path / "staticadm.yaml"
    # The two sources of namespaces are alternatives: each is tried without the other.
    for alternative in ("namespaces:", "kubeconfig:"):
        config_file.write_text("\n".join(line for line in uncommented if not line.startswith(alternative)) + "\n")
        config = resolve(build_parser().parse_args(["serve", "--config", str(config_file)]))
        assert str(config.manifests) == "/etc/staticadm/manifests"
        assert config.listen == ("127.0.0.1", 8443)
        assert config.socket_mode == 0o660
        assert config.tls_cert is not None and config.tls_cert.name == "serving.crt"
        assert (config.kubeconfig is None) == (alternative == "kubeconfig:")


_PR_SET_MDWE = 65
_PR_MDWE_REFUSE_EXEC_GAIN = 1
_MDWE_WRAPPER = f"""
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl({_PR_SET_MDWE}, {_PR_MDWE_REFUSE_EXEC_GAIN}, 0, 0, 0) != 0:
    sys.exit(77)
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
except OSError:
    pass
else:
    sys.exit(78)  # not enforced: the test would prove nothing
from staticadm.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _mdwe_supported() -> bool:
    probe = subprocess.run([sys.executable, "-c", _MDWE_WRAPPER, "--version"], capture_output=True, check=False)
    return probe.returncode == 0


def test_native_engine_works_under_memory_deny_write_execute(tmp_path: Path) -> None:
    # MemoryDenyWriteExecute= is what breaks JITs and libffi closures. systemd enforces it with the
    # kernel's PR_SET_MDWE where available (6.3+): run the CEL engine, the manifest loader and the
    # certificate code under that same restriction.
    if not sys.platform.startswith("linux") or not _mdwe_supported():
        pytest.skip("this kernel has no PR_SET_MDWE (Linux 6.3+); cannot emulate MemoryDenyWriteExecute")
    commands = [
        ["cel", "eval", 'quantity("1Gi").isLessThan(quantity("2Gi")) && "a-b".matches("^[a-z-]+$") '
                        '&& [1, 2].all(x, x > 0) && ip("10.0.0.1").family() == 4'],
        ["check", str(EXAMPLES)],
        ["certs", "--out-dir", str(tmp_path / "tls")],
    ]
    for argv in commands:
        completed = subprocess.run([sys.executable, "-c", _MDWE_WRAPPER, *argv], capture_output=True, text=True,
                                   check=False, timeout=120)
        assert completed.returncode == 0, f"{argv}: {completed.stdout}{completed.stderr}"
    assert (tmp_path / "tls" / "serving.key").exists()


@pytest.mark.parametrize("command", [["serve"], ["check"], ["review"], ["diff"], ["test"], ["audit"], ["certs"],
                                     ["webhook-config"], ["cel", "eval"]])
def test_every_command_help_carries_an_example(command: list[str]) -> None:
    result = run_subprocess(*command, "--help")
    assert result.code == 0
    text = " ".join(result.stdout.split())
    assert "example" in text.lower() and f"staticadm {command[0]}" in text.split("xample", 1)[1], text
    assert "exit" in text.lower()
