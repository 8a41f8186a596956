"""The canonical label sets of every series the collector makes, and the one way to key them.

Four producers make series: the monitor normaliser (labels renamed from a
monitor's text), the push receiver (agents' raw readings), the allocation
source (the pod watch) and the capacity source (the node watch). Each builds
its keys here, so a container's usage and its allocation carry the very same
labels and ``used / allocated`` joins one to one whichever source fed the
usage, and a card's registered capacity joins its readings the same way. A
key is the exposition text of the name and the labels sorted by name, without
``node`` (the store's renderer adds it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from collector.exposition.parse import Labels, parse_series
from collector.exposition.render import escape_label_value

UUID_LENGTH = 40
"""HAMi's monitors label a device with the first 40 characters of its UUID (a MIG UUID is
longer); every producer cuts the same way, or a pushed card and a pulled one would not be one."""

ZONE = ("zone", "vGPU")
"""The constant label HAMi's monitors put on every series of their collector."""

_VENDOR = "NVIDIA-"


def device_uuid(uuid: str) -> str:
    """The ``device_uuid`` label value of a card or MIG UUID as NVML or HAMi-core give it."""
    return uuid[:UUID_LENGTH]


def device_type(nvml_name: str) -> str:
    """The ``device_type`` label value: ``"NVIDIA-"`` and the NVML name, as HAMi's monitors
    spell it (NVML names start with "NVIDIA" already, so the value reads ``NVIDIA-NVIDIA H200``;
    kept, or a pushed card would not be the same series as the monitor's)."""
    return _VENDOR + nvml_name


def card_model(device_type: str) -> str:
    """The card's model as a person reads it, the NVML name: ``NVIDIA H200``, ``Tesla T4``."""
    return device_type.removeprefix(_VENDOR)


def card(index: int, nvml_name: str, uuid: str) -> Labels:
    """The labels of a physical card's series (``hami_host_gpu_*``)."""
    return (
        ("device_index", str(index)),
        ("device_type", device_type(nvml_name)),
        ("device_uuid", device_uuid(uuid)),
        ZONE,
    )


def vgpu(namespace: str, pod: str, container: str, vdevice_index: int, uuid: str) -> Labels:
    """The labels of one container's vGPU: its usage series and its allocation series alike."""
    return (
        ("container", container),
        ("device_uuid", device_uuid(uuid)),
        ("namespace", namespace),
        ("pod", pod),
        ("vdevice_index", str(vdevice_index)),
        ZONE,
    )


def card_reason(card_labels: Labels, name: str, value: str) -> Labels:
    """A card's labels with one more that says which of several counts or states it is
    (``type`` of an ECC count, ``xid``, ``reason`` of a clock event)."""
    return (*card_labels, (name, value))


def registered_card(card_labels: Labels, mode: str, model: str) -> Labels:
    """A card's labels with how its device plugin registered it (``hami_host_gpu_registration_info``):
    its ``mode`` (hami-core, mig, mps) and ``model``, the product name, which a card labelled
    by a Volcano monitor (no ``device_type``) would otherwise lack."""
    return (*card_labels, ("mode", mode), ("model", model))


def mig(
    parent_uuid: str, mig_uuid: str, gpu_instance: int, compute_instance: int, profile: str
) -> Labels:
    """The labels of a MIG instance's series: its parent card's ``device_uuid`` and its own identity."""
    return (
        ("compute_instance_id", str(compute_instance)),
        ("device_uuid", device_uuid(parent_uuid)),
        ("gpu_instance_id", str(gpu_instance)),
        ("mig_uuid", mig_uuid),
        ("profile", profile),
    )


def device(uuid: str) -> Labels:
    """The labels of a series about a device (a card or a MIG instance) and nothing else."""
    return (("device_uuid", device_uuid(uuid)),)


def container_info(namespace: str, pod: str, container: str, resource_kind: str) -> Labels:
    """The labels of a container's allocation info series (``hami_container_gpu_info``)."""
    return (
        ("container", container),
        ("namespace", namespace),
        ("pod", pod),
        ("resource_kind", resource_kind),
    )


def source(kind: str, name: str) -> Labels:
    """The labels of the collector's own series about a source (``node`` aside): provenance
    is never a data label, so it lives on these alone."""
    return (("kind", kind), ("source", name))


def series_key(name: str, labels: Iterable[tuple[str, str]]) -> bytes:
    """The canonical key of a series: its exposition text with labels sorted by name."""
    body = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in sorted(labels))
    return f"{name}{{{body}}}".encode()


def key_labels(key: bytes) -> tuple[str, Labels]:
    """The name and labels of a key: the inverse of :func:`series_key`.

    Without a backslash no value of a key holds a quote, so its quotes alternate
    opening and closing a value: one split on them is exact, and several times
    faster than the parser, which keys with escapes take.
    """
    brace = key.find(b"{")
    if brace < 0:
        return key.decode(), ()
    name = key[:brace].decode()
    if b"\\" in key:
        return parse_series(key)
    parts = key[brace + 1 : -1].split(b'"')  # label=, value, ,label=, value, ..., ""
    labels = (label.strip(b",=").decode() for label in parts[:-1:2])
    return name, tuple(zip(labels, (value.decode() for value in parts[1::2]), strict=True))


def key(family: str, labels: Iterable[tuple[str, str]]) -> bytes:
    """The series key of ``family`` with ``labels`` (any order; ``node`` left out)."""
    return series_key(family, labels)


def text(labels: Iterable[tuple[str, str]]) -> bytes:
    """The labels' part of a key, ``{...}``: families that share a label set share it, so
    ``family.encode() + text`` is :func:`key` without sorting and escaping again."""
    return series_key("", labels)


def keys(families: Sequence[str], labels: Labels) -> tuple[bytes, ...]:
    """The keys of several families of one label set, in ``families`` order."""
    shared = text(labels)
    return tuple(family.encode() + shared for family in families)
