"""A person signs in to the pages with a bearer token, against FakeKube's TokenReviews and
SubjectAccessReviews: the real collector, over HTTP (and once over TLS).

The token is checked as a header's is (the same reviews, the same cache, the same
tenant scoping); the cookie that keeps it is HttpOnly, SameSite=Strict, Path=/, Secure
under TLS and expires with the token; it opens the pages and the REST GETs they link,
never a push, ``/prometheus``, ``/metrics`` or another POST; a wrong token gets the
form again with 401 and no cookie; another site's Origin is refused; attempts are
rate-limited per address and counted with the reads' refusals.

The client keeps no cookies itself (:class:`aiohttp.DummyCookieJar`): each request
sends exactly the cookie the test gives it.
"""

from __future__ import annotations

import base64
import email.utils
import shutil
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from http.cookies import Morsel, SimpleCookie
from pathlib import Path
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import aiohttp
import bcrypt
import pytest
from helpers import eventually, running_collector, serving
from multidict import CIMultiDictProxy
from prometheus_client.parser import text_string_to_metric_families
from test_read_auth import READER, TENANT, collector, gpu_pod

from collector.app import build_app
from collector.auth.signin import COOKIE, DEFAULT_LIFETIME
from collector.settings import CollectorSettings
from collector.web.webconfig import load
from testing.certs import PKI
from testing.fakekube import FakeKube

HTML = {"Accept": "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8"}
"""What a browser's navigation asks for."""


class Answer(NamedTuple):
    status: int
    headers: CIMultiDictProxy[str]
    text: str

    @property
    def cookie(self) -> Morsel[str] | None:
        """The sign-in cookie this answer sets (or clears), if it does."""
        jar: SimpleCookie = SimpleCookie()
        for header in self.headers.getall("Set-Cookie", []):
            jar.load(header)
        return jar.get(COOKIE)


@dataclass
class Site:
    """The collector (read auth kubernetes, both teams' series) and a client without a jar."""

    url: str
    fake: FakeKube
    http: aiohttp.ClientSession
    reader: str
    tenant: str

    async def get(
        self, path: str, cookie: str | None = None, *, html: bool = False, **headers: str
    ) -> Answer:
        return await self._ask("GET", path, None, cookie, html, headers)

    async def post(
        self,
        path: str,
        data: dict[str, str] | None = None,
        cookie: str | None = None,
        *,
        origin: str | None = "ours",
        **headers: str,
    ) -> Answer:
        if origin is not None:
            headers["Origin"] = self.url if origin == "ours" else origin
        return await self._ask("POST", path, data, cookie, False, headers)

    async def sign_in(self, token: str, next_path: str = "/", **kw: Any) -> Answer:
        return await self.post("/login", {"token": token, "next": next_path}, **kw)

    async def _ask(
        self,
        method: str,
        path: str,
        data: dict[str, str] | None,
        cookie: str | None,
        html: bool,
        headers: dict[str, str],
    ) -> Answer:
        if cookie is not None:
            headers["Cookie"] = f"{COOKIE}={cookie}"
        if html:
            headers |= HTML
        async with self.http.request(
            method, self.url + path, data=data, headers=headers, allow_redirects=False
        ) as resp:
            return Answer(resp.status, resp.headers, await resp.text())

    async def refusals(self) -> dict[str, float]:
        """``hami_usage_collector_read_refused_total`` by reason, read as the cluster reader."""
        answer = await self.get("/metrics", Authorization=f"Bearer {self.reader}")
        return {
            s.labels["reason"]: s.value
            for family in text_string_to_metric_families(answer.text)
            for s in family.samples
            if s.name == "hami_usage_collector_read_refused_total"
        }


def jarless() -> aiohttp.ClientSession:
    return aiohttp.ClientSession(
        cookie_jar=aiohttp.DummyCookieJar(), timeout=aiohttp.ClientTimeout(total=10)
    )


@asynccontextmanager
async def site(fake: FakeKube, kubeconfig: Path, **settings: Any) -> AsyncIterator[Site]:
    async with collector(fake, kubeconfig, **settings) as reads, jarless() as http:
        yield Site(reads.url, fake, http, reads.reader, reads.tenant)


@pytest.fixture
async def s(fake: FakeKube, kubeconfig: Path) -> AsyncIterator[Site]:
    async with site(fake, kubeconfig) as running:
        yield running


async def signed_in(s: Site, token: str) -> str:
    """Sign in with ``token``; the cookie's value."""
    answer = await s.sign_in(token)
    assert answer.status == 303, answer.text
    assert answer.cookie is not None
    return answer.cookie.value


# -- the form and the way to it ----------------------------------------------------------


async def test_the_form_is_a_page_of_the_frame(s: Site) -> None:
    answer = await s.get("/login?next=/workloads%3Fnamespace%3Dteam-a", html=True)
    assert answer.status == 200
    assert answer.cookie is None
    assert '<form id="signin"' in answer.text
    assert 'type="password" id="token" name="token"' in answer.text
    assert 'name="next" value="/workloads?namespace=team-a"' in answer.text
    assert "kubectl -n &lt;namespace&gt; create token &lt;service-account&gt;" in answer.text
    assert 'aria-label="views"' in answer.text  # the pages' nav
    assert "setTimeout" not in answer.text  # no reload to lose what was typed
    assert answer.headers["X-Frame-Options"] == "deny"
    assert answer.headers["Cache-Control"] == "no-store"
    assert 'id="signout"' not in answer.text
    elsewhere = await s.get("/login?next=//evil.example/", html=True)
    assert 'name="next" value="/"' in elsewhere.text


async def test_a_browser_without_credentials_is_sent_to_the_form(s: Site) -> None:
    answer = await s.get("/workloads?namespace=team-a&refresh=0", html=True)
    assert answer.status == 303
    location = urlsplit(answer.headers["Location"])
    assert location.path == "/login"
    assert parse_qs(location.query) == {"next": ["/workloads?namespace=team-a&refresh=0"]}
    assert answer.cookie is None
    for page in ("/", "/nodes/node-a", "/namespaces", "/status"):
        assert (await s.get(page, html=True)).status == 303, page
    # a program asks for anything and keeps its 401; what is not a page is never redirected
    assert (await s.get("/workloads")).status == 401
    for path in ("/metrics", "/api/v1/pods", "/prometheus/api/v1/labels"):
        assert (await s.get(path, html=True)).status == 401, path
    # a refused header is the caller's: no form would change what its proxy sends
    assert (await s.get("/", html=True, Authorization="Bearer not-a-token")).status == 401


# -- signing in ----------------------------------------------------------------------------


async def test_a_tenant_signs_in_and_reads_only_its_namespaces(s: Site) -> None:
    reviews = s.fake.token_reviews
    answer = await s.sign_in(s.tenant, "/workloads?refresh=0")
    assert (answer.status, answer.headers["Location"]) == (303, "/workloads?refresh=0")
    cookie = answer.cookie
    assert cookie is not None
    assert cookie.value == s.tenant
    assert cookie["httponly"] is True
    assert cookie["samesite"] == "Strict"
    assert cookie["path"] == "/"
    assert not cookie["secure"]  # plain HTTP: a Secure cookie would never come back
    assert cookie["max-age"] == str(DEFAULT_LIFETIME)  # an opaque token says no expiry
    expires = email.utils.parsedate_to_datetime(cookie["expires"]).timestamp()
    assert time.time() < expires <= time.time() + DEFAULT_LIFETIME + 1
    assert s.fake.token_reviews == reviews + 1

    page = await s.get("/workloads?refresh=0", s.tenant, html=True)
    assert page.status == 200
    assert "team-a" in page.text
    assert "team-b" not in page.text
    assert f"{TENANT}: namespaces team-a" in page.text
    assert '<form id="signout"' in page.text
    status = await s.get("/status", s.tenant, html=True)
    assert status.status == 403  # a tenant's cookie is a tenant's
    pods = await s.get("/api/v1/pods", s.tenant)
    assert pods.status == 200
    assert "team-a" in pods.text
    assert "team-b" not in pods.text
    csv: list[Answer] = []

    async def reported() -> bool:  # the report needs two points of history
        csv[:] = [await s.get("/api/v1/usage?by=pod&format=csv", s.tenant)]
        return csv[0].status == 200 and "team-a" in csv[0].text

    await eventually(reported, 10, "the tenant's CSV report")
    assert "team-b" not in csv[0].text
    assert s.fake.token_reviews == reviews + 1  # the sign-in's review, from the same cache


async def test_the_cookie_opens_the_pages_and_rest_gets_only(s: Site) -> None:
    cookie = await signed_in(s, s.reader)
    for path in ("/?refresh=0", "/nodes?refresh=0", "/workloads/team-b/serve?refresh=0"):
        assert (await s.get(path, cookie)).status == 200, path
    for path in ("/namespaces?refresh=0", "/status", "/api/v1/nodes", "/api/v1/shards"):
        assert (await s.get(path, cookie)).status == 200, path
    header = await s.get("/?refresh=0", Authorization=f"Bearer {s.reader}")
    assert header.status == 200
    assert 'id="signout"' not in header.text  # a header's reader did not sign in here
    for path in ("/metrics", "/prometheus/api/v1/query?query=up", "/prometheus/api/v1/labels"):
        answer = await s.get(path, cookie)
        assert answer.status == 401, path
        assert answer.headers["WWW-Authenticate"].startswith("Bearer")
    for path, form in (
        ("/prometheus/api/v1/query", {"query": "up"}),
        ("/api/v1/nodes", {}),
        ("/workloads", {}),
    ):
        assert (await s.post(path, form, cookie)).status == 401, path


async def test_the_cookie_never_opens_the_push_endpoint(fake: FakeKube, kubeconfig: Path) -> None:
    fake.add_pod(gpu_pod("train", "team-a", "uid-a"))
    fake.allow_paths(READER, "/")
    async with (
        running_collector(
            kubernetes=True,
            kubeconfig=kubeconfig,
            flavours="hami",
            read_auth="kubernetes",
            push_auth="tokenreview",
            push_service_accounts=["monitoring/prometheus"],
        ) as (url, _),
        jarless() as http,
    ):
        s = Site(url, fake, http, fake.issue_user_token(READER), "")
        cookie = await signed_in(s, s.reader)
        payload = '{"node": "node-a", "agent": "a", "sequence": 1, "time": 1, "cards": []}'

        async def push(**headers: str) -> tuple[int, Any]:
            headers["Content-Type"] = "application/json"
            async with http.post(url + "/api/v1/push", data=payload, headers=headers) as resp:
                return resp.status, await resp.json()

        status, body = await push(Cookie=f"{COOKIE}={cookie}")
        assert (status, body["message"]) == (401, "no bearer token")
        status, body = await push(Authorization=f"Bearer {cookie}")  # the same token, as a header
        assert status == 403
        assert "neither a node nor a pod" in body["message"]


async def test_a_wrong_token_gets_the_form_again_with_401_and_no_cookie(s: Site) -> None:
    revoked = s.fake.issue_user_token(TENANT)
    s.fake.revoke_token(revoked)
    for token in ("not-a-token", revoked):
        answer = await s.sign_in(token, "/nodes")
        assert answer.status == 401, token
        assert answer.cookie is None
        assert "Set-Cookie" not in answer.headers
        assert '<form id="signin"' in answer.text
        assert "not accepted" in answer.text
        assert 'name="next" value="/nodes"' in answer.text  # where it was going, kept
    reviews = s.fake.token_reviews
    for token, said in (("", "Paste a token"), ("a; b=c", "not accepted")):
        answer = await s.sign_in(token)
        assert (answer.status, answer.cookie) == (401, None)
        assert said in answer.text
    assert s.fake.token_reviews == reviews  # neither was worth a review
    nobody = await s.sign_in(s.fake.issue_user_token("bob"))
    assert (nobody.status, nobody.cookie) == (403, None)
    assert "may read none of these pages" in nobody.text
    refused = await s.refusals()
    assert refused["bad_token"] >= 3
    assert refused["no_credentials"] >= 1
    assert refused["forbidden"] >= 1


async def test_a_jwt_s_cookie_expires_with_it(s: Site) -> None:
    expiry = time.time() + 600
    token = s.fake.issue_user_token(TENANT, expires=expiry)
    assert token.count(".") == 2
    answer = await s.sign_in(token)
    assert answer.status == 303
    assert answer.cookie is not None
    assert 590 <= int(answer.cookie["max-age"]) <= 600
    assert email.utils.parsedate_to_datetime(answer.cookie["expires"]).timestamp() <= expiry
    expired = s.fake.issue_user_token(TENANT, expires=time.time() - 1)
    answer = await s.sign_in(expired)
    assert (answer.status, answer.cookie) == (401, None)


async def test_another_site_may_not_sign_in_or_out(s: Site) -> None:
    host, port = s.url.removeprefix("http://").split(":")
    for origin in ("http://evil.example", f"http://{host}:{int(port) + 1}", "null"):
        answer = await s.sign_in(s.tenant, origin=origin)
        assert (answer.status, answer.cookie) == (403, None), origin
        assert "another site" in answer.text
    answer = await s.sign_in(s.tenant, origin=None, Referer="http://evil.example/a-form")
    assert (answer.status, answer.cookie) == (403, None)
    out = await s.post("/logout", cookie=s.tenant, origin="http://evil.example")
    assert (out.status, out.cookie) == (403, None)
    assert (await s.refusals())["cross_site"] == 5
    answer = await s.sign_in(s.tenant, origin=None, Referer=f"{s.url}/login?next=%2F")
    assert answer.status == 303
    answer = await s.sign_in(s.tenant, origin=None)  # no page sent it: not a forgery
    assert answer.status == 303


async def test_sign_in_attempts_are_rate_limited_and_counted(s: Site) -> None:
    for _ in range(5):
        assert (await s.sign_in("not-a-token")).status == 401
    answer = await s.sign_in("not-a-token")
    assert (answer.status, answer.cookie) == (429, None)
    assert int(answer.headers["Retry-After"]) >= 1
    assert "Too many sign-in attempts" in answer.text
    right = await s.sign_in(s.tenant)  # a right token waits its turn too
    assert (right.status, right.cookie) == (429, None)
    refused = await s.refusals()
    assert refused["rate_limited"] == 2
    assert refused["bad_token"] == 5
    # reads by the header are not sign-ins: the bucket does not touch them
    assert (await s.get("/api/v1/pods", Authorization=f"Bearer {s.tenant}")).status == 200


async def test_a_form_too_large_for_a_token_is_refused_unread(s: Site) -> None:
    reviews = s.fake.token_reviews
    answer = await s.post("/login", {"token": "x" * (20 << 10), "next": "/"})
    assert (answer.status, answer.cookie) == (413, None)
    assert "too large" in answer.text
    assert s.fake.token_reviews == reviews  # never reviewed
    assert (await s.refusals())["too_large"] == 1


# -- signing out, and a token that stops --------------------------------------------------


async def test_sign_out_drops_the_cookie_and_goes_back_to_the_form(s: Site) -> None:
    cookie = await signed_in(s, s.tenant)
    out = await s.post("/logout", cookie=cookie)
    assert (out.status, out.headers["Location"]) == (303, "/login")
    assert out.cookie is not None
    assert (out.cookie.value, out.cookie["max-age"], out.cookie["path"]) == ("", "0", "/")
    assert out.cookie["httponly"] is True
    assert out.cookie["samesite"] == "Strict"
    assert (await s.get("/workloads", html=True)).status == 303  # the browser sends none now


async def test_a_revoked_token_s_cookie_sends_the_browser_back_to_the_form(
    fake: FakeKube, kubeconfig: Path
) -> None:
    async with site(fake, kubeconfig, read_auth_ttl=0.2) as s:
        token = fake.issue_user_token(TENANT)
        cookie = await signed_in(s, token)
        assert (await s.get("/workloads?refresh=0", cookie, html=True)).status == 200
        fake.revoke_token(token)
        found: list[Answer] = []

        async def sent_back() -> bool:
            found[:] = [await s.get("/workloads?refresh=0", cookie, html=True)]
            return found[0].status == 303

        await eventually(sent_back, 10, "the revoked token's cookie refused")
        answer = found[0]
        assert answer.headers["Location"] == "/login?next=%2Fworkloads%3Frefresh%3D0"
        assert answer.cookie is not None
        assert answer.cookie["max-age"] == "0"  # the cookie that did not do is dropped
        assert (await s.get("/api/v1/pods", cookie)).status == 401


# -- the other read-auth modes, and TLS -----------------------------------------------------


async def test_without_read_auth_nobody_signs_in() -> None:
    async with running_collector(kubernetes=False, push_auth="none") as (url, _), jarless() as h:
        s = Site(url, FakeKube(), h, "", "")
        answer = await s.get("/login", html=True)
        assert (answer.status, answer.headers["Location"]) == (303, "/")
        answer = await s.sign_in("anything")
        assert (answer.status, answer.headers["Location"], answer.cookie) == (303, "/login", None)


async def test_with_basic_read_auth_the_browser_s_prompt_is_the_sign_in(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(4)).decode()
    (tmp_path / "web.yml").write_text(f"basic_auth_users:\n  alice: {hashed}\n")
    settings = CollectorSettings(
        listen="127.0.0.1:0", kubernetes=False, push_auth="none", read_auth="basic"
    )
    app = build_app(settings, web_config=load(tmp_path / "web.yml"))
    async with serving(app) as url, jarless() as http:
        s = Site(url, FakeKube(), http, "", "")
        prompt = await s.get("/login", html=True)
        assert prompt.status == 401
        assert prompt.headers["WWW-Authenticate"].startswith("Basic")
        auth = "Basic " + base64.b64encode(b"alice:s3cret").decode()
        page = await s.get("/login", html=True, Authorization=auth)
        assert page.status == 200
        assert "browser's own prompt" in page.text
        assert '<form id="signin"' not in page.text
        posted = await s.sign_in("anything", Authorization=auth)
        assert (posted.status, posted.cookie) == (303, None)


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs openssl")
async def test_under_tls_the_cookie_is_secure(
    fake: FakeKube, kubeconfig: Path, tmp_path: Path
) -> None:
    fake.allow_namespace(TENANT, "team-a")
    fake.add_pod(gpu_pod("train", "team-a", "uid-a"))
    pki = PKI(tmp_path)
    cert, key = pki.leaf("server", 1)
    (tmp_path / "web.yml").write_text(
        f"tls_server_config:\n  cert_file: {cert}\n  key_file: {key}\n"
    )
    config = load(tmp_path / "web.yml")
    settings = CollectorSettings(
        listen="127.0.0.1:0",
        kubeconfig=kubeconfig,
        flavours="hami",
        read_auth="kubernetes",
        push_auth="none",
    )
    context = ssl.create_default_context(cafile=str(pki.ca))
    async with (
        serving(build_app(settings, web_config=config), config.ssl_context) as url,
        aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=context),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=10),
        ) as http,
    ):
        s = Site(url, fake, http, "", fake.issue_user_token(TENANT))

        async def ready() -> bool:  # the pod watch knows team-a's GPU pod
            return (await s.get("/readyz")).status == 200

        await eventually(ready, 10, "the collector ready")
        answer = await s.sign_in(s.tenant)
        assert answer.status == 303, answer.text
        assert answer.cookie is not None
        assert answer.cookie["secure"] is True
        assert answer.cookie["httponly"] is True
        assert answer.cookie["samesite"] == "Strict"
        out = await s.post("/logout", cookie=answer.cookie.value)
        assert out.cookie is not None
        assert out.cookie["secure"] is True
        assert (await s.sign_in(s.tenant, origin=url.replace("https:", "http:"))).status == 403
