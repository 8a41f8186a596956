"""The agent's settings: flags, ``HAMI_AGENT_<NAME>`` env vars and a file fill one model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from core.settings import CommaList, FileSettings, parse_listen

ENV_PREFIX = "HAMI_AGENT_"


class AgentSettings(FileSettings):
    """Every setting of ``hami-agent``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    collector: str = Field(
        "http://hami-usage-collector:9396", description="Base URL of the collector to push to."
    )
    node: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME", ""),
        description="This node's name; default: env NODE_NAME (the downward API).",
    )
    interval: float = Field(5.0, gt=0, description="Seconds between two snapshots.")
    roots: CommaList = Field(
        default_factory=lambda: ["/usr/local/vgpu", "/usr/local/vgpu/vgpu"],
        description="Folders holding containers/<podUID>_<container>/ and claims/<claimUID>/ region folders.",
    )
    grace: float | None = Field(
        None,
        gt=0,
        description="Skip region folders untouched for this many seconds (leftovers of deleted pods).",
    )
    nvml: bool = Field(True, description="Read cards through NVML.")
    token_file: Path | None = Field(
        None,
        description="Projected service-account token (or shared token) sent as a bearer token.",
    )
    listen: str = Field(
        "127.0.0.1:9397", description="Address of /healthz and the agent's own /metrics."
    )
    backlog_seconds: float = Field(
        600.0, gt=0, description="Oldest snapshot kept while the collector is away."
    )
    backlog_bytes: int = Field(
        32 << 20, gt=0, description="Most bytes of gzipped snapshots kept meanwhile."
    )
    push_timeout: float = Field(10.0, gt=0, description="Seconds one push may take.")
    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Lowest level logged."
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        parse_listen(value)
        return value

    @field_validator("collector")
    @classmethod
    def _url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"expected an http:// or https:// URL, got {value!r}")
        return value
