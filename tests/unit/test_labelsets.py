"""One label set per series, whichever producer made it: ``used / allocated`` joins one to one.

A container's vGPU is described three times: by a HAMi v2.10 monitor's text
(the normaliser), by an agent's push (the push receiver) and by its pod's
allocation annotation (the allocation source). All three must key their series
with identical labels, or the join loses the container.
"""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import given
from hypothesis import strategies as st

from collector.exposition.parse import Labels
from collector.normalise import labelsets, schema
from collector.normalise.bodies import Normaliser
from collector.normalise.labelsets import key_labels, series_key
from collector.sources.allocation_series import node_batch
from collector.sources.pods import StaticDirectory, pod_ref
from collector.sources.push import to_batch
from core.payload import Card, Device, Payload, Region

UUID = "GPU-0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0-extra"  # longer than a device_uuid label
CUT = UUID[: labelsets.UUID_LENGTH]
NODE = "gpu-1"


def _pod() -> dict[str, object]:
    return {
        "metadata": {
            "uid": "uid-train",
            "namespace": "team-a",
            "name": "train",
            "annotations": {"hami.io/vgpu-devices-allocated": f"{UUID},NVIDIA,500,25:;"},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "main"}]},
        "status": {"phase": "Running", "startTime": "2026-01-01T00:00:10Z"},
    }


def _labels_of(series: Mapping[bytes, float], family: str) -> set[Labels]:
    found = set()
    for key in series:
        name, labels = key_labels(key)
        if name == family:
            found.add(tuple(sorted(labels)))
    return found


def test_monitor_push_and_allocation_label_one_container_s_vgpu_alike() -> None:
    ref = pod_ref(_pod())
    pods = StaticDirectory({ref.uid: ref}, {})

    body = (
        "# HELP hami_vgpu_memory_used_bytes vGPU device memory usage in bytes\n"
        "# TYPE hami_vgpu_memory_used_bytes gauge\n"
        f'hami_vgpu_memory_used_bytes{{container="main",device_uuid="{CUT}",namespace="team-a",'
        f'pod="train",vdevice_index="0",zone="vGPU"}} 5e+08\n'
    ).encode()
    pulled = Normaliser(NODE).normalise(body).series

    payload = Payload(
        node=NODE,
        agent="agent-1",
        sequence=1,
        time=1000.0,
        nvml=True,
        cards=[Card(index=0, uuid=UUID, name="NVIDIA H200", memory_used=7, utilization=3.0)],
        regions=[
            Region(
                pod_uid=ref.uid,
                container="main",
                devices=[Device(index=0, uuid=UUID, memory_used=500, memory_limit=1000)],
            )
        ],
    )
    pushed, unowned = to_batch(payload, pods)
    assert unowned == 0

    (held,) = pods.holdings()
    allocated = node_batch([held], {}, 1000.0).series

    used_pulled = _labels_of(pulled, schema.VGPU_MEMORY_USED)
    used_pushed = _labels_of(pushed.series, schema.VGPU_MEMORY_USED)
    memory = _labels_of(allocated, schema.MEMORY_ALLOCATED)
    cores = _labels_of(allocated, schema.CORE_ALLOCATED)
    assert len(used_pulled) == 1
    assert used_pulled == used_pushed == memory == cores
    assert dict(next(iter(memory)))["device_uuid"] == CUT


def test_a_pushed_card_is_labelled_as_the_monitor_labels_it() -> None:
    """HAMi's monitor writes ``device_type`` as ``NVIDIA-`` + the NVML name: a pushed card
    must be the same series, and only its display drops the doubled vendor."""
    labels = dict(labelsets.card(2, "NVIDIA H200", UUID))
    assert labels == {
        "device_index": "2",
        "device_type": "NVIDIA-NVIDIA H200",
        "device_uuid": CUT,
        "zone": "vGPU",
    }
    assert labelsets.card_model(labels["device_type"]) == "NVIDIA H200"
    assert labelsets.card_model(labelsets.device_type("Tesla T4")) == "Tesla T4"


def test_keys_of_a_shared_label_text_equal_keys_made_one_by_one() -> None:
    labels = labelsets.vgpu("team-a", 'pod "q"', "main", 3, UUID)
    families = (schema.MEMORY_ALLOCATED, schema.IDLE)
    assert labelsets.keys(families, labels) == tuple(labelsets.key(f, labels) for f in families)


@given(
    st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), min_size=1).map(
        lambda s: "m_" + "".join(c for c in s if c.isalnum() or c == "_")
    ),
    st.dictionaries(
        st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,8}", fullmatch=True),
        st.text(alphabet=st.sampled_from('ab\\"\n{},=é '), max_size=12),
        max_size=5,
    ),
)
def test_a_key_decodes_to_what_made_it(name: str, labels: dict[str, str]) -> None:
    """Escaped or not, :func:`key_labels` is :func:`series_key`'s inverse."""
    assert key_labels(series_key(name, labels.items())) == (name, tuple(sorted(labels.items())))
