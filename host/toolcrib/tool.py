"""A tool as toolcrib holds it: ``Tool``, the frozen declaration ``@toolcrib.tool`` attaches to a function (its
name, description, schemas, handler and options), and what it derives from them on demand (its input model and
validator, its input and output schemas as served and as sent). How a declaration is read is ``toolcrib.decorator``;
how a signature becomes a schema is ``toolcrib.inference``."""

from __future__ import annotations

import dataclasses
import inspect
import weakref
from collections.abc import Callable, Mapping
from functools import cached_property
from typing import Any

import typing_extensions
from pydantic import BaseModel, TypeAdapter

from toolcrib import fastschema, inference
from toolcrib.context import AvailabilityContext
from toolcrib.errors import ToolDeclarationError
from toolcrib.fastschema import json_schema_of
from toolcrib.names import clean_schema
from toolcrib.runner import Runner

ATTRIBUTE = "__toolcrib_tool__"
TASK_SUPPORT = ("forbidden", "optional", "required")  # whether a call of a tool runs as an MCP task (Tool.task)


ANNOTATION_KEYS: Mapping[str, type] = {
    "title": str,
    "readOnlyHint": bool,
    "destructiveHint": bool,
    "idempotentHint": bool,
    "openWorldHint": bool,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Unserved:
    """An item of ``toolcrib_tools``: an installed plugin whose tools the pack could serve and does not, and why
    (``Unserved("llm-tools-sqlite", "toolbox SQLite not configured: add [packs.llm.toolboxes.SQLite]")``).
    ``toolcrib plugins`` lists it beside the pack, in state ``not served``, with the reason."""

    origin: str
    why: str


@dataclasses.dataclass(frozen=True, eq=False)
class Tool:
    """A declared tool: everything the host needs, fixed at declaration.

    ``name`` is the tool's own name; the host adds the pack's namespace (``orders__lookup_order``).
    ``input_model`` validates arguments and ``input_schema`` is its JSON Schema as clients see it; both are built
    on first use (pydantic models cost about 0.15 ms each, so a host with thousands of tools starts fast), and
    ``prepare()`` builds them at once (``toolcrib check`` and the pack test kit do).
    """

    name: str
    description: str
    runner: Runner  # how its handler is run (toolcrib.runner): a Python function's, an upstream server's, ...
    annotations: Mapping[str, Any]
    arguments: tuple[str, ...]  # argument names, in order
    is_available: Callable[[AvailabilityContext], Any] | None = None
    timeout: float | None = None
    title: str | None = None
    rule_subjects: tuple[str, ...] = ()  # the arguments operators' argument rules match (paths, URLs, commands)
    describe: Callable[[AvailabilityContext], str] | None = None  # the description, written for each agent
    keywords: tuple[str, ...] = ()  # more words tool search finds it by ("delete" for a tool named rm)
    make_input: Callable[[], type[BaseModel]] = dataclasses.field(default=lambda: BaseModel, repr=False)
    return_annotation: Any = dataclasses.field(default=inspect.Signature.empty, repr=False)
    # Schemas given as they are, for tools described by JSON Schema rather than Python (upstream MCP servers).
    given_input_schema: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    given_output_schema: Mapping[str, Any] | None = dataclasses.field(default=None, repr=False)
    source_name: str | None = None  # the name its source gives it, when served under another (names.served_name)
    meta: Mapping[str, Any] | None = None  # its source's _meta (names.foreign_meta): an MCP App's ui, ...
    icons: tuple[Mapping[str, Any], ...] = ()  # its source's icons (names.foreign_icons)
    # The decorated function's arguments, name -> (annotation, default or ...): their schema is written directly
    # when they are plain (toolcrib.fastschema)
    signature: Mapping[str, tuple[Any, Any]] | None = dataclasses.field(default=None, repr=False)
    # The installed plugin (a distribution, such as llm-tools-simpleeval) the tool comes from, when its pack serves
    # other plugins' tools: operators' plugins rules match it beside the pack's namespace.
    origin: str | None = None
    # Whether a client that speaks MCP tasks gets a task for a call of it: "forbidden" (never), "optional" (it does)
    # or "required" (only such a client may call it). toolcrib.mcp.tasks.
    task: str = "forbidden"

    @property
    def handler(self) -> Callable[..., Any] | None:
        """The Python function that handles calls, when its runner is a ``PythonRunner``."""
        return getattr(self.runner, "handler", None)

    @property
    def is_async(self) -> bool:
        return self.runner.is_async

    @property
    def context_param(self) -> str | None:
        """The handler's parameter that gets the ``toolcrib.Context``, when its runner is a ``PythonRunner``."""
        return getattr(self.runner, "context_param", None)

    @cached_property
    def input_model(self) -> type[BaseModel]:
        """The pydantic model arguments are validated against (``ToolDeclarationError`` if it cannot be built)."""
        return self.make_input()

    @cached_property  # read on every call: cached as a plain attribute after the first
    def validate_input(self) -> Callable[[Any], BaseModel]:
        """Validate arguments into the input model (pydantic-core's own entry point, looked up once)."""
        return self.input_model.__pydantic_validator__.validate_python

    @cached_property
    def input_schema(self) -> dict[str, Any]:
        if self.given_input_schema is not None:
            return dict(self.given_input_schema)
        if self.signature is not None:  # plain arguments: written directly, the model waits for the first call
            fast = fastschema.input_schema(self.signature)
            if fast is not None:
                return fast
        return json_schema_of(self.input_model, "validation")

    @cached_property  # read on every call: cached as a plain attribute after the first
    def output_adapter(self) -> TypeAdapter[Any] | None:
        """Validates results against the declared return type, when it describes structured output."""
        return inference.output_adapter(self.name, self.return_annotation)

    @cached_property  # read on every call
    def check_output(self) -> Callable[[Any], Any] | None:
        """A handler's value checked against the declared return type and made JSON data, as ``output_adapter``'s
        ``validate_python`` then ``dump_python(mode="json", by_alias=True)`` make it, through pydantic-core's own
        entry points (the adapter's wrappers around them cost 0.8 us a call); None without structured output."""
        adapter = self.output_adapter
        if adapter is None:
            return None
        validate, dump = adapter.validator.validate_python, adapter.serializer.to_python
        return lambda value: dump(validate(value), mode="json", by_alias=True)

    @cached_property
    def wrap_output(self) -> bool:
        """A list-valued output, carried as ``{"result": [...]}``."""
        return inference.output_kind(self.return_annotation)[1]

    @cached_property
    def output_schema(self) -> dict[str, Any] | None:
        if self.given_output_schema is not None:
            return dict(self.given_output_schema)
        structured, wrap = inference.output_kind(self.return_annotation)
        if not structured:
            return None
        fast = fastschema.output_schema(self.return_annotation) if not wrap else None
        if fast is not None:
            return fast
        assert self.output_adapter is not None
        schema = json_schema_of(self.output_adapter, "serialization")
        if self.wrap_output:
            defs = schema.pop("$defs", None)
            wrapped: dict[str, Any] = {"type": "object", "properties": {"result": schema}, "required": ["result"]}
            if defs:
                wrapped["$defs"] = defs
            return wrapped
        return schema

    @cached_property
    def served_input_schema(self) -> dict[str, Any]:
        """The input schema as agents are served it (``toolcrib.schemas.self_contained``), made once a tool."""
        from toolcrib.schemas import self_contained

        if self._flat:
            return self.input_schema
        served: dict[str, Any] = self_contained(self.input_schema)
        return served

    @cached_property
    def served_output_schema(self) -> dict[str, Any] | None:
        from toolcrib.schemas import self_contained

        output = self.output_schema
        return None if output is None else self_contained(output)

    @cached_property
    def wire_input_schema(self) -> dict[str, Any]:
        """The input schema as tools/list shows it: served, its prose ``names.clean``."""
        if self._flat:
            return self.input_schema
        wire: dict[str, Any] = clean_schema(self.served_input_schema)
        return wire

    @cached_property
    def _flat(self) -> bool:
        """Plain scalar arguments (``fastschema.is_flat``): the input schema is served and shown as it is."""
        return self.given_input_schema is None and self.signature is not None and fastschema.is_flat(self.signature)

    @cached_property
    def wire_output_schema(self) -> dict[str, Any] | None:
        """The output schema as tools/list shows it (served, its prose clean), None without structured output. The
        tools that return one TypedDict share it: it is a function of the class alone, made once a class (a pack's
        tools mostly return one result type; made per tool, it cost 10 us a tool at 5,000 tools)."""
        annotation = self.return_annotation
        shared = self.given_output_schema is None and typing_extensions.is_typeddict(annotation)
        if shared and (known := _WIRE_OUTPUTS.get(annotation)) is not None:
            return known
        output = self.served_output_schema
        wire = None if output is None else clean_schema(output)
        if shared and wire is not None:
            _WIRE_OUTPUTS[annotation] = wire
        return wire

    def prepare(self) -> None:
        """Build the input model and both schemas now; ``ToolDeclarationError`` says what is wrong."""
        try:
            _ = self.input_model, self.input_schema, self.output_adapter, self.output_schema
        except ToolDeclarationError:
            raise
        except Exception as exc:
            raise ToolDeclarationError(f"tool {self.name!r}: cannot build its JSON schemas: {exc}") from exc

    def __repr__(self) -> str:
        return f"<Tool {self.name}>"


# a TypedDict's output schema as tools/list shows it (Tool.wire_output_schema), kept while the class lives
_WIRE_OUTPUTS: weakref.WeakKeyDictionary[type, dict[str, Any]] = weakref.WeakKeyDictionary()


def get_tool(obj: Any) -> Tool | None:
    """The ``Tool`` declared by ``obj`` (a decorated function or a ``Tool``), else None."""
    if isinstance(obj, Tool):
        return obj
    spec = getattr(obj, ATTRIBUTE, None)
    return spec if isinstance(spec, Tool) else None
