"""Real local HTTP APIs for the OpenAPI source's tests: Starlette apps served by uvicorn on a thread, each request
and each answer checked against the OpenAPI document by openapi-core (an external judge: a request toolcrib makes
that the document does not allow is answered 400 with openapi-core's reason, never served)."""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent / "openapi"
PETSTORE = HERE / "petstore-3.0.json"


@dataclass
class Api:
    """A running API: its base URL and every request it was sent (method, path, query, headers, body)."""

    base_url: str
    seen: list[dict[str, Any]] = field(default_factory=list)


Handler = Callable[..., Any]  # (request, **path values) -> a werkzeug Response


@contextlib.contextmanager
def serve(document: Mapping[str, Any], routes: list[tuple[str, list[str], Handler]], prefix: str = "",
          validate: bool = True) -> Iterator[Api]:
    """Serve ``routes`` ((werkzeug rule, methods, handler), under ``prefix``) on 127.0.0.1 on a thread, each
    request and answer checked against ``document`` (its servers replaced by this one) unless not ``validate``."""
    from werkzeug.exceptions import HTTPException
    from werkzeug.routing import Map, Rule
    from werkzeug.serving import make_server
    from werkzeug.wrappers import Request, Response

    api = Api("")
    checked = copy.deepcopy(dict(document))
    checked["servers"] = [{"url": prefix or "/"}]
    rules = Map([Rule(prefix + rule, methods=methods, endpoint=handler) for rule, methods, handler in routes])
    judge = None
    if validate:
        from openapi_core import OpenAPI

        judge = OpenAPI.from_dict(checked)

    @Request.application  # type: ignore[arg-type]
    def app(request: Request) -> Response:
        api.seen.append({"method": request.method, "path": request.path, "raw": request.environ.get("RAW_URI"),
                         "query": request.query_string.decode(), "headers": {k.lower(): v for k, v in
                                                                              request.headers.items()},
                         "body": request.get_data()})
        if judge is not None:
            from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest

            try:  # validated, not unmarshalled: unmarshalling fills in defaults, readOnly ones included
                judge.validate_request(WerkzeugOpenAPIRequest(request))
            except Exception as exc:
                causes = [str(getattr(e, "__cause__", None) or e) for e in getattr(exc, "schema_errors", [exc])]
                return Response(json.dumps({"openapi-core": [str(exc), *causes]}), 400,
                                content_type="application/json")
        try:
            handler, values = rules.bind_to_environ(request.environ).match()
            response: Response = handler(request, **values)
        except HTTPException as exc:
            return exc.get_response()  # type: ignore[return-value]
        if judge is not None and response.status_code < 300:
            from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse

            try:
                judge.validate_response(WerkzeugOpenAPIRequest(request), WerkzeugOpenAPIResponse(response))
            except Exception as exc:  # the test's API is wrong, not toolcrib: say so loudly
                if type(exc).__name__ == "ResponseNotFound":  # a status the document does not describe (addPet's 200)
                    return response
                return Response(json.dumps({"the test's API answered against its document": str(exc)}), 599,
                                content_type="application/json")
        return response

    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)  # its shutdown waits a poll
    thread.start()
    api.base_url = f"http://127.0.0.1:{server.server_port}{prefix}"
    try:
        yield api
    finally:
        server.shutdown()
        thread.join(10)


def _json(value: Any, status: int = 200, **headers: str) -> Any:
    from werkzeug.wrappers import Response

    return Response(json.dumps(value, separators=(",", ":")), status, headers=headers,
                    content_type="application/json")


def petstore_routes(pets: dict[int, dict[str, Any]] | None = None) -> list[tuple[str, list[str], Handler]]:
    """The Swagger Petstore's pet, store and user operations, in memory."""
    from werkzeug.wrappers import Response

    pets = {} if pets is None else pets

    def add_pet(request: Any) -> Any:
        pet = request.get_json()
        pet.setdefault("id", max(pets, default=0) + 1)
        pets[pet["id"]] = pet
        return _json(pet)

    def update_pet(request: Any) -> Any:
        pet = request.get_json()
        if pet.get("id") not in pets:
            return _json({"message": "Pet not found"}, 404)
        pets[pet["id"]] = pet
        return _json(pet)

    def find_by_status(request: Any) -> Any:
        wanted = request.args.getlist("status")
        return _json([p for p in pets.values() if p.get("status") in wanted])

    def pet(request: Any, petId: int) -> Any:
        if request.method == "DELETE":
            if request.headers.get("X-Api-Key") != "special-key":
                return _json({"message": "no api_key"}, 400)
            pets.pop(petId, None)
            return Response(status=200)
        if petId not in pets:
            return _json({"message": f"Pet {petId} not found"}, 404)
        if request.method == "POST":  # updatePetWithForm: name and status in a form
            pets[petId].update({k: v for k, v in request.form.items() if k in ("name", "status")})
            return Response(status=200)
        return _json(pets[petId])

    def upload(request: Any, petId: int) -> Any:
        data = request.files["file"].read()
        return _json({"code": 200, "type": "upload", "message": f"{len(data)} bytes: {data!r}; "
                      f"{request.form.get('additionalMetadata')}"})

    def inventory(request: Any) -> Any:
        counts: dict[str, int] = {}
        for p in pets.values():
            counts[p.get("status", "none")] = counts.get(p.get("status", "none"), 0) + 1
        return _json(counts)

    def login(request: Any) -> Any:
        return _json(f"logged in as {request.args['username']}", **{"X-Rate-Limit": "5000",
                                                                   "X-Expires-After": "2026-12-02T00:00:00Z"})

    def users(request: Any) -> Any:
        body = request.get_json()
        return _json({"id": 7, "username": body[0]["username"]})

    def user(request: Any, username: str) -> Any:
        if request.method == "PUT":
            return Response(json.dumps({"path": username, "body": request.get_json()["username"]},
                                       separators=(",", ":")), 200)
        return _json({"id": 1, "username": username})

    return [
        ("/pet", ["POST"], add_pet), ("/pet", ["PUT"], update_pet),
        ("/pet/findByStatus", ["GET"], find_by_status),
        ("/pet/<int:petId>", ["GET", "POST", "DELETE"], pet),
        ("/pet/<int:petId>/uploadImage", ["POST"], upload),
        ("/store/inventory", ["GET"], inventory),
        ("/user/login", ["GET"], login),
        ("/user/createWithArray", ["POST"], users),
        ("/user/<username>", ["GET", "PUT"], user),
    ]


def wsgi_names(data: dict[str, Any]) -> None:
    """The Petstore's API key header is named ``api_key``, which WSGI cannot carry (CGI's HTTP_API_KEY comes back as
    Api-Key; nginx drops such headers too): the local API's copy names it ``X-Api-Key``, and deletePet's own
    ``api_key`` header ``X-Api-Key`` as well."""
    data["components"]["securitySchemes"]["api_key"]["name"] = "X-Api-Key"
    for parameter in data["paths"]["/pet/{petId}"]["delete"]["parameters"]:
        if parameter["name"] == "api_key":
            parameter["name"] = "X-Api-Key"


def document(path: Path = PETSTORE, change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """The Petstore document as the local API serves it (``wsgi_names``), with ``change`` made."""
    data: dict[str, Any] = json.loads(path.read_text())
    if path == PETSTORE:
        wsgi_names(data)
    if change is not None:
        change(data)
    return data


def opened_host(loaded: Any, env: Mapping[str, str] | None = None) -> Any:
    """A host with the config's OpenAPI sources made and opened by the one assembler (``toolcrib.supply``), as
    every entrance (``Host.from_config``, serve, the CLI) has them; no pack."""
    from toolcrib.host import Host
    from toolcrib.supply import opened

    return Host(loaded, sources=opened(loaded, env or {}), autoload=False, plugins={}, env=env or {})
