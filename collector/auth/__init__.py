"""Who is asking: every credential the collector takes, checked in one place.

- :mod:`~collector.auth.access`: the :class:`~collector.auth.access.Access` every read
  surface filters by, and where a request keeps it;
- :mod:`~collector.auth.headers`: the one reader of the ``Authorization`` header;
- :mod:`~collector.auth.reviews`: the one TokenReview and SubjectAccessReview client
  and cache, shared by pushes, reads and sign-ins;
- :mod:`~collector.auth.pushers`: who may push (a shared token, or a service account's
  token bound to its node);
- :mod:`~collector.auth.readers`: who may read (none, basic, kubernetes) and the
  middleware that asks every read;
- :mod:`~collector.auth.users`: the web configuration's ``basic_auth_users``;
- :mod:`~collector.auth.signin`: a person's sign-in cookie and its rules.

It imports nothing of the collector's stages: ``sources/`` and ``web/`` call it.
"""
