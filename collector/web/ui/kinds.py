"""Which kind of GPU allocation each container holds, read from the pod watch's info series.

``hami_container_gpu_info`` says, per container, whether it holds vGPU slices
(HAMi's or Volcano's), whole cards, MIG instances, a KAI fraction or a DRA
claim. The REST read model does not carry it, so the views read it from the
node's keys: once per key set (a node's :class:`~collector.views.usage.Shape`),
as the read model parses its labels once per key set.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from collector.normalise import schema
from collector.normalise.labelsets import key_labels
from collector.views.usage import NodeUsage

LABELS: Mapping[str, str] = {
    "vgpu": "vGPU",
    "whole": "whole card",
    "mig": "MIG instance",
    "fraction": "KAI fraction",
    "dra": "DRA claim",
}
"""The ``resource_kind`` values and what a person reads for them."""
_PREFIX = schema.GPU_INFO.encode() + b"{"

Container = tuple[str, str, str]
"""namespace, pod, container."""


class Kinds:
    """The resource kind of each container of each node, kept per node key set."""

    def __init__(self) -> None:
        self._nodes: dict[str, tuple[object, Mapping[Container, str]]] = {}

    def of(self, usage: NodeUsage) -> Mapping[Container, str]:
        """Each container's kind label on the node; a container without info is absent."""
        cached = self._nodes.get(usage.node)
        if cached is not None and cached[0] is usage.shape:
            return cached[1]
        found = _kinds(usage)
        self._nodes[usage.node] = (usage.shape, found)
        return found

    def label(self, usage: NodeUsage, container: Container) -> str:
        """What a person reads for the container's kind (its flavour's name for a vGPU)."""
        kind = self.of(usage).get(container)
        if kind is None:
            return "unknown"
        if kind == "vgpu":
            volcano = any(h.source.kind is schema.SourceKind.VOLCANO for h in usage.view.sources)
            return f"{'Volcano' if volcano else 'HAMi'} vGPU"
        return LABELS.get(kind, kind)

    def prune(self, nodes: Sequence[NodeUsage]) -> None:
        """Forget the nodes not among ``nodes`` (the store's), once they are many."""
        if len(self._nodes) > len(nodes):
            for gone in self._nodes.keys() - {usage.node for usage in nodes}:
                del self._nodes[gone]


def _kinds(usage: NodeUsage) -> dict[Container, str]:
    found: dict[Container, str] = {}
    for key in usage.shape.keys:
        if key.startswith(_PREFIX):
            labels = dict(key_labels(key)[1])
            container = (
                labels.get("namespace", ""),
                labels.get("pod", ""),
                labels.get("container", ""),
            )
            found[container] = labels.get("resource_kind", "")
    return found
