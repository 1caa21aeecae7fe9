"""docs/configuration.md is generated from the settings classes' fields, and a bad value stops a process at
boot with an error naming its variable."""

from __future__ import annotations

import pytest
from gateway.settings import GatewaySettings
from review_state.__main__ import SPEC as RS
from review_state.bootstrap import ReviewStateEnvironment
from reviewloop.config import ConfigError, ServiceConfig
from stack import configuration
from stack.topology import with_defaults


def test_the_configuration_reference_is_the_settings_fields() -> None:
    assert configuration.DOC.read_text() == configuration.render(), (
        "docs/configuration.md is stale: run `python -m stack.configuration --write`"
    )


def test_every_variable_is_documented_once() -> None:
    documented = [
        variable for settings in configuration.PROCESSES for variable, _, _ in settings.documented()
    ]
    shared = {variable for variable, _, _ in configuration.ServiceSettings.documented()}
    own = [variable for variable in documented if variable not in shared]
    assert len(own) == len(set(own))
    assert {"REVIEWLOOP_DB_POOL_SIZE", "REVIEWLOOP_WEBHOOK_KEY", "REVIEWLOOP_REVIEW_GATE"} <= set(documented)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("REVIEWLOOP_RELAY_POLL_S", "soon"),
        ("REVIEWLOOP_TRACE_SQL", "maybe"),
        ("REVIEWLOOP_STREAMS_PER_KEY", "-1"),
        ("REVIEWLOOP_MAX_BODY_BYTES", "4MB"),
        ("REVIEWLOOP_SLOW_PATHS", "drivr"),
    ],
)
def test_a_bad_value_is_a_startup_error_naming_its_variable(variable: str, value: str) -> None:
    env = {**with_defaults({}), "REVIEWLOOP_ADMIN_TOKEN": "x", variable: value}
    with pytest.raises(ConfigError, match=variable):
        GatewaySettings.from_env(env)
    if not variable.startswith(("REVIEWLOOP_STREAMS", "REVIEWLOOP_MAX_BODY")):  # the gateway's own
        with pytest.raises(ConfigError, match=variable):
            ServiceConfig.read("diff", (), env)


def test_the_defaults_and_the_names_are_the_ones_deployments_set() -> None:
    env = {**with_defaults({}), "REVIEWLOOP_ADMIN_TOKEN": "x", "REVIEWLOOP_STREAMS_PER_PROJECT": "3"}
    gateway = GatewaySettings.from_env(env)
    assert (gateway.streams_per_key, gateway.streams_per_project, gateway.sse_heartbeat_s) == (5, 3, 15.0)
    assert gateway.rate_limits["submit_per_key"] == "120/minute"
    assert gateway.mcp_allowed_hosts == ("127.0.0.1:*", "localhost:*", "[::1]:*")
    diff = ServiceConfig.read("diff", (), {**env, "REVIEWLOOP_TRACE_SQL": "1"}).settings
    assert (diff.relay_poll_s, diff.trace_sql, diff.otlp_endpoint) == (0.5, True, None)


def test_a_service_reads_its_placement_with_its_settings_once() -> None:
    env = {
        **with_defaults({}),
        "REVIEWLOOP_REVIEW_STATE_DB": "postgresql://postgres@db/review_state",
        "REVIEWLOOP_FROM_ADDRESS": "mail@acme.test",
    }
    config = ServiceConfig.read("review_state", RS.all_peers(), env, RS.settings)
    assert config.db_url == "postgresql+asyncpg://postgres@db/review_state"
    assert (config.listen, config.peers["rules"]) == (
        env["REVIEWLOOP_REVIEW_STATE_ADDR"],
        env["REVIEWLOOP_RULES_ADDR"],
    )
    assert isinstance(config.settings, ReviewStateEnvironment)
    assert config.settings.from_address == "mail@acme.test"
    with pytest.raises(ConfigError, match="REVIEWLOOP_RULES_ADDR"):
        ServiceConfig.read("review_state", RS.all_peers(), {**env, "REVIEWLOOP_RULES_ADDR": ""}, RS.settings)
