"""Command line: one small function per command; argument errors exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from staticadm import __version__
from staticadm.tables import default_output

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2


def _json_line(value: Any) -> str:
    # ensure_ascii=False keeps policy authors' unicode readable; floats keep their decimal point.
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


# -- cel eval ---------------------------------------------------------------------------------------


def _parse_var(text: str) -> tuple[str, Any]:
    name, sep, raw = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"--var expects NAME=JSON or NAME=@FILE, got {text!r}")
    from staticadm.yamljson import ParseError, parse_json, parse_stream

    if raw.startswith("@"):
        try:
            with open(raw[1:], encoding="utf-8") as handle:
                documents = [d for d in parse_stream(handle.read()) if d is not None]
        except (OSError, UnicodeDecodeError) as error:
            reason = error.strerror if isinstance(error, OSError) and error.strerror else error
            raise argparse.ArgumentTypeError(f"--var {name}: {raw[1:]}: {reason}") from error
        except ParseError as error:
            raise argparse.ArgumentTypeError(f"--var {name}: {raw[1:]}: not JSON or YAML: {error.problem}") from error
        if len(documents) != 1:
            raise argparse.ArgumentTypeError(f"--var {name}: {raw[1:]} must hold one document, holds {len(documents)}")
        return name, documents[0]
    try:
        return name, parse_json(raw)
    except ParseError as error:
        raise argparse.ArgumentTypeError(f"--var {name}: {error}") from error


def _evaluate_to_json(source: str, variables: dict[str, Any], mutating: bool = False) -> tuple[str, Any]:
    """(``"value"``, json) or (``"compile"``/``"runtime"``, message). In the mutating environment an
    ``Object{...}`` value is shown as the apply configuration it stands for and ``JSONPatch{...}`` values as
    the operations, as kube-apiserver would apply them."""
    from staticadm.cel import CompileError, EvalError, admission_environment, evaluate_standalone
    from staticadm.cel.libraries.objects import ConversionError, is_jsonpatch, is_object, to_plain
    from staticadm.cel.values import to_json_value

    outcome = evaluate_standalone(source, variables, mutating=mutating)
    if isinstance(outcome, CompileError):
        return "compile", outcome.message
    if isinstance(outcome, EvalError):
        return "runtime", outcome.message
    if mutating and (is_object(outcome) or (isinstance(outcome, list) and outcome and all(map(is_jsonpatch, outcome)))):
        type_errors: list[str] = []
        try:
            if is_object(outcome):
                plain = to_plain(outcome, None, type_errors)
            else:
                plain = [{key: to_plain(value, None, type_errors) for key, value in item["fields"].items()}
                         for item in outcome]
        except ConversionError as error:
            return "runtime", str(error)
        if type_errors:
            return "runtime", "type mismatch: " + "\n".join(type_errors)
        return "value", plain
    renderers = {name: t.to_string for name, t in admission_environment(mutating).opaque_types.items()}
    return "value", to_json_value(outcome, renderers)


def command_cel_eval(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    if args.jsonl:
        if args.expression is not None or args.var:
            stderr.write("staticadm cel eval: --jsonl reads expressions from stdin; give no EXPR or --var\n")
            return EXIT_USAGE
        for line in stdin:
            if not line.strip():
                continue
            stdout.write(_json_line(_evaluate_jsonl_line(line)) + "\n")
            stdout.flush()
        return EXIT_OK
    if args.expression is None:
        stderr.write("staticadm cel eval: EXPR is required (or use --jsonl)\n")
        return EXIT_USAGE
    phase, result = _evaluate_to_json(args.expression, dict(args.var), mutating=args.mutating)
    if phase == "value":
        stdout.write(_json_line(result) + "\n")
        return EXIT_OK
    stderr.write(f"{phase} error: {result}\n")
    return EXIT_USAGE if phase == "compile" else EXIT_FAILED


def _evaluate_jsonl_line(line: str) -> dict[str, Any]:
    from staticadm.yamljson import ParseError, parse_json

    try:
        request = parse_json(line)
    except ParseError as error:
        return {"error": f"invalid JSON input line: {error.problem}", "phase": "input"}
    if not isinstance(request, dict) or not isinstance(request.get("expr"), str):
        return {"error": 'each input line must be an object with a string "expr"', "phase": "input"}
    variables = request.get("vars", {})
    if not isinstance(variables, dict):
        return {"error": '"vars" must be an object mapping names to JSON values', "phase": "input"}
    phase, result = _evaluate_to_json(request["expr"], variables)
    if phase == "value":
        return {"value": result}
    return {"error": result, "phase": phase}


# -- check ------------------------------------------------------------------------------------------


def command_check(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.deploy.checks import outage_check, registration_check, registration_directory_problem
    from staticadm.deploy.control_plane import control_plane_check
    from staticadm.manifests.check import ExtraCheck, run_check

    directories = [*args.manifests, *args.directories]
    if not directories and not args.filenames:
        stderr.write("staticadm check: give a manifest directory (DIR or --manifests DIR) or files (-f FILE)\n")
        return EXIT_USAGE
    extra_checks: list[ExtraCheck] = [control_plane_check, outage_check(args.webhook_config_dir)]
    if args.webhook_config_dir is not None:
        problem = registration_directory_problem(args.webhook_config_dir)
        if problem is not None:
            stderr.write(f"staticadm check: {problem}\n")
            return EXIT_USAGE
        extra_checks.append(registration_check(args.webhook_config_dir))
    return run_check(directories, args.output, stdout, stderr, files=args.filenames, strict=args.strict,
                     extra_checks=extra_checks, allow_world_writable=args.allow_world_writable_manifests)


# -- serve ------------------------------------------------------------------------------------------


def command_serve(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    import os

    from staticadm.server.config import ConfigError, resolve

    try:
        config = resolve(args)
    except ConfigError as error:
        stderr.write(f"staticadm serve: {error}\n")
        return EXIT_USAGE
    # Before prometheus_client is imported: set, these would make it keep every series in memory-mapped
    # files there, and a full file system would then kill whoever updates one (SIGBUS). Metrics stay in
    # each process's memory; the supervisor adds them up (staticadm.server.metrics).
    for name in ("PROMETHEUS_MULTIPROC_DIR", "prometheus_multiproc_dir"):
        os.environ.pop(name, None)
    from staticadm.server.main import serve

    return serve(config, stderr)


# -- diff -------------------------------------------------------------------------------------------


def _audit_source(args: argparse.Namespace) -> Any:
    """The --audit-log files and filters, or None; ValueError naming a bad --audit-since/--audit-until."""
    from staticadm.offline.audit_log import AuditFilters, parse_timestamp
    from staticadm.offline.review import AuditSource

    if not args.audit_logs:
        if any((args.audit_verbs, args.audit_resources, args.audit_namespaces, args.audit_since, args.audit_until)):
            raise ValueError("the --audit-* filters select requests of --audit-log FILE: give one")
        return None
    bounds = []
    for flag, text in (("--audit-since", args.audit_since), ("--audit-until", args.audit_until)):
        try:
            bounds.append(parse_timestamp(text) if text else None)
        except ValueError as error:
            raise ValueError(f"{flag}: not an RFC 3339 time (2024-05-01T10:00:00Z): {error}") from None
    filters = AuditFilters(frozenset(args.audit_verbs), frozenset(args.audit_resources),
                           frozenset(args.audit_namespaces), bounds[0], bounds[1])
    return AuditSource(tuple(args.audit_logs), filters)


def _request_settings(args: argparse.Namespace) -> Any:
    from staticadm.offline.request_builder import RequestSettings

    return RequestSettings(operation=args.operation, username=args.user, uid=args.user_uid, groups=tuple(args.groups),
                           namespace=args.namespace, subresource=args.subresource, dry_run=args.dry_run)


def _request_inputs(args: argparse.Namespace, command: str, positional: list[str],
                    stderr: TextIO) -> tuple[list[str], Any] | None:
    """(request files, audit logs) of review and diff, or None after saying what is missing."""
    inputs = [*positional, *args.filenames]
    try:
        audit = _audit_source(args)
    except ValueError as error:
        stderr.write(f"staticadm {command}: {error}\n")
        return None
    if not inputs and audit is None:
        stderr.write(f"staticadm {command}: give at least one request, object file or directory of them (REQUEST "
                     "or -f FILE), or --audit-log FILE\n")
        return None
    return inputs, audit


def command_diff(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.offline.diff import run_diff

    found = _request_inputs(args, "diff", args.requests, stderr)
    if found is None:
        return EXIT_USAGE
    inputs, audit = found
    return run_diff(args.live, args.new, inputs, default_output(args.output, stdout), stdin, stdout, stderr,
                    settings=_request_settings(args),
                    old_path=args.old, audit=audit)


# -- test -------------------------------------------------------------------------------------------


def command_test(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.policytest.report import run_tests

    return run_tests(args.paths, default_output(args.output, stdout), args.junit, stdout, stderr,
                     run=args.run, fail_only=args.fail_only)


# -- review -----------------------------------------------------------------------------------------


def command_review(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.offline.review import run_review

    positional = list(args.requests)
    manifests = args.manifests
    if manifests is None:
        # As check and diff: the manifest directory is the first positional argument without --manifests.
        if not positional:
            stderr.write("staticadm review: give the manifest directory (DIR or --manifests DIR)\n")
            return EXIT_USAGE
        manifests = positional.pop(0)
        if not Path(manifests).is_dir():
            stderr.write(f"staticadm review: {manifests} is not a directory: give the manifest directory first "
                         "(DIR or --manifests DIR)\n")
            return EXIT_USAGE
    found = _request_inputs(args, "review", positional, stderr)
    if found is None:
        return EXIT_USAGE
    inputs, audit = found
    if args.namespaces and args.kubeconfig:
        stderr.write("staticadm review: --namespaces and --kubeconfig are two sources of namespaces: give one\n")
        return EXIT_USAGE
    return run_review(manifests, args.namespaces, default_output(args.output, stdout), inputs, stdin, stdout, stderr,
                      endpoint=args.endpoint, settings=_request_settings(args), old_path=args.old,
                      kubeconfig=args.kubeconfig, audit=audit, report_layout=args.reports_per)


# -- audit ----------------------------------------------------------------------------------------


def command_audit(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.offline.cluster_audit import run_audit
    from staticadm.offline.request_builder import RequestSettings

    directories = [*args.manifests, *args.directories]
    if len(directories) != 1:
        stderr.write("staticadm audit: give one manifest directory (DIR or --manifests DIR)\n")
        return EXIT_USAGE
    if args.page_size < 1:
        stderr.write("staticadm audit: --page-size must be at least 1\n")
        return EXIT_USAGE
    settings = RequestSettings(operation="UPDATE", username=args.user, uid=args.user_uid,
                               groups=tuple(args.groups))
    if args.apply and args.output not in ("policyreport", "openreport"):
        stderr.write("staticadm audit: --apply writes reports: give -o policyreport or -o openreport\n")
        return EXIT_USAGE
    return run_audit(directories[0], args.kubeconfig, default_output(args.output, stdout), args.junit, settings,
                     stdout, stderr, page_size=args.page_size, apply=args.apply, report_layout=args.reports_per)


# -- certs ----------------------------------------------------------------------------------------


def command_certs(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    import datetime
    from pathlib import Path

    from staticadm.atomicfile import UnsafeDirectoryError
    from staticadm.deploy.certs import CertificateError, create_certificates
    from staticadm.server.config import default_state_dir

    directory = Path(args.out_dir) if args.out_dir else default_state_dir() / "tls"
    from staticadm.deploy.certs import DEFAULT_HOSTS

    hosts = [host for entry in args.hosts for host in entry.split(",") if host.strip()] if args.hosts \
        else list(DEFAULT_HOSTS)
    if args.days < 1 or args.ca_days < 1:
        stderr.write("staticadm certs: --days and --ca-days must be at least 1\n")
        return EXIT_USAGE
    try:
        files = create_certificates(directory, hosts=hosts, validity=datetime.timedelta(days=args.days),
                                    ca_validity=datetime.timedelta(days=args.ca_days), force=args.force,
                                    renew=args.renew, ca_directory=Path(args.ca_dir) if args.ca_dir else None)
    except FileExistsError as error:
        stderr.write(f"staticadm certs: {error}\n")
        return EXIT_FAILED
    except CertificateError as error:
        stderr.write(f"staticadm certs: {error}\n")
        return EXIT_USAGE if not args.renew else EXIT_FAILED
    except UnsafeDirectoryError as error:
        stderr.write(f"staticadm certs: {error}\n")
        return EXIT_FAILED
    except OSError as error:
        stderr.write(f"staticadm certs: {error.filename or directory}: {error.strerror or error}\n")
        return EXIT_FAILED
    what = "serving certificate renewed with the existing CA" if args.renew else "CA and serving certificate created"
    stdout.write(f"{what} in {directory}\n"
                 f"  CA (the webhook caBundle, --ca-file): {files.ca_cert}\n"
                 f"  CA key (only `certs` reads it):       {files.ca_key}\n"
                 f"  serving certificate (--tls-cert):     {files.cert}\n"
                 f"  serving key (--tls-key, mode 0600):   {files.key}\n")
    return EXIT_OK


# -- webhook-config -------------------------------------------------------------------------------


def command_webhook_config(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    import yaml

    from staticadm.defaults import DEFAULT_TIMEOUT_SECONDS
    from staticadm.deploy.registration import installed_client_settings
    from staticadm.deploy.webhooks import (
        WebhookConfigError,
        WebhookSettings,
        read_ca_bundle,
        webhook_configurations,
    )
    from staticadm.manifests.loader import load_manifest_directory

    installed = installed_client_settings(args.out_dir) if args.out_dir and args.registration == "static" else None
    if (args.url is None or args.ca_file is None) and installed is None:
        stderr.write("staticadm webhook-config: give --url and --ca-file (they are taken from the installed static "
                     "registration only when --out-dir holds one)\n")
        return EXIT_USAGE
    url = args.url if args.url is not None else installed.url if installed is not None else ""
    failure_policy = args.failure_policy or (installed.failure_policy if installed is not None else "Fail")
    timeout = args.timeout if args.timeout is not None else (
        installed.timeout_seconds if installed is not None else DEFAULT_TIMEOUT_SECONDS)
    try:
        if args.ca_file is None and installed is not None:
            ca_bundle = read_ca_bundle(installed.ca_bundle, f"(the caBundle installed in {args.out_dir})")
        else:
            with open(args.ca_file, "rb") as handle:
                ca_bundle = read_ca_bundle(handle.read(), args.ca_file)
    except OSError as error:
        stderr.write(f"staticadm webhook-config: --ca-file {args.ca_file}: {error.strerror or error}\n")
        return EXIT_USAGE
    except WebhookConfigError as error:
        stderr.write(f"staticadm webhook-config: {error}\n")
        return EXIT_USAGE
    loaded = load_manifest_directory(args.manifests)
    if loaded.errors:
        # A configuration generated from a directory kube-apiserver would refuse would be a guess.
        for manifest_error in loaded.errors:
            stderr.write(f"staticadm webhook-config: {manifest_error}\n")
        return EXIT_FAILED
    settings = WebhookSettings(url=url, ca_bundle=ca_bundle, failure_policy=failure_policy,
                               timeout_seconds=timeout, registration=args.registration)
    try:
        generated = webhook_configurations(loaded, settings)
    except WebhookConfigError as error:
        stderr.write(f"staticadm webhook-config: {error}\n")
        return EXIT_USAGE
    for note in generated.notes:
        stderr.write(f"staticadm webhook-config: {note}\n")
    if args.out_dir is not None:
        return _write_webhook_files(Path(args.out_dir), generated.documents, args.registration, stdout, stderr)
    if generated.documents:
        stdout.write(yaml.safe_dump_all([dict(d) for d in generated.documents], sort_keys=False,
                                        default_flow_style=False, explicit_start=True))
    return EXIT_OK


#: Where each configuration goes under --out-dir: static manifests into the two directories the
#: AdmissionConfiguration names for kube-apiserver's plugins; API objects side by side for kubectl apply.
_WEBHOOK_FILES = {
    ("static", "ValidatingWebhookConfiguration"): "validating-webhooks/{name}.yaml",
    ("static", "MutatingWebhookConfiguration"): "mutating-webhooks/{name}.yaml",
    ("api", "ValidatingWebhookConfiguration"): "validating-{name}.yaml",
    ("api", "MutatingWebhookConfiguration"): "mutating-{name}.yaml",
}


def _write_webhook_files(out_dir: Path, documents: Any, registration: str, stdout: TextIO, stderr: TextIO) -> int:
    """One file per configuration, each replaced atomically (kube-apiserver reloads static manifests when
    they change and must never read half of one); a configuration no longer generated is removed, so the
    directory says exactly what the policies need."""
    import yaml

    from staticadm.atomicfile import write_atomically
    from staticadm.deploy.webhooks import API_NAME, STATIC_NAME

    name = STATIC_NAME if registration == "static" else API_NAME
    wanted = {}
    for document in documents:
        relative = _WEBHOOK_FILES[(registration, document["kind"])].format(name=document["metadata"]["name"])
        wanted[out_dir / relative] = yaml.safe_dump(dict(document), sort_keys=False, default_flow_style=False)
    try:
        for path, text in wanted.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomically(path, text.encode())
            stdout.write(f"wrote {path}\n")
        for (kind_registration, _), pattern in _WEBHOOK_FILES.items():
            stale = out_dir / pattern.format(name=name)
            if kind_registration == registration and stale not in wanted and stale.exists():
                stale.unlink()
                stdout.write(f"removed {stale} (no policy of its kind)\n")
    except OSError as error:
        stderr.write(f"staticadm webhook-config: --out-dir {out_dir}: {error.strerror or error}\n")
        return EXIT_FAILED
    return EXIT_OK


# -- completion -------------------------------------------------------------------------------------


def command_completion(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.completion import completion_script

    stdout.write(completion_script(args.shell, build_parser()))
    return EXIT_OK


# -- version ----------------------------------------------------------------------------------------


def command_version(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.build_info import build_info
    from staticadm.yamltext import dump_yaml

    info = build_info()
    if args.output == "json":
        stdout.write(json.dumps(info, indent=2, ensure_ascii=False) + "\n")
    elif args.output == "yaml":
        stdout.write(dump_yaml(info))
    else:
        stdout.write(f"staticadm {info['version']}\n"
                     f"git commit: {info['gitCommit'] or 'unknown'}\n"
                     f"CEL engine: cel-expr-python {info['celExprPythonVersion'] or 'unknown'}\n"
                     f"Python: {info['pythonVersion']} ({info['platform']})\n")
    return EXIT_OK


# -- parser -----------------------------------------------------------------------------------------


class UsageError(Exception):
    """A command line a command cannot run, said as ``staticadm review: <message>`` (the command that refused it)."""

    def __init__(self, prog: str, message: str) -> None:
        super().__init__(message)
        self.prog = prog
        self.message = message


class _OptionsAnywhere(argparse.ArgumentParser):
    """Options anywhere on the line (``review DIR -o json pod.yaml``), as kubectl and its peers take them:
    each command's own parser collects its positionals around the options (argparse's intermixed parsing),
    while a parser of subcommands parses as usual, since its positional is the subcommand."""

    _intermixing = False

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        # parse_known_intermixed_args calls back here for its two passes: those parse as usual.
        if self._intermixing or self._subparsers is not None:
            return super().parse_known_args(args, namespace)
        self._intermixing = True
        try:
            return super().parse_known_intermixed_args(args, namespace)
        finally:
            self._intermixing = False

    def error(self, message: str) -> NoReturn:
        # Raised, not printed: main() writes it to the command's stderr, naming this (sub)command.
        raise UsageError(self.prog, message)


def _add_reports_per(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--reports-per", choices=("namespace", "object"), default="namespace",
                        help="with -o policyreport|openreport: a report per namespace and a cluster one, the "
                             "objects named in each result; or a report per object, its scope the object, as "
                             "Kyverno writes them (default: namespace)")


def _each_parser(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """The parser and every parser of its subcommands, at any depth."""
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for subparser in dict.fromkeys(action.choices.values()):
                found.extend(_each_parser(subparser))
    return found


def _add_no_color(parser: argparse.ArgumentParser) -> None:
    """--no-color on every command, before or after its name (a command's own copy sets nothing when absent,
    so it never undoes the one given before the command's name). Not on ``serve``: the daemon writes logs, whose
    form --log-format sets, and every serve option can come from its configuration file."""
    help_text = "no colour in the reports, even on a terminal (as NO_COLOR=1)"
    parser.add_argument("--no-color", dest="no_color", action="store_true", default=False, help=help_text)
    for subparser in _each_parser(parser)[1:]:
        if subparser.prog.split()[-1] == "serve":
            continue
        subparser.add_argument("--no-color", dest="no_color", action="store_true", default=argparse.SUPPRESS,
                               help=help_text)


def _command_name(args: argparse.Namespace) -> str:
    """``staticadm review``, ``staticadm cel eval``: the command a parsed line runs."""
    words = ["staticadm", *(word for word in (getattr(args, "command", None), getattr(args, "cel_command", None))
                            if word)]
    return " ".join(words)



def _add_object_arguments(parser: argparse.ArgumentParser) -> None:
    """How a plain object becomes the request kube-apiserver would send (review and diff)."""
    from staticadm.defaults import DEFAULT_USERNAME

    parser.add_argument("-f", "--filename", dest="filenames", action="append", default=[], metavar="FILE",
                               help="an object or AdmissionReview file, as REQUEST; repeatable")
    parser.add_argument("--operation", choices=("CREATE", "UPDATE", "DELETE", "CONNECT"), default="CREATE",
                               help="for plain objects: the operation (default: CREATE; DELETE sends the object "
                                    "as oldObject)")
    parser.add_argument("--old", metavar="FILE",
                               help="for UPDATE: the objects before the change, matched to the inputs by "
                                    "apiVersion, kind, namespace and name")
    parser.add_argument("--user", default=DEFAULT_USERNAME,
                        help=f"for plain objects: the username (default: {DEFAULT_USERNAME})")
    parser.add_argument("--uid", dest="user_uid", default="", help="for plain objects: the user's uid")
    parser.add_argument("--group", dest="groups", action="append", default=[], metavar="GROUP",
                        help="for plain objects: a group the user authenticated with; repeatable. "
                             "system:authenticated is added, as kube-apiserver adds it")
    parser.add_argument("-n", "--namespace",
                        help="for plain objects of namespaced kinds that name none: their namespace, as kubectl's "
                             "(default: default); an object naming another one is refused, as kubectl refuses it")
    parser.add_argument("--subresource", default="", metavar="[RESOURCE[.GROUP]/]NAME",
                        help="for plain objects: the subresource, e.g. status, or deployments.apps/scale for an "
                             "autoscaling/v1 Scale")
    parser.add_argument("--dry-run", action="store_true", help="for plain objects: request.dryRun true")
    audit = parser.add_argument_group(
        "requests from kube-apiserver's audit log",
        "audit.k8s.io/v1 Event JSON lines (also .gz, or - for stdin), level Request or RequestResponse: each "
        "recorded write becomes the AdmissionReview kube-apiserver sent; events without the object "
        "(Metadata level, ...) are counted on stderr, never guessed")
    audit.add_argument("--audit-log", dest="audit_logs", action="append", default=[], metavar="FILE",
                       help="an audit log; repeatable (rotated files)")
    audit.add_argument("--audit-verb", dest="audit_verbs", action="append", default=[],
                       choices=("create", "update", "patch", "delete"), help="only this verb; repeatable")
    audit.add_argument("--audit-resource", dest="audit_resources", action="append", default=[],
                       metavar="RESOURCE[.GROUP][/SUBRESOURCE]",
                       help="only this resource, e.g. pods, deployments.apps, pods/status, pods/*; repeatable")
    audit.add_argument("--audit-namespace", dest="audit_namespaces", action="append", default=[], metavar="NS",
                       help="only requests in this namespace; repeatable")
    audit.add_argument("--audit-since", metavar="TIME", help="only requests received at or after TIME (RFC 3339)")
    audit.add_argument("--audit-until", metavar="TIME", help="only requests received before TIME (RFC 3339)")



def build_parser() -> argparse.ArgumentParser:
    from staticadm.defaults import DEFAULT_USERNAME

    parser = _OptionsAnywhere(
        prog="staticadm",
        description="Admission sidecar for kube-apiserver: static ValidatingAdmissionPolicy and "
        "MutatingAdmissionPolicy manifests, evaluated exactly as kube-apiserver does.",
    )
    parser.add_argument("--version", action="version", version=f"staticadm {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    cel_parser = commands.add_parser("cel", help="the Kubernetes CEL environment")
    cel_commands = cel_parser.add_subparsers(dest="cel_command", required=True, metavar="SUBCOMMAND")
    eval_parser = cel_commands.add_parser(
        "eval",
        help="evaluate one expression (or JSON lines from stdin) in the admission CEL environment",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Prints the result as JSON. Exit 0 on a value, 1 on a runtime error, 2 on a compile error.\n\n"
                    "example: staticadm cel eval --var object=@pod.yaml \"object.spec.containers.all(c, "
                    "has(c.resources))\"\n"
                    "         staticadm cel eval --mutating --var object=@pod.yaml "
                    "\"Object{metadata: Object.metadata{labels: {'team': 'a'}}}\"",
    )
    eval_parser.add_argument("expression", nargs="?", metavar="EXPR", help="the CEL expression")
    eval_parser.add_argument(
        "--var",
        action="append",
        type=_parse_var,
        default=[],
        metavar="NAME=JSON",
        help="bind an admission variable (object, oldObject, request, namespaceObject, "
        "variables) to a JSON value, or to the JSON/YAML document in FILE with NAME=@FILE; repeatable",
    )
    eval_parser.add_argument(
        "--mutating",
        action="store_true",
        help="the MutatingAdmissionPolicy environment: Object{...} (printed as the apply configuration) and "
        "JSONPatch{...} (printed as the operations)",
    )
    eval_parser.add_argument(
        "--jsonl",
        action="store_true",
        help='read {"expr": ..., "vars": {...}} lines from stdin, write one result line each',
    )
    eval_parser.set_defaults(handler=command_cel_eval)

    check_parser = commands.add_parser(
        "check",
        help="validate manifest directories offline, exactly as the daemon loads them",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Loads each directory as the daemon (and kube-apiserver's static-manifest loader) would,\n"
                    "reporting every error with its file, document and field, and warnings about what loads\n"
                    "but probably does not do what was meant. Files given with -f are checked together, as if\n"
                    "they were one directory. The writes a kubeadm control plane always makes (kube-proxy and\n"
                    "CoreDNS pods, mirror pods, node status and leases, events) are replayed: a policy refusing\n"
                    "one is named with the write, and so is every one the webhook registration sends under\n"
                    "failurePolicy Fail (refused while staticadm is down). With --webhook-config-dir, the\n"
                    "installed registration is compared with the policies: one it does not send all of its\n"
                    "requests is an error.\n\n"
                    "Exit codes: 0 everything valid (warnings allowed); 1 something invalid; 2 usage.\n\n"
                    "example: staticadm check /etc/staticadm/manifests\n"
                    "         staticadm check -f policy.yaml -f binding.yaml -o json")
    check_parser.add_argument("directories", nargs="*", metavar="DIR", help="manifest directories")
    check_parser.add_argument("--manifests", action="append", default=[], metavar="DIR",
                              help="a manifest directory, as DIR (the flag every command spells alike); repeatable")
    check_parser.add_argument("-f", "--filename", dest="filenames", action="append", default=[], metavar="FILE",
                              help="a manifest file; all of them are checked together as one set; repeatable")
    check_parser.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), default="text", help="report format (default: text)"
    )
    check_parser.add_argument("--strict", action="store_true",
                              help="type-checking warnings (expressions checked against the schemas of the kinds a "
                                   "ValidatingAdmissionPolicy matches, as kube-apiserver does) and control-plane "
                                   "writes a policy refuses are errors")
    check_parser.add_argument("--allow-world-writable-manifests", action="store_true",
                              help="check as a daemon started with this option: world-writable directories and "
                                   "files are warnings, not the errors the daemon refuses to load them with")
    check_parser.add_argument("--webhook-config-dir", metavar="DIR", default=None,
                              help="the installed static webhook registration (webhook-config --out-dir DIR, holding "
                                   "validating-webhooks/ and mutating-webhooks/), read only: a policy it does not "
                                   "send all of its requests is an error, and the outage warnings are about it "
                                   "(default: the registration webhook-config would generate)")
    check_parser.set_defaults(handler=command_check)

    review_parser = commands.add_parser(
        "review", help="evaluate requests (AdmissionReviews or plain objects) against a manifest directory, offline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Each input document is an AdmissionReview or a plain Kubernetes object, for which the\n"
                    "request kube-apiserver would send is built (resource and scope of built-in kinds from\n"
                    "Kubernetes 1.36, others guessed as client-go does). A v1 List or a typed list (PodList, ...),\n"
                    "as kubectl get -o yaml and kube-apiserver write them, stands for each of its items.\n\n"
                    "Exit codes: 0 every request allowed; 3 some request denied; 4 some policy failed to\n"
                    "evaluate (whatever its failurePolicy made of it); 1 invalid manifests; 2 unusable input.\n\n"
                    "example: staticadm review /etc/staticadm/manifests -f pod.yaml\n"
                    "         staticadm review --manifests DIR --operation UPDATE --old before.yaml -f after.yaml\n"
                    "         staticadm review DIR --audit-log /var/log/kubernetes/audit.log --audit-verb create")
    review_parser.add_argument("--manifests", metavar="DIR",
                               help="the admission policy manifest directory (or give it as the first DIR)")
    review_parser.add_argument("--endpoint", choices=("validate", "mutate", "both"), default="both",
                               help="which webhook to answer as; both runs the mutating policies first and "
                                    "validates the mutated object, as kube-apiserver orders them (default: both)")
    review_parser.add_argument("--namespaces", metavar="FILE",
                               help="Namespace objects (YAML/JSON, v1 List allowed) for selectors and namespaceObject")
    review_parser.add_argument("--kubeconfig", metavar="FILE",
                               help="read namespaces from kube-apiserver (the kubeconfig's current context), as "
                                    "the daemon does with the same flag")
    review_parser.add_argument("-o", "--output", choices=("table", "wide", "text", "json", "yaml", "policyreport",
                                                          "openreport"),
                               help="table: a row per request (the default on a terminal; wide adds the patch, "
                                    "errors, policies and input), text: a paragraph per request (the default "
                                    "elsewhere), or one ReviewResult per request (the request, the "
                                    "AdmissionReview answer and every policy's and binding's decision: JSON "
                                    "Schema staticadm/schemas/review-result.v1alpha1.schema.json) as a JSON line "
                                    "or a YAML document; policyreport: wgpolicyk8s.io/v1alpha2 PolicyReports (one "
                                    "per namespace) and a ClusterPolicyReport, openreport: the same as "
                                    "openreports.io/v1alpha1 Reports and a ClusterReport")
    _add_reports_per(review_parser)
    review_parser.add_argument("requests", nargs="*", metavar="[DIR] REQUEST",
                               help="the manifest directory first unless --manifests is given, then AdmissionReview "
                                    "or object files (JSON or YAML, several documents and Lists allowed), "
                                    "directories of them, or - for stdin")
    _add_object_arguments(review_parser)
    review_parser.set_defaults(handler=command_review)

    diff_parser = commands.add_parser(
        "diff", help="what a new manifest directory would answer differently, over recorded requests, offline",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Evaluates each request (AdmissionReviews or plain objects, as for review; a directory\n"
                    "stands for its .json/.yaml files) at /mutate and /validate against LIVE and NEW, and reports\n"
                    "what would change: allowed_to_denied, denied_to_allowed, denial_message, patch, warnings,\n"
                    "audit_annotations, with the policies that cause it. The same comparison as\n"
                    "serve --shadow-manifests.\n\n"
                    "Exit codes: 0 no differences; 3 some request would be answered differently; 1 an invalid\n"
                    "directory; 2 unusable input.\n\n"
                    "example: staticadm diff /etc/staticadm/manifests ./next recorded-requests/")
    diff_parser.add_argument("live", metavar="LIVE", help="the manifest directory in service")
    diff_parser.add_argument("new", metavar="NEW", help="the manifest directory to compare with it")
    diff_parser.add_argument("requests", nargs="*", metavar="REQUEST",
                             help="AdmissionReview or object files, or directories of them")
    diff_parser.add_argument("-o", "--output", choices=("table", "wide", "text", "json", "yaml"),
                             help="table: a row per difference (the default on a terminal; wide: the live and new "
                                  "policies apart and the input), text: one line per difference (the default "
                                  "elsewhere), or the whole result as JSON or YAML")
    _add_object_arguments(diff_parser)
    diff_parser.set_defaults(handler=command_diff)

    test_parser = commands.add_parser(
        "test", help="run declarative policy tests (PolicyTest files) against their manifests, for CI",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Finds every staticadm.io/v1alpha1 PolicyTest document in the given files and, recursively,\n"
                    "directories; evaluates each case with the daemon's engine against the manifests the file\n"
                    "names, and compares the answer with the case's expectation (docs/policy-tests.md,\n"
                    "\"Policy tests\").\n\n"
                    "Exit codes: 0 every case passed; 1 some case failed; 2 a test file or its manifests\n"
                    "are unusable, no test was found, or --run selects no case.\n\n"
                    "example: staticadm test manifests/examples/tests\n"
                    "         staticadm test --junit report.xml policies/\n"
                    "         staticadm test --run 'example policies/privileged' --fail-only -o markdown tests/")
    test_parser.add_argument("paths", nargs="+", metavar="PATH", help="test files or directories holding them")
    test_parser.add_argument("-o", "--output", choices=("table", "wide", "text", "json", "yaml", "markdown"),
                             help="table: a row per case (the default on a terminal; wide adds why and the file), "
                                  "text: a readable summary with diffs (the default elsewhere), the whole result as "
                                  "JSON or YAML, or Markdown for a pull-request comment")
    test_parser.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report to FILE (every case run)")
    test_parser.add_argument("--run", metavar="REGEX",
                             help="run only the cases whose name TEST/CASE matches, as go test -run: the pattern "
                                  "split on '/' (outside brackets), each part searched in the same level of the name")
    test_parser.add_argument("--fail-only", action="store_true",
                             help="print only failed cases and unusable files (the summary still counts all)")
    test_parser.set_defaults(handler=command_test)

    audit_parser = commands.add_parser(
        "audit", help="evaluate the objects a cluster already holds against a manifest directory (read-only)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Lists, in pages, the existing objects of every resource the policies' rules select for UPDATE\n"
                    "(found by API discovery) and evaluates each as kube-apiserver would on an UPDATE that\n"
                    "changes nothing: mutating policies first, then the validating ones, with namespaces and\n"
                    "authorizer checks answered by the cluster. Reports per policy the objects it matched and\n"
                    "those it would deny, warn about, audit, change or fail on. Only reads (get, list).\n\n"
                    "Exit codes: 0 nothing would be denied; 3 some object would be denied; 4 some policy\n"
                    "failed to evaluate; 1 invalid manifests; 2 the cluster cannot be read, or usage.\n\n"
                    "example: staticadm audit ./next --junit audit.xml     (the cluster kubectl talks to)")
    audit_parser.add_argument("directories", nargs="*", metavar="DIR", help="the manifest directory")
    audit_parser.add_argument("--manifests", action="append", default=[], metavar="DIR",
                              help="the manifest directory, as DIR")
    audit_parser.add_argument("--kubeconfig", metavar="FILE",
                              help="the cluster to read (the kubeconfig's current context): list on the "
                                   "resources audited, namespaces, and SubjectAccessReview for authorizer checks "
                                   "(default: as kubectl, the files $KUBECONFIG lists, else ~/.kube/config)")
    audit_parser.add_argument("-o", "--output", choices=("table", "wide", "text", "json", "yaml", "policyreport",
                                                         "openreport"),
                              help="table: a row per policy (the default on a terminal; wide adds its resources), "
                                   "text: each finding (the default elsewhere), json|yaml: an AuditReport; "
                                   "policyreport: wgpolicyk8s.io/v1alpha2 PolicyReports (one per namespace) and a "
                                   "ClusterPolicyReport, openreport: openreports.io/v1alpha1 Reports and a "
                                   "ClusterReport")
    _add_reports_per(audit_parser)
    audit_parser.add_argument("--apply", action="store_true",
                              help="with -o policyreport|openreport: write the reports to the cluster with "
                                   "server-side apply (field manager staticadm) instead of printing them")
    audit_parser.add_argument("--junit", metavar="FILE", help="also write a JUnit XML report (one suite per policy)")
    audit_parser.add_argument("--user", default=DEFAULT_USERNAME,
                              help=f"the username of the UPDATE (default: {DEFAULT_USERNAME})")
    audit_parser.add_argument("--uid", dest="user_uid", default="", help="the user's uid")
    audit_parser.add_argument("--group", dest="groups", action="append", default=[], metavar="GROUP",
                              help="a group the user authenticated with; repeatable. system:authenticated is "
                                   "added, as kube-apiserver adds it")
    audit_parser.add_argument("--page-size", type=int, default=500, metavar="N",
                              help="objects per list request (default: 500, as kubectl)")
    audit_parser.set_defaults(handler=command_audit)

    certs_parser = commands.add_parser(
        "certs", help="create the local CA and the HTTPS serving certificate kube-apiserver trusts",
        description="Writes ca.crt, ca.key, serving.crt and serving.key (keys mode 0600). The daemon reloads "
                    "rotated serving files without a restart; --renew reissues the serving certificate with "
                    "the existing CA so the webhook caBundle stays valid. Exit 0 written, 1 refused or failed, "
                    "2 usage. Example: staticadm certs --ca-dir /etc/staticadm/ca --out-dir /etc/staticadm/tls; "
                    "a year later: staticadm certs --ca-dir /etc/staticadm/ca --out-dir /etc/staticadm/tls --renew")
    certs_parser.add_argument("--out-dir", metavar="DIR", default=None,
                              help="where to write the files (default: tls/ under the daemon's state directory, "
                                   "which is where `staticadm serve` looks without --tls-cert)")
    certs_parser.add_argument("--ca-dir", metavar="DIR", default=None,
                              help="keep ca.crt and ca.key here instead of in --out-dir, so that what the daemon "
                                   "mounts holds no CA key (the static pod); give it again with --renew")
    certs_parser.add_argument("--hosts", action="append", default=None, metavar="HOST[,HOST...]",
                              help="IP addresses and DNS names of the serving certificate; repeatable "
                                   "(default: 127.0.0.1,::1,localhost)")
    certs_parser.add_argument("--days", type=int, default=365, help="serving certificate lifetime (default: 365)")
    certs_parser.add_argument("--ca-days", type=int, default=3650, help="CA lifetime (default: 3650)")
    mode = certs_parser.add_mutually_exclusive_group()
    mode.add_argument("--force", action="store_true", help="replace existing files, CA included")
    mode.add_argument("--renew", action="store_true",
                      help="reissue only the serving certificate and key, signed by the existing CA")
    certs_parser.set_defaults(handler=command_certs)

    from staticadm.defaults import DEFAULT_TIMEOUT_SECONDS

    webhook_parser = commands.add_parser(
        "webhook-config", help="print the kube-apiserver webhook configurations for a manifest directory",
        description="Prints a ValidatingWebhookConfiguration (-> URL/validate) and a MutatingWebhookConfiguration "
                    "(-> URL/mutate) as multi-document YAML, with rules narrowed to what the directory's policies "
                    "can match; a kind without policies is omitted (said on stderr). Regenerate it when the "
                    "policies' match constraints change. Exit 0 printed, 1 invalid manifests (or --out-dir not "
                    "writable), 2 usage. Example: staticadm webhook-config --manifests /etc/staticadm/manifests "
                    "--url https://127.0.0.1:8443 --ca-file /var/lib/staticadm/tls/ca.crt "
                    "--out-dir /etc/kubernetes/admission")
    webhook_parser.add_argument("--manifests", required=True, metavar="DIR", help="the manifest directory")
    webhook_parser.add_argument("--url", metavar="URL",
                                help="the daemon's HTTPS base URL as kube-apiserver dials it, "
                                     "e.g. https://127.0.0.1:8443 (default: the one of the static registration "
                                     "installed in --out-dir)")
    webhook_parser.add_argument("--ca-file", metavar="FILE",
                                help="PEM CA that signed the serving certificate (ca.crt from `staticadm certs`) "
                                     "(default: the caBundle of the static registration installed in --out-dir)")
    webhook_parser.add_argument("--failure-policy", choices=("Fail", "Ignore"), default=None,
                                help="what kube-apiserver does when staticadm cannot be reached (default: the "
                                     "installed registration's, else Fail)")
    webhook_parser.add_argument("--timeout", type=int, default=None, metavar="SECONDS",
                                help=f"timeoutSeconds, 1 to 30 (default: the installed registration's, else "
                                     f"{DEFAULT_TIMEOUT_SECONDS})")
    webhook_parser.add_argument("--registration", choices=("static", "api"), default="static",
                                help="static: a *.static.k8s.io manifest for kube-apiserver's staticManifestsDir "
                                     "(1.36+); api: an object for kubectl apply (older versions) (default: static)")
    webhook_parser.add_argument("--out-dir", metavar="DIR",
                                help="write one file per configuration into DIR instead of printing them, each "
                                     "replaced atomically: static registration into DIR/validating-webhooks/ and "
                                     "DIR/mutating-webhooks/ (the directories the AdmissionConfiguration names), "
                                     "api registration as DIR/{validating,mutating}-staticadm.yaml; a configuration "
                                     "no longer needed is removed")
    webhook_parser.set_defaults(handler=command_webhook_config)

    from staticadm.completion import SHELLS

    completion_parser = commands.add_parser(
        "completion", help="print the shell completion script for bash, zsh or fish",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Completes commands, options, option values (-o json) and paths.\n\n"
                    "bash:  staticadm completion bash > /etc/bash_completion.d/staticadm\n"
                    "       (or: source <(staticadm completion bash) in ~/.bashrc)\n"
                    "zsh:   staticadm completion zsh > \"${fpath[1]}/_staticadm\"   (then a new shell)\n"
                    "fish:  staticadm completion fish > ~/.config/fish/completions/staticadm.fish")
    completion_parser.add_argument("shell", choices=SHELLS, help="the shell to complete in")
    completion_parser.set_defaults(handler=command_completion)

    version_parser = commands.add_parser(
        "version", help="print the version, git commit and CEL engine version",
        description="The release, the git commit it was built from (when known), the CEL engine (cel-expr-python) "
                    "and Python versions and the platform: what the daemon's /version answers. -o json|yaml for "
                    "machines. staticadm --version prints the release alone.")
    version_parser.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                                help="format (default: text)")
    version_parser.set_defaults(handler=command_version)

    from staticadm.server.config import add_serve_arguments

    serve_parser = commands.add_parser(
        "serve", help="run the admission webhook daemon",
        description="Serve AdmissionReview webhooks (POST /validate, /mutate) for the ValidatingAdmissionPolicy and "
                    "MutatingAdmissionPolicy manifests in --manifests, reloading them when they change. An invalid "
                    "or missing directory does not stop the daemon: it stays up, not ready (503), logs the errors "
                    "and retries until a load succeeds. Exits 0 after SIGTERM, 1 when it cannot listen, 2 on a "
                    "bad option. Example: staticadm serve --config /etc/staticadm/staticadm.yaml; or, trying the "
                    "examples: staticadm serve --manifests manifests/examples --socket /tmp/staticadm.sock "
                    "--state-dir /tmp/staticadm-state")
    add_serve_arguments(serve_parser)
    serve_parser.set_defaults(handler=command_serve)
    _add_no_color(parser)
    return parser


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    from staticadm.colour import without_colour

    parser = build_parser()
    stderr = stderr or sys.stderr
    try:
        args, unknown = parser.parse_known_args(argv)
        if unknown:
            raise UsageError(_command_name(args), f"unrecognized arguments: {' '.join(unknown)}")
    except UsageError as error:
        # As kubectl: the command that refused the line, why, and where to look.
        stderr.write(f"{error.prog}: {error.message}\nSee '{error.prog} --help' for usage.\n")
        return EXIT_USAGE
    except SystemExit as exit_request:
        return int(exit_request.code or 0)
    with without_colour(args.no_color):
        return int(args.handler(args, stdin or sys.stdin, stdout or sys.stdout, stderr))
