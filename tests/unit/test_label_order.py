"""Storage label sets in key order: what two of them tell about every set between them."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.tsdb.series import LabelSet, share_name

# names that sort before, at and after __name__ (uppercase and "_A" sort before it)
names = st.sampled_from(["A", "_A", "__name__", "a", "node", "zz"])
values = st.sampled_from(["", "m", "m\x01", "ma", "m_total", "n", "Z"])
label_sets = st.dictionaries(names, values, max_size=4)


@settings(max_examples=400, deadline=None)
@given(st.lists(label_sets, min_size=1, max_size=12), st.data())
def test_two_sets_sharing_a_name_vouch_for_every_set_between_them(
    raw: list[dict[str, str]], data: st.DataObject
) -> None:
    sets = sorted((LabelSet(labels) for labels in raw), key=lambda m: m.key)
    i = data.draw(st.integers(0, len(sets) - 1))
    j = data.draw(st.integers(i, len(sets) - 1))
    if share_name(sets[i], sets[j]):
        name = sets[i]["__name__"]
        assert all(m.get("__name__") == name for m in sets[i : j + 1])


def test_sets_of_one_metric_share_it_and_of_two_do_not() -> None:
    one = [LabelSet({"__name__": "m", "pod": p}) for p in "abc"]
    assert share_name(one[0], one[-1])
    two = sorted([*one, LabelSet({"__name__": "ma", "pod": "a"})], key=lambda m: m.key)
    assert not share_name(two[0], two[-1])
    assert not share_name(LabelSet({"A": "x", "__name__": "m"}), one[-1])
