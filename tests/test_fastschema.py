"""toolcrib.fastschema writes the schemas of plain signatures without pydantic: every schema it writes must be
exactly the one pydantic generates (over generated signatures), and it must write most of them."""

from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter
from typing_extensions import TypedDict

from conftest import examples
from toolcrib import fastschema
from toolcrib.fastschema import json_schema_of
from toolcrib.inference import model_of_fields
from toolcrib.names import clean_schema
from toolcrib.runner import PythonRunner
from toolcrib.schemas import self_contained
from toolcrib.tool import Tool

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


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.dictionaries(st.sampled_from(["a", "b", "path", "count", "mode"]), st.tuples(ANNOTATIONS, DEFAULTS),
                              max_size=4))
def test_a_written_input_schema_is_pydantics(fields: dict[str, tuple[Any, Any]]) -> None:
    written = fastschema.input_schema(fields)
    try:
        model = model_of_fields("t", dict(fields))
    except Exception:
        return  # pydantic cannot take it: nothing to compare
    if written is not None:
        assert written == json_schema_of(model, "validation")


@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fields=st.dictionaries(st.sampled_from(["a", "b", "path", "count", "mode"]), st.tuples(ANNOTATIONS, DEFAULTS),
                              max_size=4))
def test_a_flat_signature_s_schema_is_served_and_shown_as_written(fields: dict[str, tuple[Any, Any]]) -> None:
    """``is_flat`` lets a tool skip inlining and cleaning its input schema: only where both would leave it as it
    is, and the tool then serves exactly what the two passes would have made."""
    if not fastschema.is_flat(fields):
        return
    written = fastschema.input_schema(fields)
    assert written is not None
    assert self_contained(written) is written and clean_schema(written) is written
    spec = Tool(name="t", description="d", runner=PythonRunner(lambda **_: None, False, "keywords", None, False),
                annotations={},
                arguments=tuple(fields), make_input=lambda: model_of_fields("t", dict(fields)), signature=fields)
    assert spec.wire_input_schema == clean_schema(self_contained(spec.input_schema)) == written


def test_only_scalar_arguments_with_scalar_defaults_are_flat() -> None:
    flat = [{}, {"a": (str, ...), "b": (int, 3), "c": (float, 1.5), "d": (bool, True), "e": (str, None)}]
    not_flat = [
        {"a": (Optional[int], None)},  # noqa: UP045 - an anyOf the served schema rewrites
        {"a": (Annotated[str, Field(description="\u200bwhat")], ...)},  # prose to clean
        {"a": (list[str], ...)}, {"a": (dict[str, int], ...)}, {"a": (Literal["x", "y"], "x")},
        {"a": (str, ["x"])}, {"a": (float, float("nan"))}, {"a": (float, float("inf"))},
        {"a": (type("Named", (str,), {}), ...)},  # a subclass is not the plain class
        {"a": (str, ...), "b": (type(None), None)},
    ]
    assert [fastschema.is_flat(fields) for fields in flat] == [True, True]
    assert [fastschema.is_flat(fields) for fields in not_flat] == [False] * len(not_flat)


def test_the_common_signatures_are_written() -> None:
    common = [
        {"path": (str, ...), "start": (int, 1), "limit": (Optional[int], None)},  # noqa: UP045
        {"query": (Annotated[str, Field(description="Search terms")], ...), "max": (int, 10)},
        {"mode": (Literal["fast", "safe"], "safe"), "tags": (list[str], ["a"]), "extra": (dict[str, float], {})},
        {},
    ]
    for fields in common:
        written = fastschema.input_schema(fields)
        assert written is not None and written == json_schema_of(model_of_fields("t", fields), "validation")


def test_what_it_does_not_write_falls_back() -> None:
    class Thing:
        pass

    assert fastschema.input_schema({"x": (Annotated[int, Field(ge=0)], ...)}) is None  # a constraint: pydantic's
    assert fastschema.input_schema({"x": (Thing, ...)}) is None
    assert fastschema.input_schema({"x": (float, float("nan"))}) is None
    assert fastschema.input_schema({"x": (Literal[True], True)}) is None


@settings(max_examples=examples(200), deadline=None)
@given(fields=st.dictionaries(st.sampled_from(["result", "note", "count"]), ANNOTATIONS, min_size=1, max_size=3),
       total=st.booleans())
def test_a_written_output_schema_is_pydantics(fields: dict[str, Any], total: bool) -> None:
    shape = TypedDict("Shape", fields, total=total)  # type: ignore[operator]
    written = fastschema.output_schema(shape)
    if written is not None:
        assert written == json_schema_of(TypeAdapter(shape), "serialization")


_ROWS = '''
{future}
import typing
import typing_extensions
from typing import Generic, TypeVar

Alias = list[int]
str = bytes  # a module name shadows a builtin, as eval sees it
T = TypeVar("T")


class Plain({kind}):
    id: int
    name: str


class Aliased({kind}):
    ids: Alias


class Child(Plain):
    extra: float


class Partial({kind}, total=False):
    maybe: int


class Wrapped({kind}):
    later: typing_extensions.NotRequired[int]


class Boxed({kind}, Generic[T]):
    value: T
'''


@pytest.mark.parametrize("kind", ["typing.TypedDict", "typing_extensions.TypedDict"])
@pytest.mark.parametrize("future", ["from __future__ import annotations", ""])
def test_typed_dict_fields_are_read_as_typing_reads_them(kind: str, future: str) -> None:
    """A TypedDict's fields that are classes or name one are read by name (a fifth of what typing's evaluation
    costs): always what ``typing.get_type_hints`` answers, in the class's own module and across modules; anything
    else is typing's own answer."""
    import sys
    import types
    import typing

    from toolcrib.fastschema import _typed_dict_hints

    module = types.ModuleType(f"rows_{len(future)}_{kind.split('.')[0]}")
    sys.modules[module.__name__] = module
    try:
        # compiled apart from this file's own `from __future__ import annotations`, which exec would pass on
        exec(compile(_ROWS.format(future=future, kind=kind), module.__name__, "exec", dont_inherit=True),
             module.__dict__)
        other = types.ModuleType(module.__name__ + "_other")
        sys.modules[other.__name__] = other
        exec(compile(f"{future}\nfrom {module.__name__} import Plain\nint = float\nclass Elsewhere(Plain):\n"
                     "    more: str\n", other.__name__, "exec", dont_inherit=True), other.__dict__)
        read_by_name = []
        for cls in (module.Plain, module.Aliased, module.Child, module.Partial, module.Wrapped, module.Boxed,
                    other.Elsewhere):
            expected = typing.get_type_hints(cls, include_extras=True)
            found = _typed_dict_hints(cls)
            if found is not None:
                assert found == expected, cls.__name__
                read_by_name.append(cls.__name__)
        assert read_by_name == ["Plain", "Child", "Partial", "Elsewhere"]
        assert _typed_dict_hints(module.Plain) == {"id": int, "name": bytes}
        # a field is looked up in the subclass's module first, then where it was declared
        assert _typed_dict_hints(other.Elsewhere) == {"id": float if future else int, "name": bytes, "more": str}
    finally:
        sys.modules.pop(module.__name__, None)
        sys.modules.pop(module.__name__ + "_other", None)


def test_a_typed_dicts_output_schema_is_written_once_and_only_for_that_class() -> None:
    """The tools that return one TypedDict share its written schema (written once: at 10,000 tools the first
    tools/list is 0.1 s shorter); another class of the same name has its own, and a class that goes takes its
    entry along."""
    import gc

    class Out(TypedDict):
        result: int

    kept = Out
    first = fastschema.output_schema(Out)
    assert first == {"properties": {"result": {"type": "integer"}}, "required": ["result"], "type": "object"}
    assert fastschema.output_schema(Out) is first

    class Out(TypedDict, total=False):  # type: ignore[no-redef]
        result: str

    assert fastschema.output_schema(Out) == {"properties": {"result": {"type": "string"}}, "type": "object"}
    assert [cls for cls in fastschema._OUTPUT_SCHEMAS if cls.__name__ == "Out"] == [kept, Out]
    del Out
    gc.collect()
    assert [cls for cls in fastschema._OUTPUT_SCHEMAS if cls.__name__ == "Out"] == [kept]
    assert fastschema.output_schema(kept) is first


def test_a_prompts_arguments_are_the_same_written_or_from_pydantic() -> None:
    """A prompt of plain arguments has them read from the written schema and its model built at its first get;
    one with a constraint has pydantic's model and schema from the start. Both list and validate alike."""
    import toolcrib
    from toolcrib.declarations import get_prompt

    def plain(topic: Annotated[str, Field(description="What to look at")], count: int = 1) -> str:
        """Plain."""
        return topic * count

    def constrained(topic: Annotated[str, Field(description="What to look at")],
                    count: Annotated[int, Field(ge=1)] = 1) -> str:
        """Constrained."""
        return topic * count

    written, modelled = get_prompt(toolcrib.prompt(plain)), get_prompt(toolcrib.prompt(constrained))
    assert written is not None and modelled is not None
    assert written.arguments == modelled.arguments == (("topic", "What to look at", True), ("count", None, False))
    assert "model" not in vars(written)  # not built yet
    assert written.model.model_validate({"topic": "a", "count": "2"}).model_dump() == {"topic": "a", "count": 2}
    assert modelled.model.model_validate({"topic": "a", "count": "2"}).model_dump() == {"topic": "a", "count": 2}
    with pytest.raises(ValueError, match="count"):
        modelled.model.model_validate({"topic": "a", "count": "0"})
    with pytest.raises(ValueError, match="topic"):
        written.model.model_validate({"count": "2"})


class Found(TypedDict):
    count: int | None
    note: Annotated[str, Field(description="what was\u200b found")]


def test_the_tools_that_return_one_typed_dict_are_listed_with_one_output_schema() -> None:
    """tools/list's output schema (served: nullables as type lists; its prose clean) is made once a TypedDict and
    shared by the tools that return it; a list of it is wrapped, and a class of the same name has its own."""
    import toolcrib
    from toolcrib.tool import get_tool

    def one() -> Found:
        """One."""
        return {"count": 1, "note": "x"}

    def two(a: int) -> Found:
        """Two."""
        return {"count": a, "note": "x"}

    def many() -> list[Found]:
        """Many."""
        return []

    first, second, third = (get_tool(toolcrib.tool(fn)).wire_output_schema  # type: ignore[union-attr]
                            for fn in (one, two, many))
    wire = {"properties": {"count": {"type": ["integer", "null"]},
                           "note": {"description": "what was found", "type": "string"}},
            "required": ["count", "note"], "type": "object"}
    assert first == wire
    assert second is first
    given = {"properties": {"n": {"type": "integer"}}, "type": "object"}  # as an upstream server gives it
    assert dataclasses.replace(get_tool(one), given_output_schema=given).wire_output_schema == given  # type: ignore[arg-type]
    assert third == {"properties": {"result": {"items": {**wire, "title": "Found"}, "type": "array"}},
                     "required": ["result"], "type": "object"}

    class Found2(TypedDict):
        count: str

    Found2.__name__ = Found2.__qualname__ = "Found"

    def other() -> Found2:
        """Other."""
        return {"count": "1"}

    assert get_tool(toolcrib.tool(other)).wire_output_schema == {  # type: ignore[union-attr]
        "properties": {"count": {"type": "string"}}, "required": ["count"], "type": "object"}
