"""TLS, basic auth and response headers of the collector's listener: the exporter-toolkit file.

``--web-config-file`` names the YAML every Prometheus exporter reads with
``--web.config.file`` (``prometheus/exporter-toolkit/docs/web-configuration.md``).
:func:`load` reads it once at start and refuses, in one line naming the key,
anything it cannot honour as written: a file that is accepted behaves as the
same file does under a Go exporter, or it is not accepted at all.

Honoured:

* ``tls_server_config.cert_file`` / ``key_file`` (relative paths: from the file's folder,
  as Go's ``JoinDir``); re-read when they change, see *Reload* below.
* ``client_auth_type``: ``NoClientCert`` (``CERT_NONE``), ``VerifyClientCertIfGiven``
  (``CERT_OPTIONAL``), ``RequireAndVerifyClientCert`` (``CERT_REQUIRED``);
  ``client_ca_file`` is the CA client certificates are verified against (the
  system's CAs without it, as Go); a CA file with ``NoClientCert`` is refused, as Go.
* ``min_version`` / ``max_version``: ``TLS10`` .. ``TLS13`` (defaults ``TLS12`` / ``TLS13``)
  -> :class:`ssl.TLSVersion`.
* ``cipher_suites``: the Go names of ``tls.CipherSuites()`` for TLS 1.0-1.2, mapped to
  their OpenSSL names (:data:`GO_CIPHERS`) in the order given.
* ``curve_preferences``: one curve (``CurveP256``, ``CurveP384``, ``CurveP521``, ``X25519``).
* ``prefer_server_cipher_suites`` (default true): ``OP_CIPHER_SERVER_PREFERENCE``.
* ``client_allowed_sans``: checked after the handshake, per request: a client whose
  verified certificate has none of them among its DNS, IP, e-mail and URI SANs gets 403
  (Go ends the handshake instead). It needs a ``client_auth_type`` that verifies.
* ``http_server_config.headers``: the five headers Go allows, with Go's allowed values,
  added to every response.
* ``basic_auth_users``: user -> bcrypt hash, checked by
  :class:`collector.auth.users.BasicUsers` (which says what a check costs).

Refused, with why:

* ``RequestClientCert`` and ``RequireAnyClientCert``: both take a client certificate
  without verifying it; Python's :mod:`ssl` verifies every certificate it asks for
  (``CERT_OPTIONAL``/``CERT_REQUIRED``), so neither can be expressed.
* TLS 1.3 names in ``cipher_suites`` (``TLS_AES_128_GCM_SHA256``...): Python's ssl has
  no way to choose TLS 1.3 suites (Go ignores them too); unknown names are refused.
* more than one curve in ``curve_preferences``: :meth:`ssl.SSLContext.set_ecdh_curve`
  takes one.
* ``http2: true``: aiohttp serves HTTP/1.1 only (Go's default is true: say false or
  leave it out).
* inline ``cert`` / ``key`` / ``client_ca``: use the ``*_file`` keys (those can be re-read).
* ``rate_limit``: not implemented here.

Reload: the certificate, key and client CA files are re-read when they change,
without a restart and without dropping a connection: each loaded version is its
own :class:`ssl.SSLContext`; the listener's context's ``sni_callback`` (called at
every handshake, SNI or not) looks at the files' ``os.stat`` at most once a second
and, when they changed, loads a fresh context and moves the handshake onto the newest
(``ssl_object.context = ...``). Connections already open keep the context they
shook hands with. A new version that does not load (a key that does not match yet,
a half-written file) leaves the last good one serving, logs one line and is counted
(:attr:`TLSFiles.reload_errors`); the next change is tried again. The rest of the
file (users, headers, versions) is read at start only.

A wrong or missing basic-auth credential gets 401 with ``WWW-Authenticate: Basic``
and never says which part was wrong.
``/healthz`` and ``/readyz`` need no credential and no SAN: kubelets' probes carry neither.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import re
import ssl
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Literal

import yaml
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client.core import CounterMetricFamily, Metric
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from collector.auth.users import BasicUsers
from collector.web.errors import error_response

log = logging.getLogger(__name__)

STAT_EVERY = 1.0
"""Least seconds between two looks at the TLS files' ``os.stat``."""
OPEN_PATHS = frozenset({"/healthz", "/readyz"})
"""Paths served without basic auth or client SAN check (probes carry neither)."""

VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}

GO_CIPHERS = {
    "TLS_RSA_WITH_AES_128_CBC_SHA": "AES128-SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA": "AES256-SHA",
    "TLS_RSA_WITH_AES_128_GCM_SHA256": "AES128-GCM-SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384": "AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
}
"""Go's ``tls.CipherSuites()`` for TLS 1.0-1.2 -> OpenSSL's name."""

TLS13_CIPHERS = frozenset(
    {"TLS_AES_128_GCM_SHA256", "TLS_AES_256_GCM_SHA384", "TLS_CHACHA20_POLY1305_SHA256"}
)

CURVES = {
    "CurveP256": "prime256v1",
    "CurveP384": "secp384r1",
    "CurveP521": "secp521r1",
    "X25519": "X25519",
}

HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
"""The headers Go's toolkit lets the file set, and the values it allows (empty: any)."""

_BCRYPT = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")

ClientAuth = Literal[
    "NoClientCert",
    "RequestClientCert",
    "RequireAnyClientCert",
    "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
Version = Literal["TLS10", "TLS11", "TLS12", "TLS13"]


class WebConfigError(Exception):
    """A web configuration file that cannot be honoured; the message is one line."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TLSServerConfig(_Model):
    """``tls_server_config``."""

    cert_file: str | None = None
    key_file: str | None = None
    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None
    client_auth_type: ClientAuth = "NoClientCert"
    client_ca_file: str | None = None
    client_allowed_sans: list[str] = Field(default_factory=list)
    min_version: Version = "TLS12"
    max_version: Version = "TLS13"
    cipher_suites: list[str] = Field(default_factory=list)
    prefer_server_cipher_suites: bool = True
    curve_preferences: list[str] = Field(default_factory=list)


class HTTPServerConfig(_Model):
    """``http_server_config``."""

    http2: bool = False
    headers: dict[str, str] = Field(default_factory=dict)


class WebConfigFile(_Model):
    """The file as written."""

    tls_server_config: TLSServerConfig | None = None
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, str] = Field(default_factory=dict)
    rate_limit: Any = None


class TLSReloads:
    """The listener's certificate reloads as the collector's own counters (read at scrape time)."""

    def __init__(self, files: TLSFiles) -> None:
        self._files = files

    def collect(self) -> Iterator[Metric]:
        """``hami_usage_collector_tls_reloads_total`` and ``…_tls_reload_errors_total``."""
        yield CounterMetricFamily(
            "hami_usage_collector_tls_reloads",
            "Times the listener's certificate, key or client CA was re-read after a change.",
            value=self._files.reloads,
        )
        yield CounterMetricFamily(
            "hami_usage_collector_tls_reload_errors",
            "Changed certificate files that could not be loaded (the last good ones kept serving).",
            value=self._files.reload_errors,
        )


class WebConfig:
    """A loaded web configuration: the TLS files (None: plain HTTP), users and headers."""

    def __init__(self, file: WebConfigFile, base: Path) -> None:
        self.file = file
        tls = file.tls_server_config
        self.tls = TLSFiles(tls, base) if tls is not None else None
        self.allowed_sans = frozenset(tls.client_allowed_sans) if tls is not None else frozenset()
        self.headers = dict(file.http_server_config.headers)
        self.auth = BasicUsers(file.basic_auth_users) if file.basic_auth_users else None

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        """The listener's context (None: plain HTTP)."""
        return self.tls.context if self.tls is not None else None

    async def add_headers(self, request: web.BaseRequest, response: web.StreamResponse) -> None:
        """``on_response_prepare`` hook: the file's headers on a response, streamed ones too."""
        for name, value in self.headers.items():
            response.headers[name] = value


def load(path: Path | str) -> WebConfig:
    """Read and check the web configuration file at ``path``; one-line :class:`WebConfigError`."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"cannot read {path}: {_why(exc)}") from None
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not YAML"
        raise WebConfigError(f"{path}: malformed YAML{where}: {problem}") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise WebConfigError(f"{path}: expected a mapping at the top, got {type(raw).__name__}")
    try:
        file = WebConfigFile.model_validate(raw)
    except ValidationError as exc:
        raise WebConfigError(f"{path}: {_first_error(exc)}") from None
    try:
        _check(file)
        return WebConfig(file, path.parent)
    except WebConfigError as exc:
        raise WebConfigError(f"{path}: {exc}") from None


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    key = ".".join(str(part) for part in error["loc"]) or "(top)"
    if error["type"] == "extra_forbidden":
        return f"{key}: unknown key"
    return f"{key}: {error['msg']}"


def _check(file: WebConfigFile) -> None:
    """Refuse what this listener cannot do as the file says, one line naming the key."""
    if file.rate_limit is not None:
        raise WebConfigError("rate_limit: not supported by this collector")
    http = file.http_server_config
    if http.http2:
        raise WebConfigError(
            "http_server_config.http2: true is refused: aiohttp serves HTTP/1.1 only "
            "(set false or leave it out)"
        )
    for name, value in http.headers.items():
        if name not in HEADERS:
            raise WebConfigError(
                f"http_server_config.headers.{name}: this header cannot be configured; "
                f"allowed: {', '.join(HEADERS)}"
            )
        allowed = HEADERS[name]
        if allowed and value not in allowed:
            raise WebConfigError(
                f"http_server_config.headers.{name}: {value!r} is not one of {', '.join(allowed)}"
            )
        if "\n" in value or "\r" in value:
            raise WebConfigError(f"http_server_config.headers.{name}: a value is one line")
    for user, hashed in file.basic_auth_users.items():
        if ":" in user:
            raise WebConfigError(f"basic_auth_users.{user}: a user name cannot hold ':'")
        if not _BCRYPT.fullmatch(hashed):
            raise WebConfigError(
                f"basic_auth_users.{user}: not a bcrypt hash ($2a$/$2b$/$2y$, cost, 53 characters)"
            )
    tls = file.tls_server_config
    if tls is not None:
        _check_tls(tls)


def _check_tls(tls: TLSServerConfig) -> None:
    key = "tls_server_config"
    for inline in ("cert", "key", "client_ca"):
        if getattr(tls, inline) is not None:
            raise WebConfigError(
                f"{key}.{inline}: inline PEM is not supported: use {inline}_file (it is re-read on change)"
            )
    if not tls.cert_file:
        raise WebConfigError(f"{key}.cert_file: missing (tls_server_config needs it)")
    if not tls.key_file:
        raise WebConfigError(f"{key}.key_file: missing (tls_server_config needs it)")
    if tls.client_auth_type in ("RequestClientCert", "RequireAnyClientCert"):
        raise WebConfigError(
            f"{key}.client_auth_type: {tls.client_auth_type} takes a client certificate without "
            "verifying it, which Python's ssl cannot do (it verifies every certificate it asks "
            "for): use VerifyClientCertIfGiven or RequireAndVerifyClientCert"
        )
    if tls.client_ca_file and tls.client_auth_type == "NoClientCert":
        raise WebConfigError(
            f"{key}.client_ca_file: set without a client_auth_type that asks for certificates"
        )
    if tls.client_allowed_sans and tls.client_auth_type == "NoClientCert":
        raise WebConfigError(
            f"{key}.client_allowed_sans: needs a client_auth_type that verifies client certificates"
        )
    if VERSIONS[tls.min_version] > VERSIONS[tls.max_version]:
        raise WebConfigError(
            f"{key}.min_version: {tls.min_version} is above max_version {tls.max_version}"
        )
    for name in tls.cipher_suites:
        if name in TLS13_CIPHERS:
            raise WebConfigError(
                f"{key}.cipher_suites: {name} is a TLS 1.3 suite, which cannot be chosen "
                "(Python's ssl has no setting for them; Go ignores them too): list TLS 1.2 suites only"
            )
        if name not in GO_CIPHERS:
            raise WebConfigError(f"{key}.cipher_suites: unknown cipher suite {name}")
    if len(tls.curve_preferences) > 1:
        raise WebConfigError(
            f"{key}.curve_preferences: Python's ssl sets one ECDH curve "
            "(SSLContext.set_ecdh_curve): list one"
        )
    for curve in tls.curve_preferences:
        if curve not in CURVES:
            raise WebConfigError(
                f"{key}.curve_preferences: unknown curve {curve}; known: {', '.join(CURVES)}"
            )


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc) or type(exc).__name__


def _no_password() -> bytes:
    return b""  # an encrypted key fails to load instead of prompting on the terminal


class TLSFiles:
    """The TLS files of ``tls_server_config``: the newest context that loaded, reloaded on change.

    :attr:`context` is the listener's (the first version); its ``sni_callback`` moves
    each handshake onto :attr:`current`.
    """

    def __init__(self, tls: TLSServerConfig, base: Path, stat_every: float = STAT_EVERY) -> None:
        assert tls.cert_file  # checked by _check_tls
        assert tls.key_file
        self.tls = tls
        self.cert_file = base / tls.cert_file
        self.key_file = base / tls.key_file
        self.ca_file = base / tls.client_ca_file if tls.client_ca_file else None
        self.stat_every = stat_every
        self.reloads = 0
        self.reload_errors = 0
        self._lock = threading.Lock()
        self._stamp = self._stat()
        self.context = self._load()
        self.context.sni_callback = self._on_handshake
        self.current = self.context
        self._looked = time.monotonic()

    def _files(self) -> list[Path]:
        return [p for p in (self.cert_file, self.key_file, self.ca_file) if p is not None]

    def _stat(self) -> tuple[tuple[int, int, int, int], ...]:
        stamps = []
        for path in self._files():
            try:
                st = os.stat(path)
            except OSError:
                stamps.append((-1, -1, -1, -1))
            else:
                stamps.append((st.st_mtime_ns, st.st_size, st.st_ino, st.st_dev))
        return tuple(stamps)

    def _load(self) -> ssl.SSLContext:
        """A fresh context from the files as they are now; one-line WebConfigError."""
        tls, key = self.tls, "tls_server_config"
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = VERSIONS[tls.min_version]
        ctx.maximum_version = VERSIONS[tls.max_version]
        cert_pem = _read(self.cert_file, f"{key}.cert_file")
        _read(self.key_file, f"{key}.key_file")
        try:
            ssl.create_default_context(cadata=cert_pem)
        except (ssl.SSLError, ValueError):
            raise WebConfigError(
                f"{key}.cert_file: {self.cert_file} holds no PEM certificate"
            ) from None
        try:
            ctx.load_cert_chain(self.cert_file, self.key_file, password=_no_password)
        except ssl.SSLError as exc:
            if exc.reason == "KEY_VALUES_MISMATCH":
                raise WebConfigError(
                    f"{key}.key_file: {self.key_file} does not match cert_file {self.cert_file}"
                ) from None
            raise WebConfigError(
                f"{key}.key_file: {self.key_file} holds no unencrypted PEM private key "
                f"({exc.reason or exc})"
            ) from None
        if tls.client_auth_type != "NoClientCert":
            ctx.verify_mode = (
                ssl.CERT_REQUIRED
                if tls.client_auth_type == "RequireAndVerifyClientCert"
                else ssl.CERT_OPTIONAL
            )
            if self.ca_file is not None:
                _read(self.ca_file, f"{key}.client_ca_file")
                try:
                    ctx.load_verify_locations(cafile=self.ca_file)
                except ssl.SSLError as exc:
                    raise WebConfigError(
                        f"{key}.client_ca_file: {self.ca_file} holds no PEM certificate "
                        f"({exc.reason or exc})"
                    ) from None
            else:
                ctx.load_default_certs(ssl.Purpose.CLIENT_AUTH)
        if tls.cipher_suites:
            try:
                ctx.set_ciphers(":".join(GO_CIPHERS[name] for name in tls.cipher_suites))
            except ssl.SSLError:
                raise WebConfigError(
                    f"{key}.cipher_suites: this OpenSSL offers none of {', '.join(tls.cipher_suites)}"
                ) from None
        if tls.prefer_server_cipher_suites:
            ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
        else:
            ctx.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        for curve in tls.curve_preferences:
            try:
                ctx.set_ecdh_curve(CURVES[curve])
            except (ValueError, ssl.SSLError):
                raise WebConfigError(
                    f"{key}.curve_preferences: this OpenSSL cannot use {curve}"
                ) from None
        return ctx

    def _on_handshake(
        self, sslobj: ssl.SSLObject, server_name: str | None, context: ssl.SSLContext
    ) -> None:
        current = self.refresh()
        if sslobj.context is not current:
            sslobj.context = current

    def refresh(self) -> ssl.SSLContext:
        """The newest context; at most every ``stat_every`` s, reload it if the files changed."""
        now = time.monotonic()
        if now - self._looked < self.stat_every:
            return self.current
        with self._lock:
            self._looked = now
            stamp = self._stat()
            if stamp == self._stamp:
                return self.current
            self._stamp = stamp
            try:
                self.current = self._load()
            except WebConfigError as exc:
                self.reload_errors += 1
                log.error("TLS files changed but do not load, still serving the last good: %s", exc)
            else:
                self.reloads += 1
                log.info("TLS files changed: new handshakes use them")
            return self.current


def _read(path: Path, key: str) -> str:
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise WebConfigError(f"{key}: cannot read {path}: {_why(exc)}") from None


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def peer_sans(request: web.BaseRequest) -> set[str] | None:
    """The DNS, IP, e-mail and URI SANs of the request's verified client certificate, or None."""
    transport = request.transport
    cert = transport.get_extra_info("peercert") if transport is not None else None
    if not cert:
        return None
    sans: set[str] = set()
    for kind, value in cert.get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                value = str(ipaddress.ip_address(value.strip()))
            except ValueError:
                continue
        if kind in ("DNS", "IP Address", "email", "URI"):
            sans.add(value)
    return sans


def web_middleware(config: WebConfig) -> Middleware:
    """The middleware applying ``config``: basic auth, client SANs, the extra headers.

    Streamed responses (prepared inside the handler) get the headers from
    :meth:`WebConfig.add_headers` on ``on_response_prepare``.
    """
    auth, allowed, headers = config.auth, config.allowed_sans, config.headers
    challenge = {"WWW-Authenticate": 'Basic realm="hami-usage-collector", charset="UTF-8"'}

    @web.middleware
    async def apply_web_config(request: web.Request, handler: Handler) -> web.StreamResponse:
        response: web.StreamResponse
        if request.path in OPEN_PATHS:
            response = await handler(request)
        elif allowed and not (peer_sans(request) or set()) & allowed:
            response = error_response(
                request.path, 403, "the client certificate has none of the allowed names"
            )
        elif auth is not None and not await auth.check(request):
            response = error_response(
                request.path, 401, "authentication required", headers=dict(challenge)
            )
        else:
            response = await handler(request)
        if not response.prepared:
            for name, value in headers.items():
                response.headers[name] = value
        return response

    return apply_web_config
