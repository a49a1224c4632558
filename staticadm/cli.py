"""Command line: one small function per command; argument errors exit 2."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import Any, TextIO

from staticadm import __version__

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
        raise argparse.ArgumentTypeError(f"--var expects NAME=JSON, got {text!r}")
    try:
        return name, json.loads(raw)
    except json.JSONDecodeError as error:
        raise argparse.ArgumentTypeError(f"--var {name}: invalid JSON: {error}") from error


def _evaluate_to_json(source: str, variables: dict[str, Any]) -> tuple[str, Any]:
    """(``"value"``, json) or (``"compile"``/``"runtime"``, message)."""
    from staticadm.cel import CompileError, EvalError, admission_environment, evaluate_standalone
    from staticadm.cel.values import to_json_value

    outcome = evaluate_standalone(source, variables)
    if isinstance(outcome, CompileError):
        return "compile", outcome.message
    if isinstance(outcome, EvalError):
        return "runtime", outcome.message
    renderers = {name: t.to_string for name, t in admission_environment().opaque_types.items()}
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
    phase, result = _evaluate_to_json(args.expression, dict(args.var))
    if phase == "value":
        stdout.write(_json_line(result) + "\n")
        return EXIT_OK
    stderr.write(f"{phase} error: {result}\n")
    return EXIT_USAGE if phase == "compile" else EXIT_FAILED


def _evaluate_jsonl_line(line: str) -> dict[str, Any]:
    try:
        request = json.loads(line)
    except json.JSONDecodeError as error:
        return {"error": f"invalid JSON input line: {error}", "phase": "input"}
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
    from staticadm.manifests.check import run_check

    return run_check(args.directories, args.output, stdout, stderr)


# -- serve ------------------------------------------------------------------------------------------


def command_serve(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.server.config import ConfigError, resolve
    from staticadm.server.main import serve

    try:
        config = resolve(args)
    except ConfigError as error:
        stderr.write(f"staticadm serve: {error}\n")
        return EXIT_USAGE
    return serve(config, stderr)


# -- review -----------------------------------------------------------------------------------------


def command_review(args: argparse.Namespace, stdin: TextIO, stdout: TextIO, stderr: TextIO) -> int:
    from staticadm.admission.review import run_review

    return run_review(args.manifests, args.namespaces, args.output, args.requests, stdin, stdout, stderr)


# -- parser -----------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
        description="Prints the result as JSON. Exit 0 on a value, 1 on a runtime error, 2 on a compile error.",
    )
    eval_parser.add_argument("expression", nargs="?", metavar="EXPR", help="the CEL expression")
    eval_parser.add_argument(
        "--var",
        action="append",
        type=_parse_var,
        default=[],
        metavar="NAME=JSON",
        help="bind an admission variable (object, oldObject, request, namespaceObject, "
        "variables) to a JSON value; repeatable",
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
        description="Exit 0 when every directory is valid (warnings allowed), 1 when any is invalid.",
    )
    check_parser.add_argument("directories", nargs="+", metavar="DIR")
    check_parser.add_argument(
        "-o", "--output", choices=("text", "json"), default="text", help="report format (default: text)"
    )
    check_parser.set_defaults(handler=command_check)

    review_parser = commands.add_parser(
        "review", help="evaluate AdmissionReview requests against a manifest directory, offline",
        description="Exit 0 when every request was evaluated, 2 on invalid manifests or an unreadable request.")
    review_parser.add_argument("--manifests", required=True, metavar="DIR",
                               help="the ValidatingAdmissionPolicy manifest directory")
    review_parser.add_argument("--namespaces", metavar="FILE",
                               help="Namespace objects (YAML/JSON, v1 List allowed) for selectors and namespaceObject")
    review_parser.add_argument("-o", "--output", choices=("text", "json"), default="text",
                               help="text report, or one AdmissionReview response per line (default: text)")
    review_parser.add_argument("requests", nargs="+", metavar="REQUEST",
                               help="AdmissionReview file (JSON or YAML), or - for stdin")
    review_parser.set_defaults(handler=command_review)

    from staticadm.server.config import add_serve_arguments

    serve_parser = commands.add_parser(
        "serve", help="run the admission webhook daemon",
        description="Serve AdmissionReview webhooks (POST /validate, /mutate) for the manifests in --manifests, "
                    "reloading them when they change. Exits non-zero at startup if the directory is invalid.")
    add_serve_arguments(serve_parser)
    serve_parser.set_defaults(handler=command_serve)
    return parser


def main(
    argv: Sequence[str] | None = None,
    stdin: TextIO | None = None,
    stdout: TextIO | None = None,
    stderr: TextIO | None = None,
) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_request:
        return int(exit_request.code or 0)
    return int(args.handler(args, stdin or sys.stdin, stdout or sys.stdout, stderr or sys.stderr))
