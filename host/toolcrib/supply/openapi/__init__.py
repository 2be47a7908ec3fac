"""OpenAPI documents as a source (``[openapi.<namespace>]``): each operation of a 3.0 or 3.1 document, JSON or
YAML, becomes the tool ``<namespace>__<operationId>``, called over HTTP through ``toolcrib.net``.

- **Names** follow the upstream servers' rules (``names.serving_names``): an operationId that breaks the tool-name
  rule is mapped (``get-pet`` -> ``get_pet``); an operation without one is named from its method and path
  (``GET /pet/{petId}`` -> ``get_pet_petId``); two that would share a name are both left out, and ``check`` says so.
- **The input schema** holds the path, query, header and cookie parameters and the request body: an object body's
  properties sit beside the parameters, any other body is the argument ``body``. A name that two places share is
  kept apart: each parameter of it becomes ``<name>__<where>`` (``id__query``), as FastMCP names them. Schemas are
  JSON Schema 2020-12: a component a schema refers to is copied into ``$defs`` (so a recursive one stays
  recursive), 3.0's ``nullable``, boolean ``exclusiveMinimum``/``exclusiveMaximum`` and ``example`` become their
  2020-12 forms, and a ``readOnly`` property is no argument.
- **The output schema** is the success response's JSON schema (an object as it is; anything else as
  ``{"result": ...}``, as MCP wants an object); an answer that does not match it is an error result that says so.
- **Annotations** come from the method, which toolcrib itself sends: GET, HEAD and OPTIONS are read-only and
  idempotent, PUT and DELETE idempotent, DELETE and PUT destructive, POST not read-only and not destructive, PATCH
  neither read-only nor idempotent, TRACE (which echoes the request, credentials and all) not read-only. So plan
  mode and ``@writes`` work with no curation.
- **Calls** go to the base URL only (every redirect hop must stay under it), through ``toolcrib.net``'s guard: the
  base URL's own host may be a private address (the operator named it), no other; its deadline and size cap. The
  configured credentials (headers, bearer, API key) go with every call and never into a message, a log or a result,
  in any form (``Credentials.scrub_result``); names come from the document, never from an agent's keys.
  A 2xx answer's JSON is the structured content; text is text; images and audio are content blocks; other bytes an
  embedded resource. Any other status is an error result with the status and a trimmed body, never a traceback.
- **The lock** records each operation's method, path and where its arguments go (``Runner.runs``) beside what an
  agent sees, so a document that moves an operation to another path or method holds that operation back.
"""

from __future__ import annotations

from toolcrib.supply.openapi.kind import KIND

__all__ = ["KIND"]
