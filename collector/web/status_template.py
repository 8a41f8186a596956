"""The status page's HTML: one Jinja template, autoescaped, with its own small stylesheet.

Everything the page needs is in this one document (no script, no font, no
file from elsewhere), so it renders where the collector is reachable and
nothing else is. Every value is escaped by Jinja's autoescape: node names,
pod names and error texts come from the cluster and its monitors.
"""

from __future__ import annotations

PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>hami-usage-collector status</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0 1.5em 2em; color: #1d1f23; background: #fff; }
h1 { font-size: 1.4em; margin: .8em 0 .2em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em; border-bottom: 1px solid #d8dbe0; padding-bottom: .2em; }
nav a, .filters a { margin-right: .9em; }
a { color: #1a5fb4; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #eceef1; vertical-align: top; }
th { background: #f4f5f7; font-weight: 600; white-space: nowrap; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td.error { color: #a51d2d; font-family: ui-monospace, monospace; font-size: 12px; max-width: 44em; overflow-wrap: anywhere; }
td.muted, .muted { color: #6b7280; }
.state { display: inline-block; min-width: 5.5em; text-align: center; border-radius: 3px; padding: 0 .4em; font-weight: 600; }
.state-up, .state-synced, .state-ready, .state-serving { background: #d7f5dd; color: #1d6b2f; }
.state-failing, .state-dead, .state-error { background: #fbd9dc; color: #a51d2d; }
.state-late, .state-waiting, .state-pending { background: #fdf0c4; color: #7a5a00; }
.recent span { display: inline-block; width: 7px; height: 12px; margin-right: 1px; border-radius: 1px; }
.recent .good { background: #33a853; } .recent .bad { background: #d93a49; }
.summary { display: flex; flex-wrap: wrap; gap: .6em 2em; margin: .6em 0; }
.summary div b { font-size: 1.2em; }
.filters { margin: .5em 0; }
.filters .on { font-weight: 700; text-decoration: none; color: #1d1f23; }
.pages { margin: .6em 0; }
form { display: inline; }
</style>
</head>
<body>
<h1>hami-usage-collector <span class="muted">{{ version }}</span></h1>
<nav>
{%- for label, href in links %}
<a href="{{ href }}">{{ label }}</a>
{%- endfor %}
</nav>
<p>Grafana datasource (Prometheus type) URL: <code>{{ datasource }}</code></p>

<div class="summary">
<div>Readiness: <span class="state state-{{ 'ready' if not unready else 'waiting' }}">{{ 'ready' if not unready else 'not ready' }}</span>
{%- if unready %} <span class="muted">{{ unready }}</span>{% endif %}</div>
<div>Health: {% if dead %}<span class="state state-dead">dead</span> <span class="muted">{{ dead|join(', ') }}</span>
{%- else %}<span class="state state-up">ok</span>{% endif %}</div>
<div>Nodes with data: <b>{{ nodes }}</b></div>
<div>Live series: <b>{{ series }}</b></div>
{%- for state, count in counts %}
<div><a href="{{ state_links[state] }}">{{ state }}</a>: <b>{{ count }}</b></div>
{%- endfor %}
</div>

<h2 id="sources">Sources by node</h2>
<div class="filters">State:
{%- for label, href, on in state_filters %}
<a href="{{ href }}"{% if on %} class="on"{% endif %}>{{ label }}</a>
{%- endfor %}
&nbsp; Kind:
{%- for label, href, on in kind_filters %}
<a href="{{ href }}"{% if on %} class="on"{% endif %}>{{ label }}</a>
{%- endfor %}
<form method="get" action="/status">
{%- for name, value in hidden %}<input type="hidden" name="{{ name }}" value="{{ value }}">{% endfor %}
<input type="search" name="node" value="{{ node }}" placeholder="node contains" aria-label="node contains">
<button>Filter</button></form>
</div>
<p class="muted">{{ shown }} of {{ matched }} matching sources (of {{ total }}), page {{ page }} of {{ pages }}, {{ page_rows }} a page.
Times are ages at {{ rendered_at }} UTC. A source's last error stays shown after it recovers.</p>
<table id="source-table">
<thead><tr><th>Node</th><th>Kind</th><th>Source</th><th>State</th><th>Last success</th><th>Duration</th><th>Samples</th><th>Data</th><th>Recent</th><th>Last error</th></tr></thead>
<tbody>
{%- for row in rows %}
<tr class="source" data-node="{{ row.node }}" data-state="{{ row.state }}" data-kind="{{ row.kind }}">
<td>{{ row.node }}</td><td>{{ row.kind }}</td>
<td>{{ row.name }}{% if row.url %}<br><span class="muted">{{ row.url }}</span>{% endif %}</td>
<td><span class="state state-{{ row.state }}">{{ row.state }}</span></td>
<td class="num" title="{{ row.last_success|utc }}">{{ row.last_success|age(now) }}</td>
<td class="num">{{ row.duration|seconds }}</td>
<td class="num">{{ row.samples if row.samples is not none else '' }}</td>
<td>{{ row.data }}</td>
<td class="recent">{% for good in row.recent %}<span class="{{ 'good' if good else 'bad' }}" title="{{ 'good' if good else 'failed' }}"></span>{% endfor %}</td>
<td class="error">{% if row.error %}{{ row.error }} <span class="muted">({{ row.error_at|age(now) }})</span>{% endif %}</td>
</tr>
{%- else %}
<tr><td colspan="10" class="muted">No source matches.</td></tr>
{%- endfor %}
</tbody>
</table>
<div class="pages">
{%- if prev_href %}<a href="{{ prev_href }}">&larr; previous</a>{% endif %}
{%- if next_href %} <a href="{{ next_href }}">next &rarr;</a>{% endif %}
</div>

<h2 id="unreported">Nodes with allocations but no usage source</h2>
<p class="muted">Pods hold GPU allocations on these nodes, but no monitor or agent reports their usage:
only the pod watch's allocations feed them (<code>health: unreported</code> in the REST API), so their pods show no usage.
After 5 minutes <a href="{{ unreported_runbook }}">{{ unreported_alert }}</a> fires for each.
{{ unreported|length }} of {{ unreported_matched }} matching nodes (of {{ unreported_total }}){% if node %}, node filter &ldquo;{{ node }}&rdquo;{% endif %}.</p>
<table id="unreported-table">
<thead><tr><th>Node</th><th>Allocated pods</th><th>Alert</th></tr></thead>
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
<p>Pushes refused since start: {% for reason, count in refused %}{{ reason }} {{ count }}{{ ', ' if not loop.last }}{% endfor %}.</p>
{%- endif %}

{%- for panel in panels %}
<h2>{{ panel.title }}</h2>
{%- if panel.note %}<p class="muted">{{ panel.note }}</p>{% endif %}
<table>
<thead><tr>{% for column in panel.columns %}<th>{{ column }}</th>{% endfor %}</tr></thead>
<tbody>
{%- for row in panel.rows %}
<tr>{% for cell in row %}<td>{% if panel.columns[loop.index0] == 'State' %}<span class="state state-{{ cell }}">{{ cell }}</span>{% else %}{{ cell }}{% endif %}</td>{% endfor %}</tr>
{%- else %}
<tr><td colspan="{{ panel.columns|length }}" class="muted">{{ panel.empty }}</td></tr>
{%- endfor %}
</tbody>
</table>
{%- endfor %}
</body>
</html>
"""
"""The page; :mod:`collector.web.status` fills it."""
