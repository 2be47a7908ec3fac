"""toolcrib.fastschema writes the schemas of plain signatures without pydantic: every schema it writes must be
exactly the one pydantic generates (over generated signatures), and it must write most of them."""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict

from toolcrib import fastschema
from toolcrib.fastschema import json_schema_of
from toolcrib.tool import _create_model

_LEAVES = st.sampled_from([str, int, float, bool, list, dict])
_LITERALS = st.one_of(
    st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3, unique=True).map(
        lambda v: Literal[tuple(v)]),  # type: ignore[misc]
    st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3, unique=True).map(
        lambda v: Literal[tuple(v)]),  # type: ignore[misc]
)


def _extend(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        inner.map(lambda t: list[t]),  # type: ignore[valid-type]
        inner.map(lambda t: dict[str, t]),  # type: ignore[valid-type]
        inner.map(lambda t: Optional[t]),  # noqa: UP045 - both spellings are what people write
        st.tuples(inner, inner).map(lambda p: p[0] | p[1]),
        inner.map(lambda t: Annotated[t, Field(description="what it is")]),
    )


ANNOTATIONS = st.recursive(st.one_of(_LEAVES, _LITERALS), _extend, max_leaves=4)
DEFAULTS = st.sampled_from([..., ..., None, 0, 1.5, "x", True, [1, 2], {"k": "v"}])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.dictionaries(st.sampled_from(["a", "b", "path", "count", "mode"]), st.tuples(ANNOTATIONS, DEFAULTS),
                              max_size=4))
def test_a_written_input_schema_is_pydantics(fields: dict[str, tuple[Any, Any]]) -> None:
    written = fastschema.input_schema(fields)
    try:
        model = _create_model("t", dict(fields))
    except Exception:
        return  # pydantic cannot take it: nothing to compare
    if written is not None:
        assert written == json_schema_of(model, "validation")


def test_the_common_signatures_are_written() -> None:
    common = [
        {"path": (str, ...), "start": (int, 1), "limit": (Optional[int], None)},  # noqa: UP045
        {"query": (Annotated[str, Field(description="Search terms")], ...), "max": (int, 10)},
        {"mode": (Literal["fast", "safe"], "safe"), "tags": (list[str], ["a"]), "extra": (dict[str, float], {})},
        {},
    ]
    for fields in common:
        written = fastschema.input_schema(fields)
        assert written is not None and written == json_schema_of(_create_model("t", fields), "validation")


def test_what_it_does_not_write_falls_back() -> None:
    class Thing:
        pass

    assert fastschema.input_schema({"x": (Annotated[int, Field(ge=0)], ...)}) is None  # a constraint: pydantic's
    assert fastschema.input_schema({"x": (Thing, ...)}) is None
    assert fastschema.input_schema({"x": (float, float("nan"))}) is None
    assert fastschema.input_schema({"x": (Literal[True], True)}) is None


@settings(max_examples=200, deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["result", "note", "count"]), ANNOTATIONS, min_size=1, max_size=3),
       total=st.booleans())
def test_a_written_output_schema_is_pydantics(fields: dict[str, Any], total: bool) -> None:
    shape = TypedDict("Shape", fields, total=total)  # type: ignore[operator]
    written = fastschema.output_schema(shape)
    if written is not None:
        assert written == json_schema_of(TypeAdapter(shape), "serialization")
