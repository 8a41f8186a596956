"""The Node records of every scheduler, decoded as their writers write them.

The examples are those of the upstream sources, verbatim (some UUIDs shortened with "…", as
they are quoted): HAMi's ``pkg/device/devices.go`` (``EncodeNodeDevices``, the colon form
of 2.4 to 2.7; ``MarshalNodeDevices``, the JSON of 2.8+ whose ``DeviceInfo`` keys are all
``omitempty``), the protocol page of HAMi's developer docs (the 2.4 / 4pd form), HAMi v2.10's
``pkg/device/nvidia/device_test.go`` (a MIG entry), Project-HAMi/volcano-vgpu-device-plugin's
``pkg/util/util.go`` (``EncodeNodeDevices``) and NVIDIA k8s-device-plugin's
``internal/lm/resource.go`` (GPU Feature Discovery's labels). The edge cases follow the
decoders' rules: HAMi's ``DecodeNodeDevices`` (7 or 9 fields, ``strconv.ParseInt`` /
``ParseBool``), Go's ``encoding/json`` (unknown keys ignored, null leaves a field at zero,
no float for an integer), Volcano's ``decodeNodeDevices`` (parts without a comma skipped) and
KAI's ``getNodeGpuMemory`` (a memory of 1 TiB-in-MiB or more is bytes).
"""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.normalise.registration import (
    REASONS,
    Capacity,
    Card,
    Problem,
    capacity,
    model_name,
)
from testing.fakekube import make_node

MIB = 1 << 20
H100 = "NVIDIA H100 80GB HBM3"
HAMI = "hami.io/node-nvidia-register"
VOLCANO = "volcano.sh/node-vgpu-register"
GPUS = {"nvidia.com/gpu": "80"}
VGPUS = {"volcano.sh/vgpu-number": "20", "volcano.sh/vgpu-cores": "200"} | {
    "volcano.sh/vgpu-memory": "163118"
}

V210 = (
    '[{"id":"GPU-356be20e-9e5c-4e2c-9304-05768d8d4741","count":10,"devmem":81559,"devcore":100,'
    '"type":"NVIDIA H100 80GB HBM3","mode":"hami-core","health":true},'
    '{"id":"GPU-c50fb581-1ee6-4c71-8089-160524247f09","index":1,"count":10,"devmem":81559,'
    '"devcore":100,"type":"NVIDIA H100 80GB HBM3","numa":1,"mode":"hami-core","health":true}]'
)
V25_27 = (
    "GPU-356b…4741,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,0,true,0,hami-core:"
    "GPU-c50f…7f09,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,1,true,1,hami-core:"
)
V24 = (
    "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    "GPU-0fc3…1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
)
MIG = (
    '{"id":"GPU-…","count":7,"devmem":40960,"devcore":100,"type":"NVIDIA A100-SXM4-40GB",'
    '"mode":"mig","migProfiles":[{"name":"1g.5gb","memoryMB":5120,"core":14,"sliceCount":1,'
    '"placements":[{"start":6,"size":1}]}],"health":true}'
)
VOLCANO_EXAMPLE = (
    "GPU-356b…4741,10,81559,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:"
    "GPU-c50f…7f09,10,81559,NVIDIA-NVIDIA H100 80GB HBM3,true,hami-core:"
)


def node(
    annotations: dict[str, str] | None = None,
    allocatable: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
) -> dict[str, Any]:
    return make_node("gpu-1", annotations, labels, allocatable)


def read(annotations: dict[str, str], allocatable: dict[str, str] | None = None) -> Capacity:
    found = capacity(node(annotations, GPUS if allocatable is None else allocatable))
    assert found is not None
    return found


def h100(uuid: str, index: int, memory_mib: int = 81559) -> Card:
    return Card(uuid, index, H100, memory_mib * MIB, 10, "hami-core", True)


# -- the upstream examples, verbatim ------------------------------------------------------


def test_hami_v2_10_json_example() -> None:
    found = read({HAMI: V210})
    assert found == Capacity(
        "gpu-1",
        "hami",
        (
            h100("GPU-356be20e-9e5c-4e2c-9304-05768d8d4741", 0),  # index omitted: 0
            h100("GPU-c50fb581-1ee6-4c71-8089-160524247f09", 1),
        ),
        count=2,
        usable=True,
    )
    assert all(found.healthy(card) for card in found.cards)


def test_hami_v2_5_to_2_7_colon_example() -> None:
    found = read({HAMI: V25_27})
    assert found.cards == (h100("GPU-356b…4741", 0), h100("GPU-c50f…7f09", 1))
    assert (found.count, found.problems, found.usable) == (2, (), True)


def test_hami_2_4_and_4pd_colon_example_of_seven_fields() -> None:
    v100 = "Tesla V100-PCIE-32GB"
    expected = (
        Card(
            "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec", 0, v100, 32768 * MIB, 10, "hami-core", True
        ),
        Card("GPU-0fc3…1448", 1, v100, 32768 * MIB, 10, "hami-core", True),  # its place: index 1
    )
    assert read({HAMI: V24}).cards == expected
    old = read({"4pd.io/node-nvidia-register": V24})
    assert (old.record, old.cards) == ("hami", expected)


def test_hami_mig_entry() -> None:
    (card,) = read({HAMI: f"[{MIG}]"}).cards
    assert card == Card("GPU-…", 0, "NVIDIA A100-SXM4-40GB", 40960 * MIB, 7, "mig", True)


def test_volcano_example() -> None:
    found = capacity(node({VOLCANO: VOLCANO_EXAMPLE}, VGPUS))
    assert found == Capacity(
        "gpu-1",
        "volcano",
        (h100("GPU-356b…4741", 0), h100("GPU-c50f…7f09", 1)),  # the place is the device ID
        count=2,
        usable=True,
    )


# -- every version's format, and what each omits ----------------------------------------


def test_json_omitted_keys_are_zero_and_an_omitted_health_is_false() -> None:
    (card,) = read({HAMI: '[{"id":"GPU-a"}]'}).cards
    assert card == Card("GPU-a", 0, "", 0, 0, "hami-core", False)


def test_json_of_v2_8_and_v2_9_and_unknown_keys_are_tolerated() -> None:
    entry = json.loads(V210)[1] | {
        "devicepairscore": {},  # v2.8 / v2.9: a struct tag without effect
        "migtemplate": [[{"name": "1g.10gb", "core": 14, "memory": 10240, "count": 7}]],
        "devicevendor": "NVIDIA",
        "custominfo": {"anything": [1, 2]},
        "somethingNew": True,
    }
    assert read({HAMI: json.dumps([entry])}).cards == (
        h100("GPU-c50fb581-1ee6-4c71-8089-160524247f09", 1),
    )


def test_json_null_leaves_the_field_at_zero() -> None:
    text = '[{"id":"GPU-a","index":null,"count":4,"devmem":null,"health":true}]'
    (card,) = read({HAMI: text}).cards
    assert (card.index, card.split, card.memory, card.health) == (0, 4, 0, True)


def test_type_prefixes_of_every_version_give_the_nvml_name() -> None:
    # <= 2.7 and Volcano: always "NVIDIA-" + name; 2.8+: only where the name does not start
    # with "NVIDIA" (pkg/device-plugin/nvidiadevice/nvinternal/plugin/register.go).
    assert model_name("NVIDIA-NVIDIA H100 80GB HBM3") == H100
    assert model_name(H100) == H100
    assert model_name("NVIDIA-Tesla V100-PCIE-32GB") == "Tesla V100-PCIE-32GB"


def test_volcano_five_fields_of_old_plugins_default_the_mode() -> None:
    text = "GPU-a,10,81559,NVIDIA-NVIDIA H100 80GB HBM3,false:"
    (card,) = read({VOLCANO: text}, VGPUS).cards
    assert card == Card("GPU-a", 0, H100, 81559 * MIB, 10, "hami-core", False)


def test_volcano_skips_parts_without_a_comma_as_volcano_does() -> None:
    text = "junk:GPU-a,10,100,NVIDIA-T4,true,mig::GPU-b,10,100,NVIDIA-T4,true,hami-core:"
    found = read({VOLCANO: text}, VGPUS)
    assert [(c.uuid, c.index, c.mode) for c in found.cards] == [
        ("GPU-a", 0, "mig"),
        ("GPU-b", 1, "hami-core"),
    ]
    assert (found.count, found.problems) == (2, ())


def test_hami_is_read_before_its_old_name_and_before_volcano() -> None:
    both = {HAMI: V210, "4pd.io/node-nvidia-register": V24, VOLCANO: VOLCANO_EXAMPLE}
    assert read(both).cards[0].uuid == "GPU-356be20e-9e5c-4e2c-9304-05768d8d4741"


def test_a_node_without_any_record_is_none() -> None:
    assert capacity(node()) is None
    assert capacity(node({HAMI: ""})) is None
    assert capacity({"metadata": {"name": "bare"}}) is None


# -- malformed parts: one card's problem, never the node's -----------------------------------


def test_json_that_does_not_parse_or_is_no_array() -> None:
    for text, detail in (("[{", "not JSON"), ('[{"id": "a"}] x', "not JSON")):
        found = read({HAMI: text})
        assert (found.cards, found.count) == ((), None)
        assert [p.reason for p in found.problems] == ["json"]
        assert detail in found.problems[0].detail
    # "[" marks the JSON form; an object after whitespace is still the JSON form's problem
    assert [p.reason for p in read({HAMI: ' [{"id":"a"}'}).problems] == ["json"]


def test_json_bad_entries_are_left_out_and_the_rest_kept() -> None:
    good = json.loads(V210)
    entries = [
        good[0],
        {"id": "GPU-float", "count": 10.0},  # Go: cannot unmarshal number 10.0 into int32
        {"id": "GPU-text", "devmem": "81559"},
        {"id": "GPU-neg", "count": -1},
        {"id": "GPU-bool", "health": "true"},
        None,
        "GPU-x",
        {"count": 10, "health": True},  # no id
        good[1],
    ]
    found = read({HAMI: json.dumps(entries)})
    assert [c.uuid for c in found.cards] == [good[0]["id"], good[1]["id"]]
    assert found.count == len(entries)
    assert [p.reason for p in found.problems] == ["value"] * 6 + ["uuid"]
    assert found.problems[0].detail.startswith("card 1: count")


def test_colon_bad_cards_are_left_out_and_the_rest_kept() -> None:
    cards = [
        "GPU-a,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,0,true,0,hami-core",
        "GPU-8,10,81559,100,NVIDIA-X,0,true,0",  # 8 fields
        "GPU-mem,10,80GB,100,NVIDIA-X,0,true",
        "GPU-sp,10, 81559,100,NVIDIA-X,0,true",  # Go's ParseInt takes no space
        "GPU-h,10,81559,100,NVIDIA-X,0,yes",
        "GPU-numa,10,81559,100,NVIDIA-X,n,true",
        "GPU-idx,10,81559,100,NVIDIA-X,0,true,-1,hami-core",
        ",10,81559,100,NVIDIA-X,0,true",
        "nocomma",
        "GPU-b,10,81559,100,NVIDIA-NVIDIA H100 80GB HBM3,0,T,3,mps",  # T: ParseBool's true
    ]
    found = read({HAMI: ":".join(cards) + ":"})
    assert [(c.uuid, c.index, c.mode, c.health) for c in found.cards] == [
        ("GPU-a", 0, "hami-core", True),
        ("GPU-b", 3, "mps", True),
    ]
    assert found.count == len(cards)
    reasons = [p.reason for p in found.problems]
    assert reasons == ["fields", "value", "value", "value", "value", "value", "uuid", "fields"]


def test_volcano_bad_cards_are_left_out_and_the_rest_kept() -> None:
    text = "GPU-a,10,100,NVIDIA-T4,true:GPU-b,10,100,NVIDIA-T4:GPU-c,ten,100,NVIDIA-T4,true:"
    found = read({VOLCANO: text}, VGPUS)
    assert [c.uuid for c in found.cards] == ["GPU-a"]
    assert [p.reason for p in found.problems] == ["fields", "value"]


def test_every_reason_is_one_of_the_bounded_set() -> None:
    assert set(REASONS) == {"json", "fields", "value", "uuid", "label"}


@settings(max_examples=300, deadline=None)
@given(
    key=st.sampled_from([HAMI, VOLCANO, "4pd.io/node-nvidia-register"]),
    text=st.one_of(
        st.text(
            alphabet=st.sampled_from("GPU-a1,:[]{}\"'0123456789truefalsNVID -.\\"), max_size=80
        ),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner),
            max_leaves=12,
        ).map(json.dumps),
    ),
)
def test_any_annotation_decodes_without_raising(key: str, text: str) -> None:
    found = capacity(node({key: text}, GPUS | VGPUS))
    if found is not None:
        assert all(p.reason in REASONS for p in found.problems)
        assert all(c.uuid and c.memory >= 0 and c.split >= 0 for c in found.cards)


def test_odd_shapes_of_the_object_are_no_record() -> None:
    assert capacity({"metadata": {"name": "x", "annotations": None, "labels": []}}) is None
    weird = {"metadata": {"name": "x", "annotations": {HAMI: 5}}, "status": {"allocatable": 3}}
    assert capacity(weird) is None


# -- health: the plugin's word and the node's allocatable ---------------------------------


def test_hami_card_healthy_only_with_allocatable_gpus() -> None:
    # v2.10 NvidiaGPUDevices.CheckHealth: the register annotation outlives the plugin
    for allocatable in ({"nvidia.com/gpu": "0"}, {}, {"nvidia.com/gpu": "many"}):
        found = read({HAMI: V210}, allocatable)
        assert found.usable is False
        assert not any(found.healthy(card) for card in found.cards)
    unhealthy = V210.replace(',"health":true}]', "}]")  # omitempty: an absent health is false
    found = read({HAMI: unhealthy})
    assert [found.healthy(card) for card in found.cards] == [True, False]


def test_hami_handshake_counts_for_the_colon_form_only() -> None:
    deleted = {"hami.io/node-handshake": "Deleted_2024-01-23 04:31:04"}
    # <= 2.7: the scheduler wrote Deleted_ after an unanswered Requesting_
    assert read({HAMI: V25_27} | deleted).usable is False
    assert read({HAMI: V25_27, "hami.io/node-handshake": "Reported 2024-01-23 04:30:04"}).usable
    assert (
        read({"4pd.io/node-nvidia-register": V24, "4pd.io/node-handshake": "Deleted_x"}).usable
        is False
    )
    # 2.8+: the handshake is not the health (2.9+ turns a stale Deleted_ back to Requesting_)
    assert read({HAMI: V210} | deleted).usable is True


def test_volcano_health_by_handshake_up_to_1_15_and_by_resources_after() -> None:
    text = VOLCANO_EXAMPLE
    assert read({VOLCANO: text}, VGPUS).usable is True
    no_cores = VGPUS | {"volcano.sh/vgpu-cores": "0"}
    assert read({VOLCANO: text}, no_cores).usable is False
    handshake = {"volcano.sh/node-vgpu-handshake": "Reported 2024-01-23 04:30:04 +0000 UTC"}
    old = {"volcano.sh/vgpu-number": "20"}  # plugins before the handshake's removal
    assert read({VOLCANO: text} | handshake, old).usable is True
    deleted = {"volcano.sh/node-vgpu-handshake": "Deleted_2024.01.23 04:31:04"}
    assert read({VOLCANO: text} | deleted, old).usable is False
    gone = {"volcano.sh/vgpu-number": "0"}
    assert read({VOLCANO: text} | handshake, gone).usable is False


# -- KAI: GPU Feature Discovery's labels, one model per node ---------------------------------


def gfd(labels: dict[str, str], allocatable: dict[str, str] | None = None) -> Capacity:
    found = capacity(node(None, allocatable or {}, labels))
    assert found is not None
    return found


def test_gfd_labels_give_count_model_and_memory_in_mib() -> None:
    labels = {
        "nvidia.com/gpu.count": "8",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.family": "hopper",
    }
    assert gfd(labels) == Capacity(
        "gpu-1", "gfd", (), 8, None, 81559 * MIB, "NVIDIA-H100-80GB-HBM3"
    )


def test_gfd_memory_of_a_tib_in_mib_or_more_is_bytes() -> None:
    assert gfd({"nvidia.com/gpu.memory": str(85520809984)}).card_memory == 85520809984
    assert gfd({"nvidia.com/gpu.memory": str((1 << 20) - 1)}).card_memory == ((1 << 20) - 1) * MIB


def test_gfd_count_falls_back_to_allocatable_gpus() -> None:
    found = gfd({"nvidia.com/gpu.product": "Tesla-T4"}, {"nvidia.com/gpu": "4"})
    assert (found.count, found.card_memory, found.model) == (4, None, "Tesla-T4")
    assert found.usable is None  # GFD knows no health


def test_gfd_bad_labels_are_counted_not_guessed() -> None:
    found = gfd({"nvidia.com/gpu.count": "eight", "nvidia.com/gpu.memory": "80GiB"})
    assert (found.count, found.card_memory) == (None, None)
    assert found.problems == (
        Problem("label", "nvidia.com/gpu.count: 'eight' is not a whole number"),
        Problem("label", "nvidia.com/gpu.memory: '80GiB' is not a whole number"),
    )
