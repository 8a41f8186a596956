"""``/api/v1/…``: what each node, card and vGPU container is using right now, as JSON.

Each vGPU row carries its allocation (from the pod watch) next to its usage.
``GET /api/v1/usage`` is the exception to "right now": it sums allocation and
usage per namespace, pod or node over a window of the history (chargeback).

Every response is built synchronously from the store, with no ``await`` between
reading two node views, so it never mixes two store generations; it names the
generation it was built from. What a node's view says is parsed once per view
(:mod:`collector.views.usage`) and its summary kept with it, so listing every
node costs a cache lookup per unchanged node plus the JSON encoding.

Errors share one envelope, ``{"status": "error", "error": "not_found" |
"bad_request", "message": "…"}``; a bad query parameter is named in the message.
``GET /api/v1/openapi.json`` describes every endpoint, generated from the
response models.
"""
