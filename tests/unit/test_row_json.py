"""REST's container rows, written from a reading's fields, are the model's own JSON."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from collector.views.presented import container_row, row_json
from collector.views.usage import ContainerReading

texts = st.text(st.characters(codec="utf-8"), max_size=8)
counts = st.none() | st.integers(0, 2**63 - 1)
floats = st.none() | st.floats() | st.sampled_from([0.0, -0.0, 1e-7, 1e16, 1e300, 12.0, 5e-324])
readings = st.builds(
    ContainerReading,
    namespace=texts,
    pod=texts,
    container=texts,
    vdevice_index=st.none() | st.integers(0, 2**31),
    device_uuid=texts,
    memory_used=counts,
    memory_limit=counts,
    sm_utilization=floats,
    last_kernel_seconds=floats,
    memory_context=counts,
    memory_module=counts,
    memory_buffer=counts,
    memory_allocated=counts,
    cores_allocated=floats,
    idle_seconds=floats,
    energy=floats,
)


@settings(max_examples=400, deadline=None)
@given(node=texts, reading=readings)
def test_a_row_is_written_as_the_model_writes_it(node: str, reading: ContainerReading) -> None:
    """Field order, numbers (exponents, infinities and NaN as null), escaped strings and the
    utilisation of the allocation all as ``ContainerRow.model_dump_json``."""
    assert row_json(node, reading) == container_row(node, reading).model_dump_json().encode()
