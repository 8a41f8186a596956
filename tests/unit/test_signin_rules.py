"""The sign-in cookie's rules, one by one: where ``next`` may lead, whose ``Origin`` is ours,
how long the cookie lives, what it opens, its flags, and the attempts' token bucket.

The browser's side of the rules is WHATWG URL parsing: a browser drops tabs and
newlines from a URL and reads ``\\`` as ``/`` in http(s) URLs (URL Standard, "basic
URL parser": "remove all ASCII tab or newline", and the special-scheme backslash
rule), so ``/\\host`` and ``/\\t/host`` lead to another site as ``//host`` does.
"""

from __future__ import annotations

import base64
import json
import ssl
from http.cookies import SimpleCookie

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from collector.auth import signin
from collector.auth.signin import (
    COOKIE,
    DEFAULT_LIFETIME,
    Attempts,
    lifetime,
    opens,
    safe_next,
    same_origin,
    token_expiry,
    wants_sign_in,
    well_formed,
)

NEXT = {
    "/": "/",
    "/workloads": "/workloads",
    "/workloads?namespace=team-a&page=2": "/workloads?namespace=team-a&page=2",
    "/nodes/gpu-01#cards": "/nodes/gpu-01#cards",
    "/api/v1/usage?by=pod&format=csv": "/api/v1/usage?by=pod&format=csv",
    "/%2F%2Fevil.example": "/%2F%2Fevil.example",  # a path of ours, however it looks
    "": "/",
    "workloads": "/",
    "//evil.example": "/",
    "//evil.example/workloads": "/",
    "///evil.example": "/",
    "https://evil.example/": "/",
    "http:evil.example": "/",
    "javascript:alert(1)": "/",
    "/\\evil.example": "/",
    "\\/evil.example": "/",
    "/\\/evil.example": "/",
    "/\t/evil.example": "/",
    "/\n/evil.example": "/",
    "/\r\n/evil.example": "/",
    " /workloads": "/",
    "/work loads": "/",
    "/\x00": "/",
    "/\x7f": "/",
    "/login": "/",
    "/login?next=/workloads": "/",
    "/logout": "/",
    "/" + "a" * 3000: "/",
}
"""``next`` as sent -> where the sign-in goes on to."""


@pytest.mark.parametrize(("sent", "kept"), NEXT.items(), ids=repr)
def test_next_leads_only_to_a_path_of_this_site(sent: str, kept: str) -> None:
    assert safe_next(sent) == kept


def test_next_of_nothing_is_the_overview() -> None:
    assert safe_next(None) == "/"


def _post(headers: dict[str, str], tls: bool = False) -> web.Request:
    context = ssl.create_default_context() if tls else None  # then the scheme says https
    return make_mocked_request("POST", "/login", headers, sslcontext=context)


HOST = {"Host": "127.0.0.1:9396"}
ORIGINS: list[tuple[dict[str, str], bool, bool]] = [
    ({"Origin": "http://127.0.0.1:9396"}, False, True),
    ({"Origin": "HTTP://127.0.0.1:9396"}, False, True),
    ({"Origin": "https://127.0.0.1:9396"}, True, True),
    ({"Origin": "https://127.0.0.1:9396"}, False, False),  # another scheme
    ({"Origin": "http://127.0.0.1:9396"}, True, False),
    ({"Origin": "http://127.0.0.1:9397"}, False, False),  # another port
    ({"Origin": "http://127.0.0.1"}, False, False),  # port 80
    ({"Origin": "http://localhost:9396"}, False, False),  # another host
    ({"Origin": "http://evil.example"}, False, False),
    ({"Origin": "null"}, False, False),  # a sandboxed frame, a data: URL
    ({"Origin": "file://"}, False, False),
    ({"Referer": "http://127.0.0.1:9396/login?next=%2F"}, False, True),
    ({"Referer": "http://evil.example/page"}, False, False),
    ({"Origin": "http://evil.example", "Referer": "http://127.0.0.1:9396/"}, False, False),
    ({}, False, True),  # neither: no page sent it
]
"""(headers besides Host, TLS, whether the post comes from this site)."""


@pytest.mark.parametrize(("headers", "tls", "ours"), ORIGINS, ids=repr)
def test_only_this_site_s_origin_may_sign_in(
    headers: dict[str, str], tls: bool, ours: bool
) -> None:
    assert same_origin(_post(HOST | headers, tls)) is ours


def test_a_default_port_is_the_same_origin_written_or_not() -> None:
    written = _post({"Host": "collector.example:443", "Origin": "https://collector.example"}, True)
    assert same_origin(written)
    ipv6 = _post({"Host": "[::1]:9396", "Origin": "http://[::1]:9396"})
    assert same_origin(ipv6)


def jwt(claims: object) -> str:
    """A token shaped as a JWT (header, claims, signature), the claims as given."""
    parts = [{"alg": "RS256", "typ": "JWT"}, claims]
    encoded = [base64.urlsafe_b64encode(json.dumps(p).encode()).rstrip(b"=") for p in parts]
    return b".".join([*encoded, b"c2lnbmF0dXJl"]).decode()


NOW = 1_800_000_000.0


@pytest.mark.parametrize(
    ("token", "seconds"),
    [
        (jwt({"exp": NOW + 600}), 600),  # until the token's expiry
        (jwt({"exp": NOW + 600.9}), 600),  # never a second later
        (jwt({"exp": NOW + 86400 * 365}), 86400 * 365),  # a long-lived token: its own expiry
        (jwt({"exp": NOW - 1}), 0),  # expired
        (jwt({"sub": "alice"}), DEFAULT_LIFETIME),  # no exp: the default
        (jwt({"exp": "soon"}), DEFAULT_LIFETIME),
        (jwt({"exp": True}), DEFAULT_LIFETIME),
        (jwt([NOW + 600]), DEFAULT_LIFETIME),
        ("fake-user.abcdef", DEFAULT_LIFETIME),  # not a JWT
        ("a.!!!.c", DEFAULT_LIFETIME),
        ("a.bm90IGpzb24.c", DEFAULT_LIFETIME),  # "not json"
        ("a.b.c.d", DEFAULT_LIFETIME),
    ],
    ids=repr,
)
def test_the_cookie_lives_no_longer_than_its_token(token: str, seconds: int) -> None:
    assert lifetime(token, NOW) == seconds


def test_the_expiry_is_read_from_the_claims_unverified() -> None:
    assert token_expiry(jwt({"exp": 1234567890})) == 1234567890.0
    assert token_expiry("opaque") is None
    assert lifetime("opaque", NOW, default=120) == 120


def test_what_a_token_may_hold() -> None:
    assert well_formed(jwt({"exp": NOW}))
    assert well_formed("fake-user.AbC_-~+/==")
    for bad in ("", "a b", "a;b", "a\r\nSet-Cookie: x=y", 'a"b', "a,b", "é", "x" * 4000):
        assert not well_formed(bad), bad


@pytest.mark.parametrize("tls", [False, True])
def test_the_cookie_s_flags(tls: bool) -> None:
    response = web.Response()
    signin.keep(response, "fake-user.token", 600, tls)
    morsel = SimpleCookie(response.cookies[COOKIE].OutputString()).get(COOKIE)
    assert morsel is not None
    assert morsel.value == "fake-user.token"
    assert morsel["httponly"] is True
    assert morsel["samesite"] == "Strict"
    assert morsel["path"] == "/"
    assert morsel["max-age"] == "600"
    assert morsel["expires"]
    assert bool(morsel["secure"]) is tls
    assert "domain" not in response.cookies[COOKIE].OutputString().lower()  # this host only
    cleared = web.Response()
    signin.clear(cleared, tls)
    gone = SimpleCookie(cleared.cookies[COOKIE].OutputString())[COOKIE]
    assert (gone.value, gone["max-age"], gone["path"]) == ("", "0", "/")
    assert bool(gone["secure"]) is tls


OPENS = [
    ("GET", "/", True),
    ("GET", "/nodes", True),
    ("GET", "/nodes/gpu-01", True),
    ("GET", "/workloads/team-a/train", True),
    ("GET", "/namespaces", True),
    ("GET", "/status", True),
    ("HEAD", "/workloads", True),
    ("GET", "/api/v1/pods", True),
    ("GET", "/api/v1/usage", True),
    ("GET", "/nodesx", False),
    ("GET", "/api/v1/push", False),
    ("POST", "/api/v1/push", False),
    ("GET", "/metrics", False),
    ("GET", "/prometheus/api/v1/query", False),
    ("POST", "/prometheus/api/v1/query", False),
    ("GET", "/federate", False),
    ("POST", "/workloads", False),
    ("POST", "/api/v1/nodes", False),
    ("PUT", "/", False),
    ("DELETE", "/api/v1/pods", False),
]
"""(method, path, whether the sign-in cookie may stand for a token there)."""


@pytest.mark.parametrize(("method", "path", "opened"), OPENS)
def test_what_the_cookie_opens(method: str, path: str, opened: bool) -> None:
    request = make_mocked_request(method, path, {"Cookie": f"{COOKIE}=fake-user.token"})
    assert opens(request) is opened
    assert signin.cookie_token(request) == ("fake-user.token" if opened else None)


def test_only_a_browser_opening_a_page_is_sent_to_the_form() -> None:
    html = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
    assert wants_sign_in(make_mocked_request("GET", "/workloads", html))
    assert not wants_sign_in(make_mocked_request("GET", "/workloads", {"Accept": "*/*"}))
    assert not wants_sign_in(make_mocked_request("GET", "/workloads"))
    assert not wants_sign_in(make_mocked_request("GET", "/api/v1/pods", html))
    assert not wants_sign_in(make_mocked_request("GET", "/metrics", html))
    assert not wants_sign_in(make_mocked_request("POST", "/workloads", html))


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_attempts_are_a_token_bucket_per_address() -> None:
    clock = Clock()
    attempts = Attempts(burst=3, every=10.0, clock=clock)
    assert [attempts.take("10.0.0.1") for _ in range(3)] == [0, 0, 0]
    assert attempts.take("10.0.0.1") == pytest.approx(10.0)  # empty: one comes back in 10 s
    assert attempts.take("10.0.0.2") == 0  # another address has its own
    clock.now += 5
    assert attempts.take("10.0.0.1") == pytest.approx(5.0)  # half a token back
    clock.now += 5
    assert attempts.take("10.0.0.1") == 0
    assert attempts.take("10.0.0.1") > 0
    clock.now += 1000
    assert [attempts.take("10.0.0.1") for _ in range(3)] == [0, 0, 0]  # never more than the burst
    assert attempts.take("10.0.0.1") > 0


def test_the_attempts_table_is_bounded() -> None:
    clock = Clock()
    attempts = Attempts(burst=1, every=60.0, clients=4, clock=clock)
    assert attempts.take("a") == 0
    assert attempts.take("a") > 0
    for address in "bcde":  # four more addresses: "a", the least recently seen, goes
        assert attempts.take(address) == 0
    assert len(attempts._buckets) == 4
    assert attempts.take("a") == 0  # forgotten: a full bucket again
    assert attempts.take("e") > 0  # kept
