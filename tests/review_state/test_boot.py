"""review_state refuses at boot to run without somewhere to deliver, rather than failing every approval."""

from __future__ import annotations

from pathlib import Path

import pytest
from review_state.bootstrap import ReviewStateEnvironment, provider_from
from review_state.providers import EmlProvider, SmtpProvider
from reviewloop.config import ConfigError


@pytest.mark.parametrize("smtp", [None, "smtp://relay.example:25"])
def test_an_unwritable_data_dir_is_refused_at_boot_with_the_fix(tmp_path: Path, smtp: str | None) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    environ = {"REVIEWLOOP_SMTP_URL": smtp} if smtp else {}
    with pytest.raises(ConfigError) as refused:
        provider_from(
            ReviewStateEnvironment.from_env({"REVIEWLOOP_DATA_DIR": str(blocked / "data"), **environ})
        )
    assert "REVIEWLOOP_DATA_DIR" in str(refused.value) and "not writable" in str(refused.value)


def test_a_writable_data_dir_delivers_as_configured(tmp_path: Path) -> None:
    data = {"REVIEWLOOP_DATA_DIR": str(tmp_path)}
    assert isinstance(provider_from(ReviewStateEnvironment.from_env(data)), EmlProvider)
    smtp = ReviewStateEnvironment.from_env({**data, "REVIEWLOOP_SMTP_URL": "smtp://relay:25"})
    assert isinstance(provider_from(smtp), SmtpProvider)
    assert (tmp_path / "outbox").is_dir()
