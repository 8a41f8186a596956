"""The page frame every view of :mod:`collector.web.ui` shares: one Jinja template.

No script but the reload below, no font, no file from elsewhere: a page renders
wherever the collector is reachable. A reader signed in by the sign-in form
(:mod:`collector.web.ui.login`) gets a "Sign out" button: a form, no script. The reload runs every collector interval
unless the URL says ``refresh=0`` (the server then leaves it out too).
"""

from __future__ import annotations

FRAME = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{ title }} · hami-usage-collector</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1d1f23; background: #fff; }
header { background: #1d1f23; color: #fff; padding: .5em 1.5em; display: flex; flex-wrap: wrap; gap: .4em 1.6em; align-items: baseline; }
header .brand { font-weight: 700; }
header a { color: #cfe0fa; text-decoration: none; }
header a[aria-current] { color: #fff; font-weight: 700; border-bottom: 2px solid #fff; }
main { margin: 0 1.5em 2em; }
h1 { font-size: 1.4em; margin: .7em 0 .3em; }
h2 { font-size: 1.1em; margin: 1.4em 0 .4em; border-bottom: 1px solid #d8dbe0; padding-bottom: .2em; }
a { color: #1a5fb4; }
table { border-collapse: collapse; }
th, td { text-align: left; padding: .25em .6em; border-bottom: 1px solid #eceef1; vertical-align: middle; }
th { background: #f4f5f7; font-weight: 600; white-space: nowrap; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
.muted { color: #6b7280; }
.sr-only { position: absolute; width: 1px; height: 1px; overflow: hidden; clip: rect(0 0 0 0); white-space: nowrap; }
.cards { display: flex; flex-wrap: wrap; gap: .8em; margin: .6em 0; }
.card { border: 1px solid #d8dbe0; border-radius: 4px; padding: .5em .8em; min-width: 9em; }
.card .value { font-size: 1.35em; font-weight: 600; font-variant-numeric: tabular-nums; }
.card .label { color: #4b5563; font-size: .9em; }
.card .coverage { color: #6b7280; font-size: .8em; max-width: 24em; }
.over { color: #a51d2d; font-weight: 600; }
td .over { display: block; white-space: normal; }
table.workloads th, table.containers th { white-space: normal; }
td.name { overflow-wrap: anywhere; } td.node { white-space: nowrap; }
.uuid { overflow-wrap: anywhere; font-family: ui-monospace, monospace; font-size: 12px; }
.charts { display: flex; flex-wrap: wrap; gap: 1.2em; }
.state { display: inline-block; border-radius: 3px; padding: 0 .4em; font-weight: 600; font-size: .85em; }
.state-ok, .state-busy, .state-up, .state-synced, .state-ready, .state-serving { background: #d7f5dd; color: #1d6b2f; }
.state-failing, .state-dead, .state-error { background: #fbd9dc; color: #a51d2d; }
.state-stale, .state-unreported, .state-idle, .state-late, .state-waiting, .state-pending { background: #fdf0c4; color: #7a5a00; }
.summary { display: flex; flex-wrap: wrap; gap: .6em 2em; margin: .6em 0; }
.summary b { font-size: 1.2em; }
.filters { margin: .5em 0; }
.filters a { margin-right: .9em; }
.filters a[aria-current] { font-weight: 700; text-decoration: none; color: #1d1f23; }
.filters form { display: inline; }
table.sources, table.panel { width: 100%; }
table.sources td, table.panel td { vertical-align: top; }
td.last-error { color: #a51d2d; font-family: ui-monospace, monospace; font-size: 12px; max-width: 44em; overflow-wrap: anywhere; }
.recent span { display: inline-block; width: 7px; height: 12px; margin-right: 1px; border-radius: 1px; }
.recent .good { background: #33a853; } .recent .bad { background: #d93a49; }
.tiles { display: grid; grid-template-columns: repeat(auto-fill, minmax(10.5em, 1fr)); gap: .4em; margin: .5em 0; }
.tile { border: 1px solid #c9ccd2; border-radius: 4px; padding: .3em .5em; font-size: .85em; color: #1d1f23; text-decoration: none; }
.tile .name { font-weight: 600; overflow-wrap: anywhere; }
.tile.band-0 { background: #f4f5f7; } .tile.band-1 { background: #dbe8fb; } .tile.band-2 { background: #a9c8f3; }
.tile.band-3 { background: #6d9fe6; } .tile.band-4 { background: #3b7bd9; color: #fff; }
.tile .muted { color: inherit; opacity: .8; }
.tile.failing, .tile.stale, .tile.unreported { border: 2px dashed #a51d2d; }
.pages { margin: .6em 0; }
header .signout { margin-left: auto; }
header .signout button { font: inherit; color: #cfe0fa; background: none; border: 1px solid #cfe0fa; border-radius: 3px; padding: 0 .5em; cursor: pointer; }
form.signin { display: grid; gap: .5em; max-width: 40em; margin: 1em 0; }
form.signin input { font: inherit; padding: .3em .4em; }
form.signin button { justify-self: start; font: inherit; padding: .2em 1em; }
.error { color: #a51d2d; font-weight: 600; }
footer { margin: 2em 1.5em; color: #6b7280; font-size: .9em; }
footer code { font-size: .95em; }
</style>
</head>
<body>
<header><span class="brand">hami-usage-collector</span>
<nav aria-label="views">
{%- for label, href in nav %}
<a href="{{ href }}"{% if href == current %} aria-current="page"{% endif %}>{{ label }}</a>
{%- endfor %}
</nav>
<span class="muted">{{ reader }}</span>
{%- if signed_in %}
<form id="signout" class="signout" method="post" action="/logout"><button type="submit">Sign out</button></form>
{%- endif %}</header>
<main>
<h1>{{ title }}</h1>
{{ body }}
</main>
<footer>
{%- if links %}
<p class="links">The same numbers:
{%- for label, href in links %} <a href="{{ href }}"><code>{{ label }}</code></a>{{ ' ·' if not loop.last }}{% endfor %}</p>
{%- endif %}
<p>Rendered {{ rendered_at }}.
{%- if refresh_ms %} This page reloads every {{ interval }} (<a href="{{ stop_href }}">stop</a>).{% endif %}</p>
</footer>
{%- if refresh_ms %}
<script>
if (!/[?&]refresh=0(&|$)/.test(location.search)) {
  setTimeout(function () { location.reload(); }, {{ refresh_ms }});
}
</script>
{%- endif %}
</body>
</html>
"""
"""The frame; :func:`collector.web.ui.layout.render` fills it."""
