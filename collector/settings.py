"""The collector's settings: one pydantic model that flags, env vars and a file fill.

Precedence, highest first: command-line flags, ``HAMI_COLLECTOR_<NAME>`` env
vars, the YAML/JSON file named by ``--config`` (or ``HAMI_COLLECTOR_CONFIG``),
defaults. Lists are comma-separated in flags and env vars.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, model_validator
from pydantic_settings import SettingsConfigDict

from collector.normalise.schema import RANKED_KINDS, Flavour
from collector.promql.engine import EngineLimits
from core.durations import duration
from core.settings import CommaList, FileSettings, SettingError, is_loopback, parse_listen
from core.shards import Shard


class CollectorSettings(FileSettings):
    """Every setting of ``hami-collector serve``."""

    model_config = SettingsConfigDict(env_prefix="HAMI_COLLECTOR_", extra="forbid")

    listen: str = Field("0.0.0.0:9396", description="Address to serve on, HOST:PORT.")
    kubernetes: bool = Field(True, description="Discover monitor pods through the Kubernetes API.")
    kubeconfig: Path | None = Field(
        None,
        description="Kubeconfig used outside a cluster.",
        json_schema_extra={"shown_default": "in-cluster, else KUBECONFIG or ~/.kube/config"},
    )
    targets_file: Path | None = Field(
        None,
        description="Static targets in Prometheus file_sd form (JSON or YAML), re-read on change.",
    )
    namespaces: CommaList = Field(
        default_factory=list, description="Namespaces to discover pods in; empty means all."
    )
    flavours: CommaList = Field(
        default_factory=lambda: [str(f) for f in Flavour],
        description="Monitor flavours to discover.",
        json_schema_extra={"choices": [str(f) for f in Flavour]},
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
    allocations: bool = Field(
        True,
        description="Serve each pod's GPU allocation and idle time, read from the pod watch.",
    )
    capacity: bool = Field(
        True,
        description="Serve each card's registered memory, split count and health, read from a watch of the Nodes.",
    )
    interval: float = Field(15.0, gt=0, description="Seconds between two scrapes of a target.")
    timeout: float = Field(
        10.0,
        gt=0,
        description="Seconds a scrape may take; set, at most the interval.",
        json_schema_extra={"shown_default": "10, or the interval when shorter (Prometheus' rule)"},
    )
    body_limit: int = Field(
        32 << 20, gt=0, description="Largest body accepted, in bytes, after decompression."
    )
    stale_after: float | None = Field(
        None,
        gt=0,
        description="Seconds a failing source's data is kept.",
        json_schema_extra={"shown_default": "3 intervals"},
    )
    priority: CommaList = Field(
        default_factory=lambda: ["agent", "hami", "kai", "volcano"],
        description="Which source wins when two offer the same series, first wins.",
        json_schema_extra={"choices": [str(kind) for kind in RANKED_KINDS]},
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
    push_auth: Literal["auto", "tokenreview", "token", "none"] = Field(
        "auto",
        description="How agents are authenticated: auto = tokenreview with Kubernetes, else token if a token file is set, else pushes are refused; none only on loopback.",
    )
    push_token_file: Path | None = Field(
        None, description="File holding the shared bearer token of push-auth token."
    )
    push_audience: str = Field(
        "hami-usage-collector", description="Audience the agents' projected tokens must carry."
    )
    push_service_accounts: CommaList = Field(
        default_factory=list,
        description="Service accounts (namespace/name, * for any namespace) allowed to push; empty refuses all.",
    )
    read_auth: Literal["none", "basic", "kubernetes"] = Field(
        "none",
        description="Who may read: none = anyone who reaches the port; basic = the web config's basic_auth_users; kubernetes = bearer tokens checked with TokenReview and SubjectAccessReview (cluster readers and namespace tenants).",
    )
    read_auth_ttl: float = Field(
        60.0,
        gt=0,
        description="Seconds a token's review (reads', sign-ins' and pushes': one cache) and an identity's access are cached.",
    )
    push_body_limit: int = Field(
        4 << 20, gt=0, description="Largest push body, in bytes, after decompression."
    )
    push_max_inflight: int = Field(
        64, gt=0, description="Pushes handled at once; more get 429 with Retry-After."
    )
    history_retention: float = Field(
        3600.0, gt=0, description="Seconds of history kept for range queries and *_over_time."
    )
    history_max_points: int = Field(
        20_000_000,
        gt=0,
        description="Most points kept in the history (about 10 bytes each, keys included); oldest go first.",
    )
    lookback: float = Field(
        300.0, gt=0, description="PromQL lookback delta, seconds (Prometheus: 5 minutes)."
    )
    query_max_samples: int = Field(
        50_000_000,
        gt=0,
        description="Most samples one PromQL query may hold (points read plus intermediate results); past it 422.",
    )
    query_timeout: float = Field(
        120.0,
        gt=0,
        description="Seconds a PromQL query may take, waiting included; a request's timeout may lower it; past it 503.",
    )
    query_max_concurrency: int = Field(
        4, gt=0, description="PromQL queries evaluated at once; more wait their turn."
    )
    query_max_concurrency_per_identity: int = Field(
        4,
        ge=1,
        description="PromQL queries one reader (identity) may have at once; more answer 429.",
    )
    shard_count: int = Field(
        1,
        ge=1,
        description="Shards the cluster's nodes are split over (by a hash of the node name).",
    )
    shard_index: int = Field(
        0,
        ge=0,
        description="This collector's shard, 0 .. shard-count - 1: it keeps only those nodes.",
    )
    remote_write_url: CommaList = Field(
        default_factory=list,
        description="Prometheus remote-write receivers to send every series to.",
    )
    remote_write_bearer_token_file: Path | None = Field(
        None, description="File holding the bearer token sent to the receivers."
    )
    remote_write_username: str | None = Field(
        None, description="Basic-auth user name for the receivers."
    )
    remote_write_password_file: Path | None = Field(
        None, description="File holding the basic-auth password for the receivers."
    )
    remote_write_ca_file: Path | None = Field(
        None, description="PEM CA bundle the receivers' TLS certificates are checked against."
    )
    remote_write_max_samples: int = Field(
        2_000_000,
        gt=0,
        description="Samples queued per receiver before the oldest are dropped (counted).",
    )
    remote_write_batch: int = Field(
        2_000, gt=0, le=100_000, description="Most samples in one remote-write request."
    )
    remote_write_shards: int = Field(
        4, gt=0, le=64, description="Requests in flight per receiver (one per shard)."
    )
    remote_write_timeout: float = Field(
        30.0, gt=0, description="Seconds one remote-write request may take before it is retried."
    )
    remote_write_flush_timeout: float = Field(
        5.0, ge=0, description="Seconds spent at shutdown sending what is still queued."
    )
    remote_write_metadata_interval: float = Field(
        60.0, gt=0, description="Seconds between two sends of every family's HELP and TYPE."
    )
    external_label: CommaList = Field(
        default_factory=list,
        description="NAME=VALUE label added to every remote-written series, e.g. cluster=prod.",
    )
    external_labels_on_metrics: bool = Field(
        False, description="Add the external labels to the cluster's series on /metrics too."
    )
    replica: str | None = Field(
        None,
        description="This replica's name, sent as the external label replica= for receivers that deduplicate.",
    )
    web_config_file: Path | None = Field(
        None,
        description="Prometheus exporter-toolkit web configuration (TLS, basic auth, headers) of the listener; certificate files are re-read on change.",
    )
    log_format: Literal["text", "json"] = Field("text", description="Log line format.")
    log_level: Literal["debug", "info", "warning", "error"] = Field(
        "info", description="Lowest level logged."
    )

    @model_validator(mode="after")
    def _check(self) -> CollectorSettings:
        try:
            parse_listen(self.listen)
        except ValueError as exc:
            raise SettingError("listen", str(exc)) from None
        if "timeout" not in self.model_fields_set:
            self.timeout = min(self.timeout, self.interval)
        elif self.timeout > self.interval:
            raise SettingError(
                "timeout",
                f"{duration(self.timeout)} is longer than --interval ({duration(self.interval)}): "
                "lower --timeout or raise --interval",
            )
        unknown = set(self.flavours) - set(Flavour)
        if unknown:
            raise SettingError(
                "flavours", f"unknown flavours {sorted(unknown)}; known: {', '.join(Flavour)}"
            )
        if self.push_auth == "none" and not is_loopback(parse_listen(self.listen)[0]):
            raise SettingError(
                "push_auth", "none is allowed only when --listen is a loopback address"
            )
        if self.push_auth == "token" and self.push_token_file is None:
            raise SettingError("push_token_file", "push-auth token needs a push-token-file")
        if self.push_auth == "tokenreview" and not self.kubernetes:
            raise SettingError("push_auth", "tokenreview needs --kubernetes")
        if self.read_auth == "kubernetes" and not self.kubernetes:
            raise SettingError("read_auth", "kubernetes needs --kubernetes")
        if self.shard_index >= self.shard_count:
            raise SettingError(
                "shard_index",
                f"shard-index ({self.shard_index}) must be below shard-count ({self.shard_count})",
            )
        if sorted(self.priority) != sorted(RANKED_KINDS):
            raise SettingError("priority", f"must order exactly {','.join(RANKED_KINDS)}")
        check_remote_write(self)
        return self

    def external_labels(self) -> list[tuple[str, str]]:
        """The external labels, ``replica`` included, in the order given."""
        pairs = [tuple(item.split("=", 1)) for item in self.external_label]
        labels = [(name.strip(), value.strip()) for name, value in pairs]
        if self.replica is not None:
            labels.append(("replica", self.replica))
        return labels

    def engine_limits(self) -> EngineLimits:
        """What every PromQL query of the collector's one engine may use."""
        return EngineLimits(
            lookback=self.lookback,
            timeout=self.query_timeout,
            max_samples=self.query_max_samples,
            max_concurrency=self.query_max_concurrency,
            max_concurrency_per_identity=self.query_max_concurrency_per_identity,
        )

    def monitors(self) -> dict[Flavour, tuple[str, int]]:
        """The label selector and default port of each flavour to discover."""
        known = {
            Flavour.HAMI: (self.hami_selector, self.hami_port),
            Flavour.VOLCANO: (self.volcano_selector, self.volcano_port),
            Flavour.KAI: (self.kai_selector, self.kai_port),
        }
        return {flavour: known[flavour] for flavour in map(Flavour, self.flavours)}

    @property
    def shard(self) -> Shard:
        """The shard of nodes this collector keeps."""
        return Shard(self.shard_index, self.shard_count)

    @property
    def stale_seconds(self) -> float:
        """How long a failing source's data is kept."""
        return self.stale_after if self.stale_after is not None else 3 * self.interval


_LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def check_remote_write(settings: CollectorSettings) -> None:
    """Fail on a bad remote-write URL, external label or credential setting, naming it."""
    for url in settings.remote_write_url:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise SettingError(
                "remote_write_url", f"remote-write-url {url!r} must be an http:// or https:// URL"
            )
    names: set[str] = set()
    for item in settings.external_label:
        name, sep, value = (part.strip() for part in item.partition("="))
        if not sep or not _LABEL_NAME.fullmatch(name) or name.startswith("__") or not value:
            raise SettingError(
                "external_label", f"external-label {item!r} must be NAME=VALUE, NAME a label name"
            )
        if name in names or name == "node" or (name == "replica" and settings.replica):
            raise SettingError(
                "external_label", f"external-label {name!r} is given twice or is reserved (node)"
            )
        names.add(name)
    if settings.replica is not None and not settings.replica.strip():
        raise SettingError("replica", "replica must not be empty")
    if settings.remote_write_bearer_token_file and settings.remote_write_username:
        raise SettingError(
            "remote_write_username",
            "remote-write-bearer-token-file and remote-write-username exclude each other",
        )
    if (settings.remote_write_username is None) != (settings.remote_write_password_file is None):
        raise SettingError(
            "remote_write_password_file",
            "remote-write-username and remote-write-password-file go together",
        )
    for what, path in (
        ("remote_write_bearer_token_file", settings.remote_write_bearer_token_file),
        ("remote_write_password_file", settings.remote_write_password_file),
        ("remote_write_ca_file", settings.remote_write_ca_file),
    ):
        if path is not None and not path.is_file():
            raise SettingError(what, f"{str(path)!r} is not a readable file")
