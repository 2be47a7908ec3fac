"""The tool declaration API: every form, exact schemas, and misuse named at declaration."""

from __future__ import annotations

import inspect
import re
import sys
import types
from typing import Annotated, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, ValidationError
from typing_extensions import TypedDict

import toolcrib
from conftest import examples
from packs import ADDRESS_SCHEMA
from toolcrib import Context, Tool, ToolDeclarationError, tool
from toolcrib.inference import cleandoc
from toolcrib.tool import get_tool


@tool(annotations={"readOnlyHint": True})
async def lookup_order(order_id: Annotated[str, Field(description="Order ID, such as O-1001")]) -> dict:
    """Look up an order by its ID and return it as JSON."""
    return {"id": order_id}


def test_decorator_returns_the_function_unchanged() -> None:
    import asyncio

    assert asyncio.run(lookup_order("O-1")) == {"id": "O-1"}
    spec = get_tool(lookup_order)
    assert isinstance(spec, Tool)
    assert spec.name == "lookup_order"
    assert spec.description == "Look up an order by its ID and return it as JSON."
    assert dict(spec.annotations) == {"readOnlyHint": True}
    assert spec.is_async is True
    assert spec.input_schema == {
        "additionalProperties": False,
        "properties": {"order_id": {"description": "Order ID, such as O-1001", "type": "string"}},
        "required": ["order_id"],
        "type": "object",
    }
    assert spec.output_schema is None


def test_spec_is_frozen() -> None:
    spec = get_tool(lookup_order)
    assert spec is not None
    with pytest.raises(AttributeError):
        spec.name = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        spec.annotations["readOnlyHint"] = False  # type: ignore[index]


def test_bare_called_and_named_forms() -> None:
    @tool
    def a(x: int) -> str:
        """A."""
        return str(x)

    @tool()
    def b(x: int) -> str:
        """B."""
        return str(x)

    @tool("cee")
    def c(x: int) -> str:
        """C."""
        return str(x)

    @tool(name="dee", description="D, described here.", timeout=2, title="The D")
    def d(x: int = 3) -> str:
        return str(x)

    assert [get_tool(f).name for f in (a, b, c, d)] == ["a", "b", "cee", "dee"]  # type: ignore[union-attr]
    spec = get_tool(d)
    assert spec is not None
    assert (spec.description, spec.timeout, spec.title) == ("D, described here.", 2.0, "The D")
    assert spec.input_schema == {
        "additionalProperties": False,
        "properties": {"x": {"default": 3, "type": "integer"}},
        "type": "object",
    }
    assert spec.is_async is False
    assert a(4) == "4"


def test_constraints_defaults_enums_and_nested_models_carry_into_the_schema() -> None:
    class Address(BaseModel):
        city: str

    @tool
    def search(
        query: Annotated[str, Field(description="Search keywords", min_length=1)],
        max_results: Annotated[int, Field(ge=1, le=10, description="How many")] = 5,
        source: Literal["docs", "tickets"] = "docs",
        near: Address | None = None,
    ) -> list[str]:
        """Search the documentation."""
        return []

    spec = get_tool(search)
    assert spec is not None
    assert spec.input_schema == {
        "$defs": {
            "Address": {
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
                "title": "Address",
                "type": "object",
            }
        },
        "additionalProperties": False,
        "properties": {
            "query": {"description": "Search keywords", "minLength": 1, "type": "string"},
            "max_results": {"default": 5, "description": "How many", "maximum": 10, "minimum": 1, "type": "integer"},
            "source": {"default": "docs", "enum": ["docs", "tickets"], "type": "string"},
            "near": {"anyOf": [{"$ref": "#/$defs/Address"}, {"type": "null"}], "default": None},
        },
        "required": ["query"],
        "type": "object",
    }
    assert spec.output_schema == {
        "type": "object",
        "properties": {"result": {"items": {"type": "string"}, "type": "array"}},
        "required": ["result"],
    }


def test_context_parameter_is_injected_not_in_schema() -> None:
    @tool
    async def where(path: str, ctx: Context) -> str:
        """Say where."""
        return str(ctx.workspace / path)

    @tool
    def optional_ctx(ctx: Context | None = None) -> str:
        """No arguments but the context."""
        return "x"

    spec = get_tool(where)
    assert spec is not None and spec.context_param == "ctx"
    assert spec.input_schema["properties"] == {"path": {"type": "string"}}
    spec2 = get_tool(optional_ctx)
    assert spec2 is not None and spec2.context_param == "ctx"
    assert spec2.input_schema == {"additionalProperties": False, "properties": {}, "type": "object"}


def test_output_schema_from_a_model_return_type() -> None:
    class Order(BaseModel):
        id: str
        total: float

    class Summary(TypedDict):
        count: int

    @tool
    def get(order_id: str) -> Order:
        """Get an order."""
        return Order(id=order_id, total=1.0)

    @tool
    def count() -> Summary:
        """Count orders."""
        return {"count": 1}

    assert get_tool(get).output_schema == {  # type: ignore[union-attr]
        "properties": {"id": {"type": "string"}, "total": {"type": "number"}},
        "required": ["id", "total"],
        "type": "object",
    }
    assert get_tool(count).output_schema == {  # type: ignore[union-attr]
        "properties": {"count": {"type": "integer"}},
        "required": ["count"],
        "type": "object",
    }


def test_explicit_form_takes_a_model_and_returns_a_tool() -> None:
    class OrderQuery(BaseModel):
        order_id: str = Field(description="Order ID, such as O-1001")

    async def handler(args: OrderQuery) -> str:
        return args.order_id

    spec = tool("lookup_order", "Look up an order by order ID.", OrderQuery, handler,
                {"annotations": {"readOnlyHint": True}})
    assert isinstance(spec, Tool)
    assert spec.runner == toolcrib.PythonRunner(handler, is_async=True, convention="model")  # gets the model
    assert spec.input_schema == {
        "additionalProperties": False,
        "properties": {"order_id": {"description": "Order ID, such as O-1001", "type": "string"}},
        "required": ["order_id"],
        "type": "object",
    }
    assert issubclass(spec.input_model, OrderQuery)
    assert dict(spec.annotations) == {"readOnlyHint": True}
    # the author's model is left as it was
    assert OrderQuery.model_config.get("extra") is None


def test_explicit_form_with_a_dict_of_fields() -> None:
    spec = tool("add", "Add two numbers.", {"a": int, "b": (int, 0)}, lambda args: args.a + args.b)
    assert spec.input_schema == {
        "additionalProperties": False,
        "properties": {"a": {"type": "integer"}, "b": {"default": 0, "type": "integer"}},
        "required": ["a"],
        "type": "object",
    }




def test_explicit_form_with_a_json_schema_keeps_it_as_given_and_validates_with_it() -> None:
    seen = []
    spec = tool("register", "Register a person.", ADDRESS_SCHEMA, seen.append)
    assert spec.input_schema == ADDRESS_SCHEMA  # $schema, $defs and additionalProperties as written
    assert spec.input_schema is not ADDRESS_SCHEMA
    assert spec.arguments == ("name", "address")
    assert spec.runner.convention == "dict"  # the handler gets the validated arguments as a dict
    model = spec.input_model
    assert model.model_validate({"name": "Ada", "address": {"street": "Main"}}).__pydantic_extra__ == {
        "name": "Ada", "address": {"street": "Main"}}
    with pytest.raises(ValidationError) as caught:
        model.model_validate({"name": "", "address": {}, "age": 3})
    assert [(e["type"], e["loc"], e["msg"]) for e in caught.value.errors()] == [
        ("json_schema", (), "Additional properties are not allowed ('age' was unexpected)"),
        ("missing", ("address", "street"), "Field required"),
        ("json_schema", ("name",), "'' should be non-empty"),
    ]
    with pytest.raises(ValidationError) as caught:
        model.model_validate({})
    assert [(e["type"], e["loc"]) for e in caught.value.errors()] == [("missing", ("name",))]


def test_a_json_schema_that_is_not_one_is_refused_at_declaration() -> None:
    with _fails("tool 'x': an input schema describes the arguments object, so its type must be \"object\", "
                "not 'array'"):
        tool("x", "X.", {"type": "array", "items": {"type": "string"}}, lambda a: a)
    with _fails("tool 'x': an input schema describes the arguments object, so its type must be \"object\", "
                "not None"):
        tool("x", "X.", {"properties": {"a": {"type": "string"}}}, lambda a: a)
    with _fails("tool 'x': invalid JSON Schema at properties/a/type: 'text' is not valid under any of the given "
                "schemas"):
        tool("x", "X.", {"type": "object", "properties": {"a": {"type": "text"}}}, lambda a: a)
    with _fails("tool 'x': a JSON Schema holds only JSON values (no NaN, Infinity, sets or Python objects)"):
        tool("x", "X.", {"type": "object", "properties": {"a": {"maximum": float("nan")}}}, lambda a: a)
    # a dict of field types whose field is called "type" is still a dict of field types
    assert tool("x", "X.", {"type": str}, lambda a: a).runner.convention == "model"


def _fails(match: str) -> pytest.RaisesContext:  # type: ignore[type-arg]
    return pytest.raises(ToolDeclarationError, match="^" + re.escape(match) + "$")


def test_star_args_and_kwargs_are_refused() -> None:
    with _fails("tool 'f': *args is not supported: a tool's arguments are named; declare each one as a parameter"):
        @tool
        def f(*args: int) -> None:
            """F."""

    with _fails("tool 'g': **kw is not supported: a tool's arguments are named; declare each one as a parameter "
                "(or take one dict parameter)"):
        @tool
        def g(**kw: int) -> None:
            """G."""


def test_lambda_without_a_name_is_refused() -> None:
    with _fails("a lambda (or nameless callable) has no name to give the tool; pass one: tool(name='...')(fn)"):
        tool(lambda x: x)
    now = tool(name="now", description="The time.")(lambda: 42)
    assert get_tool(now).name == "now"  # type: ignore[union-attr]
    assert now() == 42


def test_missing_description_is_refused() -> None:
    with _fails("tool 'quiet' has no description: the model reads it to decide when to call the tool; write a "
                "docstring or pass description='...'"):
        @tool
        def quiet(x: int) -> int:
            return x


@pytest.mark.parametrize("bad", ["my-tool", "123invalid", "a__b", "_private", "", "x" * 65, "caf\u00e9", "tab\t"])
def test_bad_names_are_refused_with_the_rule(bad: str) -> None:
    with _fails(f"tool {bad!r}: invalid name: tool names are 1-64 characters: a letter first, then letters, digits "
                "and single underscores ('__' is reserved)"):
        tool(name=bad, description="Bad.")(lambda: None)


@pytest.mark.parametrize("good", ["a", "calculate_sum", "getWeather2", "x" * 64, "trailing_"])
def test_good_names(good: str) -> None:
    def fn() -> None:
        """Fine."""

    assert get_tool(tool(name=good)(fn)).name == good  # type: ignore[union-attr]


def test_unannotated_parameter_is_refused() -> None:
    with _fails("tool 'f': parameter 'x' has no type annotation; annotate it (e.g. x: str) so the input schema can "
                "say what it takes"):
        @tool
        def f(x) -> None:  # type: ignore[no-untyped-def]
            """F."""


def test_bad_annotations_timeout_and_availability_are_refused() -> None:
    def fn() -> None:
        """F."""

    with _fails("tool 'fn': unknown annotation 'read_only'; MCP annotations are title, readOnlyHint, "
                "destructiveHint, idempotentHint, openWorldHint"):
        tool(annotations={"read_only": True})(fn)
    with _fails("tool 'fn': annotation readOnlyHint must be a bool, not str"):
        tool(annotations={"readOnlyHint": "yes"})(fn)
    with _fails("tool 'fn': timeout must be a positive number of seconds, not 0"):
        tool(timeout=0)(fn)
    with _fails("tool 'fn': is_available must take one argument, the availability context "
                "(def check(ctx): ...)"):
        tool(is_available=lambda: True)(fn)
    with _fails("tool 'fn': rule_subject 'path' is not one of its arguments (none)"):
        tool(rule_subject="path")(fn)
    with _fails("tool() got unknown option(s) tags; it takes name, description, annotations, is_available, "
                "timeout, title, rule_subject, describe, keywords, inline, task"):
        tool(tags={"x"})(fn)
    with _fails("tool 'fn': keywords is a list of words, not 'delete'"):
        tool(keywords="delete")(fn)


def test_decorating_twice_or_a_class_is_refused() -> None:
    @tool
    def once() -> None:
        """Once."""

    with pytest.raises(ToolDeclarationError, match="is already declared as a tool; decorate it once"):
        tool(once)
    with _fails("@tool decorates functions, not classes (Thing)"):
        @tool
        class Thing:
            """A class."""


def test_async_generator_is_refused() -> None:
    with pytest.raises(ToolDeclarationError, match="is an async generator; a tool returns its result"):
        @tool
        async def stream() -> None:  # type: ignore[misc]
            """Stream."""
            yield 1


def test_explicit_form_misuse() -> None:
    class Q(BaseModel):
        q: str

    with _fails("tool 'x': schema must be a pydantic model class, a dict of field types or a JSON Schema object, "
                "not 'str'"):
        tool("x", "X.", "str", lambda a: a)
    with _fails("tool 'x': the explicit form's handler takes one argument, the validated input (def handler(args): "
                "...), plus optionally a toolcrib.Context parameter"):
        tool("x", "X.", Q, lambda a, b: a)
    with _fails("tool() with positional arguments is the explicit form: tool(name, description, schema, "
                "handler[, extras]); to decorate, use @tool(name=..., description=...)"):
        tool("x", "X.")


def test_public_surface() -> None:
    assert toolcrib.tool is tool
    for name in toolcrib.__all__:
        assert hasattr(toolcrib, name), name


def test_a_resource_and_a_prompt_carry_their_runners_as_a_tool_does() -> None:
    """What runs a declared resource or prompt is its runner, as for a tool (``toolcrib.runner``): the pipeline
    knows no calling convention of its own."""
    from toolcrib.declarations import get_prompt, get_resource

    @toolcrib.resource("notes://{day}", name="day")
    def day(ctx: toolcrib.Context, day: str) -> str:
        return day

    @toolcrib.prompt
    async def ask(topic: str) -> str:
        """Ask about a topic."""
        return topic

    resource, prompt = get_resource(day), get_prompt(ask)
    assert resource is not None and prompt is not None
    assert resource.runner == toolcrib.PythonRunner(day, is_async=False, context_param="ctx")
    assert prompt.runner == toolcrib.PythonRunner(ask, is_async=True)


_STRINGS = '''
from __future__ import annotations

import toolcrib

Query = {kind}


@toolcrib.tool
def find(q: Query, limit: int = 3) -> Query:
    """Find."""
    return q
'''


def test_string_annotations_resolve_in_their_own_module_every_time() -> None:
    """Under ``from __future__ import annotations`` every annotation is a string, typing's to evaluate; toolcrib
    reuses what typing compiles of a text, never what it evaluated to: the same text names each module's own type,
    however often it named another before."""
    found = []
    for kind in ("int", "str", "int"):
        module = types.ModuleType(f"strings_{kind}")
        exec(_STRINGS.format(kind=kind), module.__dict__)
        spec = get_tool(module.find)
        assert spec is not None
        found.append(spec.input_schema["properties"]["q"])
        assert spec.input_schema == {
            "additionalProperties": False,
            "properties": {"q": {"type": "integer" if kind == "int" else "string"},
                           "limit": {"default": 3, "type": "integer"}},
            "required": ["q"],
            "type": "object",
        }
    assert found == [{"type": "integer"}, {"type": "string"}, {"type": "integer"}]

    class Local(BaseModel):  # a type local to the declaring function: found through its locals, as typing does
        city: str

    def near(where: Local) -> str:
        """Near."""
        return where.city

    assert tool(near) is near
    spec = get_tool(near)
    assert spec is not None and spec.input_schema["properties"]["where"] == {"$ref": "#/$defs/Local"}


def test_an_annotation_that_names_nothing_is_refused_with_typings_reason() -> None:
    def lost(q: Missing) -> str:  # type: ignore[name-defined]  # noqa: F821
        """Lost."""
        return q

    with _fails("tool 'lost': cannot resolve the type annotations of "
                "test_an_annotation_that_names_nothing_is_refused_with_typings_reason"
                ".<locals>.lost: name 'Missing' is not defined; define the types at module level"):
        tool(lost)

    def broken(q: str) -> str:
        """Broken."""
        return q

    broken.__annotations__ = {"q": "list[", "return": "str"}  # what no module could hold, but a tool may be given
    with _fails("tool 'broken': cannot resolve the type annotations of "
                "test_an_annotation_that_names_nothing_is_refused_with_typings_reason"
                ".<locals>.broken: Forward reference must be an expression -- got 'list['; define the types at "
                "module level"):
        tool(broken)


_SHAPES = '''
{future}
import typing
from typing import Any, Generic, Protocol

Alias = list[int]
NotAType = 3
str = bytes  # a module name shadows a builtin, as eval sees it


class Row(typing.TypedDict):
    id: int


def plain(a: int, b: float = 1.5, *, c: Row, d: bool = True) -> Row: ...
def shadowed(a: str, b: int) -> str: ...
def aliased(a: Alias) -> Any: ...
def nonsense(a: NotAType) -> int: ...
def generic(a: Generic) -> int: ...
def protocol(a: Protocol) -> int: ...
def none_text(a: int) -> None: ...
def varargs(a: int, *rest: int, b: int = 2, **more: int) -> int: ...
def posonly(a: int, /, b: int = 3) -> int: ...
def unannotated(a, b: int = 1): ...
{here}
def local(a: Here) -> Here: ...  # noqa: F821
def dotted(a: typing.Any) -> typing.List[int]: ...
'''


@pytest.mark.parametrize("future", [True, False])
def test_plain_signatures_are_read_as_typing_and_inspect_read_them(future: bool) -> None:
    """Declarations read a plain function's parameters from its code and its class-naming annotations by name (a
    fifth of what inspect and typing cost): the same answers as ``inspect.signature`` and ``typing.get_type_hints``
    give, shadowing, aliases, locals and what typing refuses included; anything else is typing's own answer."""
    import inspect
    import typing

    inference = sys.modules["toolcrib.inference"]
    module = types.ModuleType("shapes")
    source = _SHAPES.format(future="from __future__ import annotations" if future else "",
                            here="" if future else "Here = int")  # (eager: defined before it is named)
    exec(compile(source, "shapes", "exec", dont_inherit=True), module.__dict__)  # not this file's __future__
    here = {"Here": int}
    read_by_name = []
    for name in ("plain", "shadowed", "aliased", "nonsense", "generic", "protocol", "none_text", "varargs", "posonly",
                 "unannotated", "local", "dotted"):
        fn = getattr(module, name)
        local = here if name == "local" else None
        assert [tuple(p) for p in inference.parameters(fn, name)] == [
            (p.name, p.kind, p.default, p.annotation) for p in inspect.signature(fn).parameters.values()], name
        try:
            expected: object = typing.get_type_hints(fn, localns=local, include_extras=True)
        except Exception as exc:
            expected = str(exc)
        try:
            found: object = inference.type_hints(fn, name, local)
        except ToolDeclarationError as exc:
            found = str(exc.__cause__)
        assert found == expected, name
        if inference._plain_hints(fn, local) is not None:
            read_by_name.append(name)
    assert read_by_name == ["plain", "shadowed", "varargs", "posonly", "unannotated", "local"]
    assert inference.type_hints(module.shadowed, "shadowed", None) == {"a": bytes, "b": int, "return": bytes}


@settings(max_examples=examples(500), deadline=None)
@given(doc=st.text(alphabet=st.sampled_from(["a", "b", " ", "\t", "\n", "\r", "\x0b", "\u2028", "é"]), max_size=12))
def test_a_docstring_is_cleaned_as_inspect_cleans_it(doc: str) -> None:
    """The description a tool gets from its docstring: ``inspect.cleandoc``'s, also where one line is read directly."""
    assert cleandoc(doc) == inspect.cleandoc(doc)
