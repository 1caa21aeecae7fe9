"""The ``reviewloop`` command: serve one service, bring everything up, read traces, write migrations."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import re
import signal
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version
from pathlib import Path
from typing import Any

from dispatch_budget import cli as budget_cli
from reviewloop.config import ConfigError, DataSettings, ServiceSettings
from reviewloop.contract import CONTRACT_VERSION

from stack.launcher import LaunchError, Stack
from stack.topology import ALL, GATEWAY, SERVICES, colocated, with_defaults


def _spec(part: str) -> Any:
    # Imported on demand: `reviewloop traces` need not load every service.
    return importlib.import_module(f"{part}.__main__").SPEC


def cmd_serve(args: argparse.Namespace) -> int:
    os.environ.update(with_defaults())
    spec = _spec(args.service)
    if spec.entrypoint is not None:
        spec.entrypoint()
    else:
        from reviewloop.service import main

        main(spec)
    return 0


def cmd_up(args: argparse.Namespace) -> int:
    tls = {"CA": args.tls_ca, "CERT": args.tls_cert, "KEY": args.tls_key}
    os.environ.update({f"REVIEWLOOP_TLS_{name}": path for name, path in tls.items() if path})
    if args.service_auth_key_file:
        try:
            key = Path(args.service_auth_key_file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            print(f"error: cannot read the service key: {exc}", file=sys.stderr)
            return 2
        os.environ["REVIEWLOOP_SERVICE_AUTH_KEY"] = key
    try:
        # The parts this command starts share the machine: the services talk over Unix sockets.
        os.environ.update(colocated(os.environ))
        stack = Stack()
        stack.check_ports()
    except (LaunchError, ConfigError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.target == "all":
        return _up_monolith(stack)

    async def run() -> int:
        stop = _stop_on_signals()
        for name in ALL:
            stack.start(name)
        try:
            await stack.wait_serving(ALL)
        except LaunchError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        _banner(stack, "microservices: every part its own process", stack.data_dir / "logs")

        def failure() -> str | None:
            dead = stack.dead()
            return f"{dead[0]} exited unexpectedly:\n{stack.log_tail(dead[0])}" if dead else None

        return await _serve_until(stop, failure)

    try:
        return asyncio.run(run())
    finally:
        stack.stop_all()
        print("reviewloop stopped.", flush=True)


def _stop_on_signals() -> asyncio.Event:
    """An event SIGTERM or SIGINT sets (from now on, in the running loop)."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _serve_until(stop: asyncio.Event, failure: Callable[[], str | None]) -> int:
    """Wait for ``stop``, checking twice a second that nothing failed: 0 once stopped, 1 (with what
    ``failure`` says) when something did."""
    while not stop.is_set():
        if (error := failure()) is not None:
            print(f"error: {error}", file=sys.stderr)
            return 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), 0.5)
    return 0


def _banner(stack: Stack, mode: str, logs: Path) -> None:
    from gateway.settings import admin_token_source

    print(
        f"reviewloop is up: gateway http://{stack.address(GATEWAY)}   ops http://{stack.ops_address(GATEWAY)}",
        flush=True,
    )
    print(f"  mode: {mode}", flush=True)
    for name in SERVICES:
        ops = f"http://{stack.ops_address(name)}"
        print(f"  {name:<16} grpc {stack.address(name):<22} ops {ops:<28} SERVING", flush=True)
    if stack.trust.key is not None:
        print(
            "  between the parts: signed service tokens (REVIEWLOOP_SERVICE_AUTH_KEY); unsigned calls "
            "are refused",
            flush=True,
        )
    if stack.trust.mtls:
        print(
            "  between the parts: mutual TLS (REVIEWLOOP_TLS_*); plaintext callers are refused",
            flush=True,
        )
    print(f"  admin token: {admin_token_source(stack.settings.admin_token, stack.data_dir)}", flush=True)
    print(f"  logs: {logs}   traces: {stack.data_dir / 'traces.jsonl'}", flush=True)
    print("Ctrl-C stops everything.", flush=True)


def _up_monolith(stack: Stack) -> int:
    """``reviewloop up --target all``: every part in this process, on one event loop (``stack.monolith``)."""
    import uvloop
    from reviewloop import metrics, telemetry

    from stack.monolith import NAME, Monolith, log_to

    logs = stack.data_dir / "logs" / f"{NAME}.log"
    log_to(logs)
    provider = telemetry.setup(NAME, stack.data_dir, stack.settings.otlp_endpoint, stack.settings)
    metrics.setup(NAME)

    async def run() -> int:
        stop = _stop_on_signals()
        monolith = Monolith(os.environ)
        try:
            await monolith.start()
        except Exception as exc:
            print(f"error: {exc} (log: {logs})", file=sys.stderr)
            return 1
        _banner(stack, "monolithic (--target all): every part in this process", logs)
        try:
            failed = f"the gateway stopped unexpectedly (log: {logs})"
            return await _serve_until(stop, lambda: failed if monolith.failed else None)
        finally:
            await monolith.stop()

    try:
        return int(uvloop.run(run()))
    finally:
        provider.shutdown()
        print("reviewloop stopped.", flush=True)


def cmd_traces(args: argparse.Namespace) -> int:
    from reviewloop.tracetree import otlp_notice, print_trace, sampling_notice

    if notice := otlp_notice(os.environ):
        print(notice)
        return 2
    status = print_trace(DataSettings.from_env(os.environ).data_dir / "traces.jsonl", args.id)
    if notice := sampling_notice(os.environ):
        print(notice)
    return status


def cmd_migrate(args: argparse.Namespace) -> int:
    """Upgrade one part's store and exit (a Kubernetes migration Job; replicas take turns by lock)."""
    from reviewloop.storage import make_engine
    from reviewloop.storage.migrations import migrate

    spec = _spec(args.service)
    url = ServiceSettings.placed(spec.name).from_env(os.environ).db_url(spec.name)

    async def run() -> None:
        engine = make_engine(url)
        try:
            await migrate(engine, spec.migrations_dir, spec.metadata)
        finally:
            await engine.dispose()

    asyncio.run(run())
    print(f"{spec.name}: store migrated to head")
    return 0


def cmd_dead_letters(args: argparse.Namespace) -> int:
    """List (or retry, or discard) the dead letters in every part's store, across projects: the deployment
    operator's view, which needs no running stack and sees rows that name no project too."""
    from reviewloop.storage import Database, make_engine
    from reviewloop.storage.outbox import dead_letters, discard_dead_letter, retry_dead_letter

    if args.discard and not args.reason:
        print("error: --discard needs --reason", file=sys.stderr)
        return 2
    os.environ.update(with_defaults())
    project = args.project or None
    settings = ServiceSettings.placed(*ALL).from_env(os.environ)

    async def run() -> int:
        found = 0
        for part in args.service or ALL:
            fast_paths = settings.fast_paths
            db = Database(make_engine(settings.db_url(part), fast_paths=fast_paths), fast_paths)
            try:
                if args.retry or args.discard:
                    done = (
                        await retry_dead_letter(db, args.retry, project)
                        if args.retry
                        else await discard_dead_letter(db, args.discard, f"{args.reason} (operator)", project)
                    )
                    if done is not None:
                        print(
                            f"{'retried' if args.retry else 'discarded'} {done.event_id} ({part} -> {done.destination})"
                        )
                        return 0
                    continue
                for letter in await dead_letters(db, args.limit, project):
                    found += 1
                    print(
                        f"{letter.dead_at:%Y-%m-%d %H:%M:%S}  {letter.event_id}  {part} -> {letter.destination}  "
                        f"{letter.type}  {letter.aggregate_id}  {letter.project_id or '-'}  {letter.reason}"
                    )
            finally:
                await db.dispose()
        if args.retry or args.discard:
            print(f"error: no dead letter {args.retry or args.discard}", file=sys.stderr)
            return 1
        if not found:
            print("no dead letters")
        return 0

    return asyncio.run(run())


def cmd_migration(args: argparse.Namespace) -> int:
    from reviewloop.storage.migrations import new_revision

    spec = _spec(args.service)
    asyncio.run(new_revision(spec.migrations_dir, spec.metadata, args.message))
    return 0


_RST_INLINE = re.compile(r"``(.+?)``|:[a-z]+:`~?(.+?)`|`([^`]+?)`_")


def plain(text: str) -> str:
    """``text`` with reStructuredText's inline markup (double backticks, roles, links) read as a terminal
    shows it: the words alone. Docstrings serve as help text, so they reach ``--help`` written for Sphinx."""
    return _RST_INLINE.sub(lambda m: next(g for g in m.groups() if g is not None), text)


class PlainHelpFormatter(argparse.HelpFormatter):
    """Help without reStructuredText markup, for every parser and subcommand (``plain``)."""

    def _format_text(self, text: str) -> str:
        return super()._format_text(plain(text))

    def _expand_help(self, action: argparse.Action) -> str:
        return plain(super()._expand_help(action))


def all_parsers(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    """``parser`` and every subcommand's parser under it."""
    found = [parser]
    for action in parser._actions:  # argparse keeps its subcommands only here
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases share one parser
                found += all_parsers(child)
    return found


def version() -> str:
    """What ``reviewloop --version`` prints: the package and the contract it serves."""
    try:
        package = dist_version("reviewloop")
    except PackageNotFoundError:  # run from a checkout without an install
        package = "unknown"
    return f"reviewloop {package} (contract {CONTRACT_VERSION}, Python {sys.version.split()[0]})"


def build_parser() -> argparse.ArgumentParser:
    """The ``reviewloop`` command line, every (sub)command's help in plain text."""
    parser = argparse.ArgumentParser(prog="reviewloop", description=__doc__)
    parser.add_argument("--version", action="version", version=version())
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run one service in the foreground")
    serve.add_argument("service", choices=ALL)
    serve.set_defaults(func=cmd_serve)
    up = sub.add_parser("up", help="start every service and the gateway, migrated and SERVING")
    for name, what in (("ca", "the CA bundle"), ("cert", "the certificate"), ("key", "its private key")):
        up.add_argument(
            f"--tls-{name}",
            metavar="PEM",
            help=f"mutual TLS between the parts: {what} every part presents and checks "
            f"(or REVIEWLOOP_TLS_{name.upper()}); the certificate must name the parts' host (127.0.0.1), "
            "and localhost for the Unix sockets `up` places the services on",
        )
    up.add_argument(
        "--service-auth-key-file",
        metavar="FILE",
        help="sign every call between the parts with the secret in FILE, as the production overlay does "
        "(or REVIEWLOOP_SERVICE_AUTH_KEY); at least 32 characters",
    )
    up.add_argument(
        "--target",
        choices=("microservices", "all"),
        default="microservices",
        help="microservices (the default): every part its own process, as deploy/k8s runs them; all: "
        "monolithic mode, every part in one process and one event loop (contexts still meet over gRPC)",
    )
    up.set_defaults(func=cmd_up)
    traces = sub.add_parser(
        "traces", help="print a review's life (or one trace) as a timeline of request trees"
    )
    traces.add_argument("id")
    traces.set_defaults(func=cmd_traces)
    migrate = sub.add_parser("migrate", help="upgrade one part's store to the newest revision and exit")
    migrate.add_argument("service", choices=ALL)
    migrate.set_defaults(func=cmd_migrate)
    migration = sub.add_parser("migration", help="autogenerate a migration for a service's store")
    migration.add_argument("service", choices=ALL)
    migration.add_argument("-m", "--message", required=True)
    migration.set_defaults(func=cmd_migration)
    outbox = sub.add_parser("outbox", help="the deployment operator's view of every store's outbox")
    outbox_sub = outbox.add_subparsers(dest="outbox_command", required=True)
    dead = outbox_sub.add_parser(
        "dead-letters", help="list events a receiver refused for good (newest first), or retry or discard one"
    )
    dead.add_argument("--service", action="append", choices=ALL, help="only these parts' stores (repeatable)")
    dead.add_argument("--project", default="", help="only this project's (prj_...)")
    dead.add_argument("--limit", type=int, default=100, help="per store (default 100)")
    act = dead.add_mutually_exclusive_group()
    act.add_argument("--retry", metavar="EVENT_ID", help="hand this dead letter back to its relay")
    act.add_argument("--discard", metavar="EVENT_ID", help="give up on this dead letter (with --reason)")
    dead.add_argument("--reason", default="", help="why it is discarded")
    dead.set_defaults(func=cmd_dead_letters)
    budget_cli.register(sub)  # review, gate-stats
    for each in all_parsers(parser):
        each.formatter_class = PlainHelpFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
