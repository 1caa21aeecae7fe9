"""docs/configuration.md, generated from the settings classes' fields: ``python -m stack.configuration --write``.

Each process's typed settings (a ``reviewloop.settings.Settings`` subclass) names its variables, their
defaults and meaning once; this renders them, with the placement variables every part reads, so the
reference cannot drift from the code (``tests/contract/test_configuration_doc.py`` holds them equal).
"""

from __future__ import annotations

import sys
from pathlib import Path

from dispatch_budget.bootstrap import DispatchBudgetEnvironment, ReviewCliEnvironment
from gateway.settings import GatewayEnvironment
from nudge.bootstrap import NudgeEnvironment
from review_state.bootstrap import ReviewStateEnvironment
from reviewloop.config import ServiceSettings, address_variable, db_variable, metrics_variable
from reviewloop.settings import Settings
from rules.bootstrap import RulesEnvironment

from stack.topology import DEFAULT_OPS_PORTS, DEFAULT_PORTS

DOC = Path(__file__).parents[2] / "docs" / "configuration.md"

# Every process's own settings; each also reads the shared ServiceSettings (the review CLI apart).
PROCESSES: tuple[type[Settings], ...] = (
    ServiceSettings,
    GatewayEnvironment,
    ReviewStateEnvironment,
    RulesEnvironment,
    NudgeEnvironment,
    DispatchBudgetEnvironment,
    ReviewCliEnvironment,
)

HEAD = """# Configuration

Every setting is an environment variable, read once when a process starts into its typed settings object
(pydantic-settings); a value that does not parse stops the process at boot with an error naming the
variable. This page is generated from those objects' fields (`python -m stack.configuration --write`);
`tests/contract/test_configuration_doc.py` fails when it no longer matches them.

## Placement

Where each part listens and keeps its store. `reviewloop up` and `reviewloop serve` fill the addresses left
unset with these loopback defaults; a bare `python -m <service>` needs its own and its peers' set.
"""

TAIL = "\nTo run a service on PostgreSQL, give it a database of its own (asyncpg is the driver; a plain\n`postgresql://` URL is accepted). Each service migrates its store at boot:\n\n```sh\ncreatedb -h 127.0.0.1 -U postgres reviewloop_review_state\nREVIEWLOOP_REVIEW_STATE_DB=postgresql://postgres@127.0.0.1:5432/reviewloop_review_state make run\n```\n\n`deploy/` has a container image (non-root, its data dir a writable volume at `/data`), a compose file\nand Kubernetes manifests (`deploy/k8s`: a kustomize base and a production overlay, `kubectl kustomize\ndeploy/k8s/overlays/production`) that run every service on PostgreSQL with an OpenTelemetry collector.\n`reviewloop migrate <service>` migrates one store and exits (the migration Jobs); replicas that start\ntogether take turns by a PostgreSQL advisory lock. Metrics, traces, SLOs and the runbooks are in\n[docs/operations.md](operations.md).\n\n"


def _table(rows: list[tuple[str, str, str]]) -> list[str]:
    return [
        "| variable | meaning | default |",
        "|---|---|---|",
        *(f"| `{variable}` | {meaning} | {default} |" for variable, default, meaning in rows),
    ]


def _placement() -> list[tuple[str, str, str]]:
    rows = []
    for part, port in DEFAULT_PORTS.items():
        ops = DEFAULT_OPS_PORTS.get(part)
        rows += [
            (
                address_variable(part),
                f"`127.0.0.1:{port}`",
                f"where {part} listens, and where its peers find it",
            ),
            (db_variable(part), f"`sqlite+aiosqlite:///.data/{part}.db`", f"the store of {part}"),
            (
                metrics_variable(part),
                f"`127.0.0.1:{ops}`" if ops else "its public port",
                f"where {part} serves `/metrics` (Prometheus), `/livez` and `/readyz`",
            ),
        ]
    return rows


def render() -> str:
    """The whole of docs/configuration.md."""
    lines = [*HEAD.splitlines(), "", *_table(_placement())]
    shared = {variable for variable, _, _ in ServiceSettings.documented()}
    for settings in PROCESSES:
        own = [row for row in settings.documented() if settings is ServiceSettings or row[0] not in shared]
        intro = (settings.__doc__ or "").replace("``", "`").strip()
        lines += ["", f"## {settings.title}", "", *intro.splitlines(), "", *_table(own)]
    return "\n".join(lines) + "\n" + TAIL


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        DOC.write_text(render())
    else:
        sys.stdout.write(render())
