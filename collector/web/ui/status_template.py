"""The status page's body: one template of the frame's environment, autoescaped.

The frame (:mod:`collector.web.ui.layout`) gives the title, the nav, the
stylesheet and the footer; this is what comes between. Every value is escaped
by the environment's autoescape: node names, pod names and error texts come
from the cluster and its monitors.
"""

from __future__ import annotations

BODY = """
<section aria-labelledby="collector"><h2 id="collector">This collector</h2>
<div class="summary">
<div>Readiness: <span class="state state-{{ 'ready' if not unready else 'waiting' }}">{{ 'ready' if not unready else 'not ready' }}</span>
{%- if unready %} <span class="muted">{{ unready }}</span>{% endif %}</div>
<div>Health: {% if dead %}<span class="state state-dead">dead</span> <span class="muted">{{ dead|join(', ') }}</span>
{%- else %}<span class="state state-up">ok</span>{% endif %}</div>
<div>Nodes with data: <b>{{ nodes|count }}</b></div>
<div>Live series: <b>{{ series|count }}</b></div>
{%- for state, count in counts %}
<div><a href="{{ state_links[state] }}">{{ state }}</a>: <b>{{ count|count }}</b></div>
{%- endfor %}
</div>
<p>Version {{ version }}. Grafana datasource (Prometheus type) URL: <code>{{ datasource }}</code></p>
<p class="muted">Served here:
{%- for label, href in endpoints %} <a href="{{ href }}">{{ label }}</a>{{ ' ·' if not loop.last }}{% endfor %}</p>
</section>

<section aria-labelledby="sources"><h2 id="sources">Sources by node</h2>
<div class="filters">State:
{%- for label, href, on in state_filters %}
<a href="{{ href }}"{% if on %} aria-current="true"{% endif %}>{{ label }}</a>
{%- endfor %}
&nbsp; Kind:
{%- for label, href, on in kind_filters %}
<a href="{{ href }}"{% if on %} aria-current="true"{% endif %}>{{ label }}</a>
{%- endfor %}
<form method="get" action="{{ path }}">
{%- for name, value in hidden %}<input type="hidden" name="{{ name }}" value="{{ value }}">{% endfor %}
<input type="search" name="node" value="{{ node }}" placeholder="node contains" aria-label="node contains">
<button>Filter</button></form>
</div>
<p class="muted">{{ matched|count }} of {{ total|count }} sources match. Times are ages at {{ now|utc }};
a source's last error stays shown after it recovers.</p>
{{ pager }}
<table id="source-table" class="sources">
<thead><tr><th scope="col">Node</th><th scope="col">Kind</th><th scope="col">Source</th><th scope="col">State</th><th scope="col" class="num">Last success</th><th scope="col" class="num">Duration</th><th scope="col" class="num">Samples</th><th scope="col">Data</th><th scope="col">Recent</th><th scope="col">Last error</th></tr></thead>
<tbody>
{%- for row in rows %}
<tr class="source" data-node="{{ row.node }}" data-state="{{ row.state }}" data-kind="{{ row.kind }}">
<td>{{ row.node }}</td><td>{{ row.kind }}</td>
<td>{{ row.name }}{% if row.url %}<br><span class="muted">{{ row.url }}</span>{% endif %}</td>
<td><span class="state state-{{ row.state }}">{{ row.state }}</span></td>
<td class="num"{% if row.last_success is not none %} title="{{ row.last_success|utc }}"{% endif %}>{{ row.last_success|ago(now) }}</td>
<td class="num">{{ row.duration|duration }}</td>
<td class="num">{{ row.samples|count }}</td>
<td>{{ row.data }}</td>
<td class="recent">{% for good in row.recent %}<span class="{{ 'good' if good else 'bad' }}" title="{{ 'good' if good else 'failed' }}"></span>{% endfor %}</td>
<td class="last-error">{% if row.error %}{{ row.error }} <span class="muted">({{ row.error_at|ago(now) }})</span>{% endif %}</td>
</tr>
{%- else %}
<tr><td colspan="10" class="muted">No source matches.</td></tr>
{%- endfor %}
</tbody>
</table>
{{ pager }}
</section>

<section aria-labelledby="unreported"><h2 id="unreported">Nodes with allocations but no usage source</h2>
<p class="muted">Pods hold GPU allocations on these nodes, but no monitor or agent reports their usage:
only the pod watch's allocations feed them (<code>health: unreported</code> in the REST API), so their pods show no usage.
After 5 minutes <a href="{{ unreported_runbook }}">{{ unreported_alert }}</a> fires for each.
{{ unreported|length }} of {{ unreported_matched }} matching nodes (of {{ unreported_total }}){% if node %}, node filter &ldquo;{{ node }}&rdquo;{% endif %}.</p>
<table id="unreported-table" class="panel">
<thead><tr><th scope="col">Node</th><th scope="col">Allocated pods</th><th scope="col">Alert</th></tr></thead>
<tbody>
{%- for row in unreported %}
<tr class="unreported" data-node="{{ row.node }}">
<td>{{ row.node }}</td>
<td>{% for namespace, pod in row.pods %}<span class="pod">{{ namespace }}/{{ pod }}</span>{{ ', ' if not loop.last }}{% endfor %}</td>
<td><a href="{{ unreported_runbook }}">{{ unreported_alert }}</a></td>
</tr>
{%- else %}
<tr><td colspan="3" class="muted">Every node with allocations has a usage source.</td></tr>
{%- endfor %}
</tbody>
</table>
{%- if refused %}
<p>Pushes refused since start: {% for reason, count in refused %}{{ reason }} {{ count|count }}{{ ', ' if not loop.last }}{% endfor %}.</p>
{%- endif %}
</section>

{%- for panel in panels %}
<section>
<h2>{{ panel.title }}</h2>
{%- if panel.note %}<p class="muted">{{ panel.note }}</p>{% endif %}
<table class="panel">
<thead><tr>{% for column in panel.columns %}<th scope="col">{{ column }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for row in panel.rows %}
<tr>{% for cell in row %}<td>{% if panel.columns[loop.index0] == 'State' %}<span class="state state-{{ cell }}">{{ cell }}</span>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>
{%- else %}
<tr><td colspan="{{ panel.columns|length }}" class="muted">{{ panel.empty }}</td></tr>
{%- endfor %}
</tbody>
</table>
</section>
{%- endfor %}
"""
"""The body; :mod:`collector.web.ui.status` fills it."""
