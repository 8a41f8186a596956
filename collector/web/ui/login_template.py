"""The bodies of ``/login`` in the pages' frame: the token form, and what ``--read-auth basic`` says.

No script: the form posts itself. The token field is a password field (not
shown over a shoulder, not kept by the browser's form history).
"""

from __future__ import annotations

FORM = """
<p>Sign in with a Kubernetes bearer token. The collector asks the API server who
the token belongs to (a TokenReview) and what it may read (SubjectAccessReviews):
a cluster reader sees the whole cluster, a tenant the namespaces it may list pods in.</p>
{%- if message %}
<p class="error" role="alert">{{ message }}</p>
{%- endif %}
<form id="signin" class="signin" method="post" action="/login">
<input type="hidden" name="next" value="{{ next }}">
<label for="token">Bearer token</label>
<input type="password" id="token" name="token" autocomplete="off" spellcheck="false" required>
<button type="submit">Sign in</button>
</form>
<p>Make a token for a service account allowed to read:</p>
<pre><code>kubectl -n &lt;namespace&gt; create token &lt;service-account&gt;</code></pre>
<p class="muted">A cluster reader needs <code>get</code> on the non-resource URLs
<code>/</code> and <code>/api/v1/*</code>; a tenant needs <code>list</code> on
<code>pods</code> in its namespaces. The token is kept in a cookie that only this
server reads (not the page's scripts), sent to this site alone, for no longer than
the token itself lives ({{ default_lifetime }} when it does not say); "Sign out" drops it.</p>
"""
"""The sign-in form (``--read-auth kubernetes``): ``message`` says why the last try failed."""

BASIC = """
<p>This collector signs you in with your browser's own prompt: a user name and
password of its web configuration's <code>basic_auth_users</code>. Since you can
read this page, you are signed in; the browser keeps the password until it is closed.</p>
<p><a href="/">Go to the overview</a>.</p>
"""
"""What ``/login`` says under ``--read-auth basic``."""
