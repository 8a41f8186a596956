"""The agent's settings: flags, ``HAMI_AGENT_<NAME>`` env vars and a file fill one model."""

from __future__ import annotations

import os
import urllib.parse
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from core.settings import CommaList, FileSettings, parse_listen
from core.shards import shard_of

ENV_PREFIX = "HAMI_AGENT_"


class AgentSettings(FileSettings):
    """Every setting of ``hami-agent``."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="forbid")

    collector: CommaList = Field(
        default_factory=lambda: ["http://hami-usage-collector:9396"],
        description="Base URLs of the collector to push to; each address a name resolves to (every replica behind a headless Service) gets every snapshot.",
    )
    collector_shards: str | None = Field(
        None,
        description="URL template of sharded collectors, {shard} standing for the shard index (e.g. http://huc-{shard}.huc-headless:9396); replaces --collector.",
    )
    shard_count: int | None = Field(
        None,
        ge=1,
        description="How many shards --collector-shards has (the collectors' --shard-count).",
    )
    node: str = Field(
        default_factory=lambda: os.environ.get("NODE_NAME", ""),
        description="This node's name.",
        json_schema_extra={"shown_default": "env NODE_NAME (the downward API)"},
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
    processes: bool = Field(
        True,
        description="Attribute NVML's processes to pods' containers through their cgroups under --host-proc, and check there whether each HAMi-core slot's process is gone.",
    )
    host_proc: Path = Field(
        Path("/proc"),
        description="The host's /proc (the chart mounts it read-only): NVML's PIDs are the host's.",
    )
    pod_resources_socket: Path = Field(
        Path("/var/lib/kubelet/pod-resources/kubelet.sock"),
        description="The kubelet's PodResources API socket: which card each container holds.",
    )
    collector_ca_file: Path | None = Field(
        None,
        description="PEM CA bundle the collector's TLS certificate is checked against (https:// collectors); the system CAs without it.",
    )
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
    def _urls(cls, value: list[str]) -> list[str]:
        if not value:
            raise ValueError("expected at least one URL")
        for url in value:
            _check_url(url)
        return value

    @field_validator("collector_shards")
    @classmethod
    def _template(cls, value: str | None) -> str | None:
        if value is not None:
            if "{shard}" not in value:
                raise ValueError(f"expected {{shard}} in the URL template, got {value!r}")
            _check_url(value.replace("{shard}", "0"))
        return value

    @model_validator(mode="after")
    def _sharding(self) -> AgentSettings:
        if (self.collector_shards is None) != (self.shard_count is None):
            raise ValueError("collector-shards and shard-count go together")
        if self.collector_shards is not None and "collector" in self.model_fields_set:
            raise ValueError("set either collector or collector-shards, not both")
        return self

    def collector_urls(self) -> list[str]:
        """The URLs to push to: this node's shard's, when the collectors are sharded."""
        if self.collector_shards is None or self.shard_count is None:
            return list(self.collector)
        shard = shard_of(self.node, self.shard_count)
        return [self.collector_shards.replace("{shard}", str(shard))]


def _check_url(url: str) -> None:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"expected an http:// or https:// URL with a host, got {url!r}")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ValueError(f"bad port in {url!r}: {exc}") from None
