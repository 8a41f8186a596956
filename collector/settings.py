"""The collector's settings: one pydantic model that flags, env vars and a file fill.

Precedence, highest first: command-line flags, ``HAMI_COLLECTOR_<NAME>`` env
vars, the YAML/JSON file named by ``--config`` (or ``HAMI_COLLECTOR_CONFIG``),
defaults. Lists are comma-separated in flags and env vars.
"""

from __future__ import annotations

import ipaddress
from contextvars import ContextVar
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BeforeValidator, Field, ValidationError, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from collector.sources.targets import FLAVOURS

config_file: ContextVar[Path | None] = ContextVar("config_file", default=None)
"""The settings file of the settings being built (set by the CLI)."""


def _split(value: Any) -> Any:
    if isinstance(value, str):
        return [part.strip() for part in value.split(",") if part.strip()]
    return value


CommaList = Annotated[list[str], NoDecode, BeforeValidator(_split)]


def parse_listen(value: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` too) and check both parts."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"expected HOST:PORT, got {value!r}")
    if host not in ("", "localhost"):
        ipaddress.ip_address(host)
    return host or "0.0.0.0", int(port)


class _FileSource(PydanticBaseSettingsSource):
    """Values from the YAML or JSON settings file, if one was named."""

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False

    def __call__(self) -> dict[str, Any]:
        path = config_file.get()
        if path is None:
            return {}
        data = yaml.safe_load(path.read_text()) or {}
        if not isinstance(data, dict):
            raise ValueError(f"settings file {path} must hold a mapping")
        return {k.replace("-", "_"): v for k, v in data.items()}


class CollectorSettings(BaseSettings):
    """Every setting of ``hami-collector serve``."""

    model_config = SettingsConfigDict(env_prefix="HAMI_COLLECTOR_", extra="forbid")

    listen: str = Field("0.0.0.0:9396", description="Address to serve on, HOST:PORT.")
    kubernetes: bool = Field(True, description="Discover monitor pods through the Kubernetes API.")
    kubeconfig: Path | None = Field(
        None,
        description="Kubeconfig used outside a cluster; default: in-cluster, else KUBECONFIG or ~/.kube/config.",
    )
    targets_file: Path | None = Field(
        None,
        description="Static targets in Prometheus file_sd form (JSON or YAML), re-read on change.",
    )
    namespaces: CommaList = Field(
        default_factory=list, description="Namespaces to discover pods in; empty means all."
    )
    flavours: CommaList = Field(
        default_factory=lambda: list(FLAVOURS), description="Monitor flavours to discover."
    )
    hami_selector: str = Field(
        "app.kubernetes.io/component=hami-device-plugin",
        description="Label selector of HAMi monitor pods.",
    )
    volcano_selector: str = Field(
        "name=volcano-device-plugin", description="Label selector of Volcano vGPU monitor pods."
    )
    kai_selector: str = Field(
        "app.kubernetes.io/component=kai-vgpu-monitor",
        description="Label selector of KAI monitor pods.",
    )
    hami_port: int = Field(
        9394, ge=1, le=65535, description="HAMi monitor port when no port is named 'metrics'."
    )
    volcano_port: int = Field(
        9394, ge=1, le=65535, description="Volcano monitor port (it declares none)."
    )
    kai_port: int = Field(
        9394, ge=1, le=65535, description="KAI monitor port when no port is named 'metrics'."
    )
    interval: float = Field(15.0, gt=0, description="Seconds between two scrapes of a target.")
    timeout: float = Field(
        10.0, gt=0, description="Seconds a scrape may take; at most the interval."
    )
    body_limit: int = Field(
        32 << 20, gt=0, description="Largest body accepted, in bytes, after decompression."
    )
    stale_after: float | None = Field(
        None, gt=0, description="Seconds a failing source's data is kept; default 3 intervals."
    )
    priority: CommaList = Field(
        default_factory=lambda: ["agent", "hami", "kai", "volcano"],
        description="Which source wins when two offer the same series, first wins.",
    )
    passthrough_allow: CommaList = Field(
        default_factory=lambda: [".*"], description="Regexes of unknown families passed through."
    )
    passthrough_deny: CommaList = Field(
        default_factory=list, description="Regexes of unknown families dropped (and counted)."
    )
    kube_request_timeout: float = Field(
        30.0, gt=0, description="Seconds a Kubernetes list may take."
    )
    kube_watch_timeout: int = Field(
        60,
        gt=0,
        description="Seconds a watch lasts before it is renewed; a silent one is cut 15 s later.",
    )
    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Lowest level logged."
    )

    @model_validator(mode="after")
    def _check(self) -> CollectorSettings:
        parse_listen(self.listen)
        if self.timeout > self.interval:
            raise ValueError(
                f"timeout ({self.timeout:g}s) must not exceed interval ({self.interval:g}s)"
            )
        unknown = set(self.flavours) - set(FLAVOURS)
        if unknown:
            raise ValueError(f"unknown flavours {sorted(unknown)}; known: {', '.join(FLAVOURS)}")
        if sorted(self.priority) != sorted(("agent", *FLAVOURS)):
            raise ValueError(f"priority must order exactly agent,{','.join(FLAVOURS)}")
        return self

    @property
    def stale_seconds(self) -> float:
        """How long a failing source's data is kept."""
        return self.stale_after if self.stale_after is not None else 3 * self.interval

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return init_settings, env_settings, _FileSource(settings_cls)


def describe_error(error: ValidationError, prefix: str) -> str:
    """Turn a validation error into lines that name each bad setting."""
    lines = []
    for item in error.errors():
        name = ".".join(str(p) for p in item["loc"]) or "settings"
        if item["type"] == "extra_forbidden":
            lines.append(f"unknown setting {name!r}")
            continue
        where = f"--{name.replace('_', '-')} / {prefix}{name.upper()}" if item["loc"] else name
        got = f" (got {item['input']!r})" if item["loc"] and "input" in item else ""
        lines.append(f"invalid setting {where}: {item['msg']}{got}")
    return "\n".join(lines)
