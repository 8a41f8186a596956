"""The one TokenReview and SubjectAccessReview client and cache, and the one ``Authorization``
parser, on their own: the real kubernetes_asyncio client against FakeKube, real requests.

A push asks with the collector's audience, a read with none (the API server's own):
the cache keeps one answer per token *and* audience, so neither answers for the other,
and each is asked of the API server once per TTL.
"""

from __future__ import annotations

import base64

import pytest
from aiohttp.test_utils import make_mocked_request
from kubernetes_asyncio.client import ApiClient, AuthenticationV1Api, AuthorizationV1Api

from collector.auth.headers import Basic, basic, bearer
from collector.auth.reviews import (
    REFUSAL_TTL,
    Cache,
    Rejected,
    Reviews,
    Unavailable,
    User,
    path_attributes,
    pods_attributes,
)
from testing.fakekube import FakeKube, make_pod

AUDIENCE = "hami-usage-collector"


class Clock:
    """A clock a test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def reviews(kube_client: ApiClient, clock: Clock) -> Reviews:
    apis = AuthenticationV1Api(kube_client), AuthorizationV1Api(kube_client)
    return Reviews(*apis, ttl=60.0, clock=clock)


async def test_one_answer_per_token_and_audience_asked(fake: FakeKube, reviews: Reviews) -> None:
    agent = fake.add_pod(make_pod("agent", namespace="hami-system", node="node-a"))
    token = fake.issue_token(agent, "hami-usage-agent")
    pushed = await reviews.token(token, AUDIENCE)
    assert isinstance(pushed, User)
    assert pushed.name == "system:serviceaccount:hami-system:hami-usage-agent"
    assert pushed.audiences == (AUDIENCE,)
    assert fake.token_reviews == 1
    assert await reviews.token(token) is not pushed  # a read's question is another question
    assert fake.token_reviews == 2
    for _ in range(3):
        assert await reviews.token(token, AUDIENCE) is pushed
        await reviews.token(token)
    assert fake.token_reviews == 2  # each kept for the TTL
    vault = await reviews.token(token, "vault")
    assert isinstance(vault, Rejected)
    assert "invalid for the target audiences" in vault.error
    assert await reviews.token(token, "vault") is vault  # a refusal is kept too (briefly)
    assert fake.token_reviews == 3
    unknown = await reviews.token("made-up")
    assert unknown == Rejected("")  # a token nobody issued: the API server says no more
    assert 0 < REFUSAL_TTL <= reviews.ttl


async def test_a_refusal_is_asked_again_sooner_than_an_answer(
    fake: FakeKube, reviews: Reviews, clock: Clock
) -> None:
    good, bad = fake.issue_user_token("alice"), "made-up"
    assert isinstance(await reviews.token(good), User)
    assert isinstance(await reviews.token(bad), Rejected)
    clock.now += REFUSAL_TTL - 1
    await reviews.token(good)
    await reviews.token(bad)
    assert fake.token_reviews == 2  # both kept
    clock.now += 2
    await reviews.token(good)
    await reviews.token(bad)
    assert fake.token_reviews == 3  # the refusal asked again: a token just granted waits little
    clock.now += 60 - REFUSAL_TTL
    await reviews.token(good)
    assert fake.token_reviews == 4  # the answer, after the TTL


async def test_an_api_server_that_cannot_answer_is_never_cached(
    fake: FakeKube, reviews: Reviews
) -> None:
    token = fake.issue_user_token("alice")
    fake.set_down(True)
    with pytest.raises(Unavailable) as down:
        await reviews.token(token)
    assert down.value.reached
    fake.set_down(False)
    assert isinstance(await reviews.token(token), User)
    await fake.stop()
    with pytest.raises(Unavailable) as gone:
        await reviews.token(fake.issue_user_token("bob"))
    assert not gone.value.reached


async def test_verdicts_are_kept_per_identity_and_question(
    fake: FakeKube, reviews: Reviews
) -> None:
    fake.allow_paths("bob", "/metrics")
    fake.allow_namespace("bob", "team-a")
    user = await reviews.token(fake.issue_user_token("bob"))
    assert isinstance(user, User)
    assert await reviews.allowed(user, ("path", "/metrics"), path_attributes("/metrics"))
    assert not await reviews.allowed(user, ("path", "/"), path_attributes("/"))
    assert await reviews.allowed(user, ("pods", "team-a"), pods_attributes("team-a"))
    assert not await reviews.allowed(user, ("pods", "team-b"), pods_attributes("team-b"))
    asked = fake.access_reviews
    assert asked == 4
    again = await reviews.token(fake.issue_user_token("bob"))  # another token, the same identity
    assert isinstance(again, User)
    assert await reviews.allowed(again, ("path", "/metrics"), path_attributes("/metrics"))
    assert fake.access_reviews == asked


def test_the_cache_is_bounded_expired_first_then_oldest() -> None:
    cache: Cache[int] = Cache(ttl=10.0, size=3)
    cache.put("a", 1, now=0.0, ttl=1.0)
    cache.put("b", 2, now=0.0)
    cache.put("c", 3, now=0.0)
    cache.put("d", 4, now=5.0)  # "a" has expired: it goes
    assert [cache.get(k, 5.0) for k in "abcd"] == [None, 2, 3, 4]
    cache.put("e", 5, now=6.0)  # none expired: the oldest, "b", goes
    assert [cache.get(k, 6.0) for k in "bcde"] == [None, 3, 4, 5]
    assert cache.get("e", 16.0) is None


HEADERS = [
    (None, None, None),
    ("Bearer abc.def", "abc.def", None),
    ("bearer   abc  ", "abc", None),  # the scheme is case-insensitive; spaces around go
    ("BEARER abc", "abc", None),
    ("Bearer", None, None),
    ("Bearer    ", None, None),
    ("Bearerabc", None, None),
    ("Token abc", None, None),
    ("Basic " + base64.b64encode(b"alice:s3:cret").decode(), None, Basic(b"alice", b"s3:cret")),
    ("basic " + base64.b64encode(b"alice:").decode(), None, Basic(b"alice", b"")),
    ("Basic " + base64.b64encode(b"no-colon").decode(), None, None),
    ("Basic !!!not-base64", None, None),
    ("Basic", None, None),
]
"""``Authorization`` as sent -> the bearer token, the basic credentials read from it."""


@pytest.mark.parametrize(("header", "token", "credentials"), HEADERS, ids=repr)
def test_one_parser_for_bearer_and_basic(
    header: str | None, token: str | None, credentials: Basic | None
) -> None:
    request = make_mocked_request("GET", "/", {} if header is None else {"Authorization": header})
    assert bearer(request) == token
    assert basic(request) == credentials
