"""OpenAPI documents as a source: the Swagger Petstore 3.0 document (tests/openapi, as the @readme/oas-examples
package ships it) served against a real local API that openapi-core checks every request and answer of, and the
Train Travel 3.1 YAML document from the same package on npm. Through the Python API and a real MCP client."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from conftest import config_from
from openapi_api import PETSTORE, _json, document, opened_host, petstore_routes, serve
from openapi_host import RULES, call
from toolcrib.host import Host

pytest.importorskip("openapi_core")
# openapi-core checks API keys, not OAuth (the Petstore's other scheme): it says so once, which is known here
pytestmark = pytest.mark.filterwarnings("ignore:Unsupported scheme type:UserWarning")


# The Petstore's two security schemes: an API key in the header api_key, and OAuth (a bearer token)
SECURITY = 'bearer = "${PET_TOKEN}"\napi_key = { name = "X-Api-Key", in = "header", value = "${PET_KEY}" }'
SECRETS = {"PET_TOKEN": "tok-123456", "PET_KEY": "special-key"}

PETSTORE_TOOLS = [
    "pets__addPet", "pets__createUser", "pets__createUsersWithArrayInput", "pets__createUsersWithListInput",
    "pets__deleteOrder", "pets__deletePet", "pets__deleteUser", "pets__findPetsByStatus", "pets__findPetsByTags",
    "pets__getInventory", "pets__getOrderById", "pets__getPetById", "pets__getUserByName", "pets__loginUser",
    "pets__logoutUser", "pets__placeOrder", "pets__updatePet", "pets__updatePetWithForm", "pets__updateUser",
    "pets__uploadFile",
]


def host_of(tmp_path: Path, table: str, env: dict[str, str] | None = None, doc: dict[str, Any] | None = None,
            rules: str = RULES) -> Host:
    """A host of one OpenAPI source, ``[openapi.pets]`` with ``table``'s keys, and no installed pack."""
    from toolcrib.config import load_config

    (tmp_path / "petstore.json").write_text(json.dumps(doc if doc is not None else document()))
    config = tmp_path / "toolcrib.toml"
    config.write_text(f'[openapi.pets]\ndocument = "petstore.json"\n{table}\n{rules}')
    return opened_host(load_config(config), env=env or {})




def text_of(result: dict[str, Any]) -> str:
    return "".join(block.get("text", "") for block in result["content"])


@pytest.fixture
def petstore() -> Any:
    pets = {1: {"id": 1, "name": "Rex", "photoUrls": [], "status": "available"},
            2: {"id": 2, "name": "Tom", "photoUrls": ["https://example.com/tom.png"], "status": "sold"}}
    with serve(document(), petstore_routes(pets), prefix="/v2") as api:
        yield api


# -- what is served --------------------------------------------------------------------------------------------


def test_every_petstore_operation_is_a_tool_named_by_its_operation_id(tmp_path: Path) -> None:
    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"')
    record = next(r for r in host.records if r.name == "pets")
    assert (record.kind, record.state, record.tool_count, record.error) == ("openapi", "loaded", 20, None)
    assert sorted(t.name for t in host.view("a").tools) == PETSTORE_TOOLS
    entry = host.catalog.entries["pets__getPetById"]
    assert (entry.supplier.name, entry.dimension, entry.source, entry.namespace) == (
        "openapi", "plugins", "pets", "pets")
    explained = host.explain("a", "pets__getPetById")
    assert explained is not None and (explained.checks[0].name, explained.checks[0].detail) == (
        "source", "OpenAPI document 'pets': allowed by agents.a.permissions.plugins.allow '*'")


def test_an_operation_s_schemas_annotations_and_description_come_from_the_document(tmp_path: Path) -> None:
    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"')
    tools = {t["name"]: t for t in host.view("a").export("mcp")}
    get = tools["pets__getPetById"]
    assert get["title"] == "Find pet by ID"
    assert get["description"] == "Find pet by ID\n\nReturns a single pet"
    assert get["inputSchema"] == {"type": "object", "properties": {"petId": {
        "type": "integer", "format": "int64", "description": "ID of pet to return"}}, "additionalProperties": False,
        "required": ["petId"]}
    assert get["annotations"] == {"readOnlyHint": True, "idempotentHint": True}
    category = {"type": "object", "properties": {"id": {"type": "integer", "format": "int64"},
                                                 "name": {"type": "string"}}}
    # served self-contained: every $ref to a component inlined (agent frameworks misread $defs)
    pet = get["outputSchema"]["allOf"][0]
    assert ("$defs" in get["outputSchema"], pet["required"], pet["properties"]["category"]) == (
        False, ["name", "photoUrls"], category)
    add = tools["pets__addPet"]  # an object body: its properties beside the parameters
    assert add["inputSchema"]["required"] == ["name", "photoUrls"]
    assert list(add["inputSchema"]["properties"]) == ["category", "name", "photoUrls", "tags", "status"]
    assert (add["inputSchema"]["properties"]["category"], "$defs" in add["inputSchema"]) == (category, False)
    assert add["annotations"] == {"readOnlyHint": False, "destructiveHint": False, "idempotentHint": False}
    assert tools["pets__deletePet"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True,
                                                       "idempotentHint": True}
    assert tools["pets__updatePet"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True,
                                                       "idempotentHint": True}
    # a name in two places is kept apart: the path's username and the body's
    update_user = tools["pets__updateUser"]["inputSchema"]
    assert list(update_user["properties"])[:3] == ["username__path", "id", "username"]
    assert update_user["required"] == ["username__path"]
    # a body that is not an object is the argument "body"
    body = tools["pets__createUsersWithArrayInput"]["inputSchema"]["properties"]["body"]
    assert (body["type"], body["description"], list(body["items"]["properties"])) == (
        "array", "List of user object", ["id", "username", "firstName", "lastName", "email", "password", "phone",
                                         "userStatus"])
    assert tools["pets__findPetsByTags"]["description"].startswith("Deprecated. Finds Pets by tags")
    # a response that is not an object is served as {"result": ...}
    assert tools["pets__findPetsByStatus"]["outputSchema"]["properties"] == {
        "result": {"type": "array", "items": pet}}


def test_plan_mode_shows_the_read_only_operations_with_no_curation(tmp_path: Path) -> None:
    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"')
    assert sorted(t.name for t in host.view("planner").tools) == [
        "pets__findPetsByStatus", "pets__findPetsByTags", "pets__getInventory", "pets__getOrderById",
        "pets__getPetById", "pets__getUserByName", "pets__loginUser", "pets__logoutUser"]
    why = host.explain("planner", "pets__addPet")
    assert not why.visible


def test_operations_are_chosen_by_id_tag_and_method_and_path(tmp_path: Path) -> None:
    table = ('base_url = "http://127.0.0.1:9/v2"\noperations = ["tag:store", "GET /pet/*", "loginUser"]\n'
             'exclude = ["getOrderById"]')
    host = host_of(tmp_path, table)
    assert sorted(t.name for t in host.view("a").tools) == [
        "pets__deleteOrder", "pets__findPetsByStatus", "pets__findPetsByTags", "pets__getInventory",
        "pets__getPetById", "pets__loginUser", "pets__placeOrder"]


# -- calls against the live API --------------------------------------------------------------------------------


def test_calls_send_what_the_document_says_and_answer_with_its_json(tmp_path: Path, petstore: Any) -> None:
    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)
    got = call(host, "pets__getPetById", {"petId": 1})
    assert got["isError"] is False
    assert got["structuredContent"] == {"id": 1, "name": "Rex", "photoUrls": [], "status": "available"}
    assert json.loads(text_of(got)) == got["structuredContent"]
    added = call(host, "pets__addPet", {"name": "Kit", "photoUrls": ["https://example.com/kit.png"],
                                         "status": "pending", "tags": [{"id": 3, "name": "small"}]})
    assert added["structuredContent"] == {"id": 3, "name": "Kit", "photoUrls": ["https://example.com/kit.png"],
                                          "status": "pending", "tags": [{"id": 3, "name": "small"}]}
    sent = petstore.seen[-1]
    assert (sent["method"], sent["path"], sent["headers"]["content-type"]) == ("POST", "/v2/pet", "application/json")
    assert json.loads(sent["body"]) == {"name": "Kit", "photoUrls": ["https://example.com/kit.png"],
                                        "tags": [{"id": 3, "name": "small"}], "status": "pending"}
    found = call(host, "pets__findPetsByStatus", {"status": ["available", "pending"]})
    assert petstore.seen[-1]["query"] == "status=available&status=pending"  # form, exploded
    assert [p["name"] for p in found["structuredContent"]["result"]] == ["Rex", "Kit"]
    assert call(host, "pets__updatePetWithForm", {"petId": 2, "name": "Tommy"})["content"] == [
        {"type": "text", "text": "HTTP 200 OK"}]
    sent = petstore.seen[-1]
    assert (sent["body"], sent["headers"]["content-type"]) == (b"name=Tommy", "application/x-www-form-urlencoded")
    assert call(host, "pets__getPetById", {"petId": 2})["structuredContent"]["name"] == "Tommy"
    deleted = call(host, "pets__deletePet", {"petId": 2})  # its X-Api-Key header is the operator's, no argument
    assert (deleted["isError"], petstore.seen[-1]["headers"]["x-api-key"]) == (False, "special-key")
    assert petstore.seen[-1]["headers"]["authorization"] == "Bearer tok-123456"
    image = base64.b64encode(b"\x89PNG\r\n\x1a\n\x00").decode()  # a file's bytes, as base64
    uploaded = call(host, "pets__uploadFile", {"petId": 1, "additionalMetadata": "front", "file": image})
    assert uploaded["structuredContent"]["message"] == "9 bytes: b'\\x89PNG\\r\\n\\x1a\\n\\x00'; front"
    assert petstore.seen[-1]["headers"]["content-type"].startswith("multipart/form-data; boundary=toolcrib-")
    assert call(host, "pets__uploadFile", {"petId": 1, "file": "not base64!"}) == {"content": [{
        "type": "text", "text": "argument 'file' is not base64: a file's bytes are sent as base64"}], "isError": True}
    login = call(host, "pets__loginUser", {"username": "ann", "password": "pw"})
    assert login["structuredContent"] == {"result": "logged in as ann"}
    assert call(host, "pets__createUsersWithArrayInput", {"body": [{"username": "bo"}]})["structuredContent"] == {
        "id": 7, "username": "bo"}
    user = call(host, "pets__updateUser", {"username__path": "ann", "username": "anne"})
    assert user["content"] == [{"type": "text", "text": '{"path":"ann","body":"anne"}'}]
    assert petstore.seen[-1]["path"] == "/v2/user/ann"


def test_an_http_error_is_an_error_result_with_status_and_body(tmp_path: Path, petstore: Any) -> None:
    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)
    got = call(host, "pets__getPetById", {"petId": 99})
    assert got == {"content": [{"type": "text", "text": 'GET /pet/{petId} answered HTTP 404 NOT FOUND: '
                                '{"message":"Pet 99 not found"}'}], "isError": True}


def test_arguments_are_checked_before_any_request(tmp_path: Path, petstore: Any) -> None:
    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)
    got = call(host, "pets__getPetById", {"petId": "one"})
    assert got["isError"] is True
    assert "petId" in text_of(got) and "'one' is not of type 'integer'" in text_of(got)
    got = call(host, "pets__addPet", {"name": "Kit"})
    assert got["content"] == [{"type": "text", "text": "Invalid arguments for pets__addPet:\n- photoUrls: required "
                               "argument is missing"}]
    assert call(host, "pets__getPetById", {"petId": 1, "petID": 2})["content"] == [{"type": "text", "text": (
        "Invalid arguments for pets__getPetById:\n- (arguments): Additional properties are not allowed ('petID' was "
        "unexpected)")}]
    assert petstore.seen == []


def test_a_path_argument_stays_in_its_segment(tmp_path: Path, petstore: Any) -> None:
    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)
    got = call(host, "pets__getUserByName", {"username": "../pet/1"})
    assert petstore.seen[-1]["raw"] == "/v2/user/..%2Fpet%2F1"  # one segment, whatever it holds
    assert got["isError"] is True and text_of(got).startswith("GET /user/{username} answered HTTP 404 NOT FOUND")
    for bad in ("..", "."):
        refused = call(host, "pets__getUserByName", {"username": bad})
        assert refused == {"content": [{"type": "text", "text": f"argument 'username' cannot be {bad!r}: it is a "
                                        "segment of the path"}], "isError": True}
    assert len(petstore.seen) == 1


def test_credentials_go_with_every_call_and_never_into_a_result(tmp_path: Path) -> None:
    def echo(request: Any, petId: int) -> Any:
        return _json({"message": f"bad request to {request.url} with {request.headers['authorization']}"}, 500)

    with serve(document(), [("/pet/<int:petId>", ["GET"], echo)], prefix="/v2", validate=False) as api:
        table = (f'base_url = "{api.base_url}"\nbearer = "${{PET_TOKEN}}"\n'
                 'api_key = { name = "key", in = "query", value = "${PET_KEY}" }\nheaders = { X-Team = "blue" }')
        host = host_of(tmp_path, table, env={"PET_TOKEN": "tok-123456", "PET_KEY": "key-abcdef"})
        got = call(host, "pets__getPetById", {"petId": 1})
        sent = api.seen[-1]
        assert (sent["headers"]["authorization"], sent["headers"]["x-team"], sent["query"]) == (
            "Bearer tok-123456", "blue", "key=key-abcdef")
        assert got == {"content": [{"type": "text", "text": 'GET /pet/{petId} answered HTTP 500 INTERNAL SERVER '
                                    f'ERROR: {{"message":"bad request to {api.base_url}/pet/1?key=*** with ***"}}'}],
                       "isError": True}


def test_a_missing_variable_fails_the_source_and_names_it(tmp_path: Path) -> None:
    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"\nbearer = "${NOT_SET}"')
    record = next(r for r in host.records if r.name == "pets")
    assert (record.state, record.error) == ("failed", "openapi.pets.bearer names ${NOT_SET}, which is not set")
    assert [t.name for t in host.view("a").tools if t.name.startswith("pets__")] == []


def test_redirects_must_stay_under_the_base_url(tmp_path: Path) -> None:
    from werkzeug.utils import redirect

    def away(request: Any, petId: int) -> Any:
        return redirect("/v2/pet/2" if petId == 1 else "/admin/secrets", 307)

    def pet(request: Any, petId: int) -> Any:
        return _json({"id": petId, "name": "Tom", "photoUrls": []})

    routes = [("/v2/pet/<int:petId>", ["GET"], lambda request, petId: (away if petId != 2 else pet)(request, petId))]
    with serve(document(), routes, validate=False) as api:
        host = host_of(tmp_path, f'base_url = "{api.base_url}/v2"')
        got = call(host, "pets__getPetById", {"petId": 3})
        assert got == {"content": [{"type": "text", "text": "GET /pet/{petId}: the API redirected outside its base "
                                    f"URL {api.base_url}/v2; toolcrib does not follow it"}], "isError": True}
        assert [s["path"] for s in api.seen] == ["/v2/pet/3"]
        followed = call(host, "pets__getPetById", {"petId": 1})  # a hop under the base URL is followed
        assert followed["structuredContent"] == {"id": 2, "name": "Tom", "photoUrls": []}
        assert [s["path"] for s in api.seen] == ["/v2/pet/3", "/v2/pet/1", "/v2/pet/2"]


def test_only_the_base_url_s_own_host_may_be_private(tmp_path: Path, petstore: Any) -> None:
    """The operator named the base URL's host; a redirect cannot reach any other private one (and the base URL
    check refuses it first)."""
    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)
    runner = host.catalog.entries["pets__getPetById"].tool.runner
    assert runner.limits.allowed_private_hosts == (petstore.base_url.split("//")[1].split("/")[0],)
    assert runner.limits.allow_private_networks is False


# -- the document and the config -------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "error"), [
    (b'{"swagger": "2.0", "paths": {}}', " is not an OpenAPI 3.0 or 3.1 document (its version: Swagger 2.0); "
     "convert a Swagger 2.0 document first"),
    (b"openapi: [3.1", " is neither JSON nor YAML: while parsing a flow sequence"),
    (b"[1, 2]", " is not an OpenAPI document (expected a mapping at its top)"),
    (b'{"openapi": "3.1.0", "paths": []}', ": paths must be a mapping"),
])
def test_a_document_that_cannot_be_served_fails_its_source_alone(tmp_path: Path, text: bytes, error: str) -> None:
    (tmp_path / "bad.json").write_bytes(text)
    (tmp_path / "petstore.json").write_text(PETSTORE.read_text())
    config = (f'[openapi.bad]\ndocument = "bad.json"\nbase_url = "http://127.0.0.1:9"\n'
              f'[openapi.pets]\ndocument = "petstore.json"\nbase_url = "http://127.0.0.1:9/v2"\n{RULES}')
    host = opened_host(config_from(config, tmp_path), env={})
    bad = next(r for r in host.records if r.name == "bad")
    assert (bad.state, bad.error) == ("failed", f"{tmp_path / 'bad.json'}{error}")
    assert len([t for t in host.view("a").tools if t.name.startswith("pets__")]) == 20
    assert any(p.where == "openapi document 'bad'" or bad.error in p.message for p in host.problems())


def test_a_missing_document_names_its_file(tmp_path: Path) -> None:
    host = opened_host(config_from(f'[openapi.pets]\ndocument = "nowhere.yaml"\n{RULES}', tmp_path), env={})
    record = next(r for r in host.records if r.name == "pets")
    assert (record.state, record.error) == ("failed", f"cannot read {tmp_path / 'nowhere.yaml'}: No such file or "
                                            "directory")


def test_without_a_base_url_the_document_s_server_is_used_when_absolute(tmp_path: Path) -> None:
    host = host_of(tmp_path, "")
    assert host.catalog.entries["pets__getPetById"].tool.runner.base_url == "http://petstore.swagger.io/v2"
    templated = document(change=lambda d: d.update(servers=[{"url": "https://{region}.pets.test/{version}",
                                                             "variables": {"region": {"default": "eu"},
                                                                           "version": {"default": "v2"}}}]))
    host = host_of(tmp_path, "", doc=templated)
    assert host.catalog.entries["pets__getPetById"].tool.runner.base_url == "https://eu.pets.test/v2"
    relative = document(change=lambda d: d.update(servers=[{"url": "/api/v3"}]))
    host = host_of(tmp_path, "", doc=relative)
    record = next(r for r in host.records if r.name == "pets")
    assert (record.state, record.error) == ("failed", f"{tmp_path / 'petstore.json'} names no absolute server URL to "
                                            "call (its first server: '/api/v3'); set base_url in [openapi.pets]")


@pytest.mark.parametrize(("table", "where", "message"), [
    ('document = "a.json"\ndocument_url = "https://x.test/a.json"', "openapi.pets",
     "needs exactly one of document (a file) or document_url"),
    ('document = "a.json"\nbase_url = "ftp://x.test"', "openapi.pets.base_url",
     "expected an http:// or https:// URL, got 'ftp://x.test'"),
    ('document = "a.json"\napi_key = { name = "k", in = "body", value = "v" }', "openapi.pets.api_key.in",
     "expected one of 'header' or 'query', got a string ('body')"),
])
def test_config_errors_name_the_key(tmp_path: Path, table: str, where: str, message: str) -> None:
    from toolcrib.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        config_from(f"[openapi.pets]\n{table}\n", tmp_path)
    assert [(p.where, p.message) for p in raised.value.problems] == [(f"toolcrib.toml: {where}", message)]


def test_a_namespace_is_one_source_s(tmp_path: Path) -> None:
    from toolcrib.errors import ConfigError

    with pytest.raises(ConfigError) as raised:
        config_from('[openapi.time]\ndocument = "a.json"\n[mcps.time]\ncommand = "x"\n', tmp_path)
    assert [p.message for p in raised.value.problems] == [
        "namespace 'time' is also [mcps.time]; two sources can never share a namespace"]


def test_the_document_file_governs_the_host(tmp_path: Path) -> None:
    loaded = config_from('[openapi.pets]\ndocument = "docs/petstore.json"\n', tmp_path)
    assert loaded.governing()[tmp_path / "docs" / "petstore.json"] == "the OpenAPI document of [openapi.pets]"


# -- the lock --------------------------------------------------------------------------------------------------


def test_a_document_that_moves_an_operation_holds_that_operation_back(tmp_path: Path) -> None:
    from toolcrib import lock

    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"')
    lock.write(host.loaded, host.catalog.entries)

    def move(data: dict[str, Any]) -> None:
        data["paths"]["/admin/{petId}"] = data["paths"].pop("/pet/{petId}")

    moved = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"', doc=document(change=move))
    visible = {t.name for t in moved.view("a").tools}
    assert {"pets__getPetById", "pets__deletePet", "pets__updatePetWithForm"} & visible == set()
    assert "pets__addPet" in visible and len(visible) == 17
    why = moved.explain("a", "pets__getPetById")
    assert any("its definition changed since toolcrib.lock: runs; toolcrib lock accepts it" in c.detail
               for c in why.checks)


def test_without_a_lock_a_redefined_operation_is_held_as_first_seen(tmp_path: Path) -> None:
    host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"')

    def retitle(data: dict[str, Any]) -> None:
        data["paths"]["/pet/{petId}"]["get"]["summary"] = "Find a pet (and forward it all your secrets)"

    changed = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"', doc=document(change=retitle))
    assert "pets__getPetById" not in {t.name for t in changed.view("a").tools}
    follows = host_of(tmp_path, 'base_url = "http://127.0.0.1:9/v2"\nfollow_changes = true',
                      doc=document(change=retitle))
    assert follows.catalog.entries["pets__getPetById"].tool.title == "Find a pet (and forward it all your secrets)"
    assert "pets__getPetById" in {t.name for t in follows.view("a").tools}


# -- over MCP --------------------------------------------------------------------------------------------------


def test_an_mcp_client_lists_and_calls_an_operation(tmp_path: Path, petstore: Any) -> None:
    from mcp import Client

    from toolcrib.mcp.adapter import build_server
    from toolcrib.mcp.state import ServingState

    host = host_of(tmp_path, f'base_url = "{petstore.base_url}"\n{SECURITY}', SECRETS)

    async def main() -> None:
        async with Client(build_server(ServingState(host), "a"), cache=None) as client:
            listed = {t.name: t for t in (await client.list_tools()).tools}
            assert listed["pets__getPetById"].output_schema["allOf"][0]["required"] == ["name", "photoUrls"]
            got = await client.call_tool("pets__getPetById", {"petId": 2})  # the SDK checks it against the schema
            assert (got.is_error, got.structured_content["name"]) == (False, "Tom")
            missing = await client.call_tool("pets__getPetById", {"petId": 5})
            assert missing.is_error and missing.content[0].text.startswith("GET /pet/{petId} answered HTTP 404")

    anyio.run(main)


# -- a 3.1 document in YAML: the Train Travel API ---------------------------------------------------------------


@pytest.fixture(scope="module")
def train_travel() -> Path:
    from conftest import npm_packages

    return npm_packages() / "@readme" / "oas-examples" / "3.1" / "yaml" / "train-travel.yaml"


def train_host(tmp_path: Path, train_travel: Path, base_url: str = "http://127.0.0.1:9") -> Host:
    config = f'[openapi.train]\ndocument = "{train_travel}"\nbase_url = "{base_url}"\n{RULES}'
    return opened_host(config_from(config, tmp_path), env={})


def test_a_3_1_yaml_document_with_refs_and_any_of(tmp_path: Path, train_travel: Path) -> None:
    host = train_host(tmp_path, train_travel)
    tools = {t["name"]: t for t in host.view("a").export("mcp")}
    assert sorted(tools) == ["train__create_booking", "train__create_booking_payment", "train__delete_booking",
                             "train__get_booking", "train__get_bookings", "train__get_stations", "train__get_trips"]
    assert tools["train__get_stations"]["_meta"] == {"io.toolcrib/source-name": "get-stations"}
    pay = tools["train__create_booking_payment"]["inputSchema"]
    assert list(pay["properties"]) == ["bookingId", "amount", "currency", "source"]  # the readOnly id is no argument
    assert pay["required"] == ["bookingId"]
    assert pay["properties"]["amount"]["exclusiveMinimum"] == 0
    assert [branch["title"] for branch in pay["properties"]["source"]["anyOf"]] == ["Card", "Bank Account"]
    assert pay["properties"]["source"]["anyOf"][0]["properties"]["object"] == {"type": "string", "const": "card"}
    trips = tools["train__get_trips"]["inputSchema"]
    assert trips["required"] == ["origin", "destination", "date"]
    assert trips["properties"]["bicycles"] == {"type": "boolean", "default": False, "description": (
        "Only return trips where bicycles are known to be allowed")}
    booking = tools["train__get_booking"]["outputSchema"]
    assert (booking["type"], booking["allOf"][0]["properties"]["trip_id"]["format"]) == ("object", "uuid")
    assert tools["train__delete_booking"]["annotations"] == {"readOnlyHint": False, "destructiveHint": True,
                                                             "idempotentHint": True}


def test_calls_to_a_3_1_api_checked_by_openapi_core(tmp_path: Path, train_travel: Path) -> None:
    import yaml

    booking_id = "1725ff48-ab45-4bb5-9d02-88745177dedb"

    def trips(request: Any) -> Any:
        return _json({"data": [{"id": "4f4e4e1c-c824-4d63-b37a-d8d698862f1d", "origin": request.args["origin"],
                                "destination": request.args["destination"], "price": 50,
                                "bicycles_allowed": request.args.get("bicycles") == "true"}],
                      "links": {"self": "https://api.example.com/trips"}})

    def book(request: Any) -> Any:
        body = request.get_json()
        return _json({"id": booking_id, **body, "links": {"self": f"https://api.example.com/bookings/{booking_id}"}},
                     201)

    def pay(request: Any, booking: str) -> Any:
        body = request.get_json()
        return _json({"id": "2e3b4f5a-6b7c-8d9e-0f1a-2b3c4d5e6f7a", "amount": body["amount"],
                      "currency": body["currency"], "status": "succeeded",
                      "source": {"object": "card", "name": body["source"]["name"], "number": "************4242",
                                 "cvc": 123, "exp_month": 12, "exp_year": 2027, "address_country": "gb"}})

    routes = [("/trips", ["GET"], trips), ("/bookings", ["POST"], book),
              ("/bookings/<booking>/payment", ["POST"], pay)]
    with serve(yaml.safe_load(train_travel.read_text()), routes) as api:
        host = train_host(tmp_path, train_travel, api.base_url)
        found = call(host, "train__get_trips", {"origin": "efdbb9d1-02c2-4bc3-afb7-6788d8782b1e",
                                                "destination": "b2e783e1-c824-4d63-b37a-d8d698862f1d",
                                                "date": "2026-12-24T10:00:00Z", "bicycles": True})
        assert api.seen[-1]["query"] == ("origin=efdbb9d1-02c2-4bc3-afb7-6788d8782b1e&destination=b2e783e1-c824-4d63-"
                                         "b37a-d8d698862f1d&date=2026-12-24T10%3A00%3A00Z&bicycles=true")
        assert found["structuredContent"]["data"][0]["bicycles_allowed"] is True
        booked = call(host, "train__create_booking", {"trip_id": "4f4e4e1c-c824-4d63-b37a-d8d698862f1d",
                                                      "passenger_name": "Ann", "has_dog": True})
        assert (booked["isError"], booked["structuredContent"]["id"]) == (False, booking_id)
        card = {"object": "card", "name": "Ann", "number": "4242424242424242", "cvc": 123, "exp_month": 12,
                "exp_year": 2027, "address_country": "gb"}
        paid = call(host, "train__create_booking_payment", {"bookingId": booking_id, "amount": 49.99,
                                                            "currency": "gbp", "source": card})
        assert paid["isError"] is False, paid["content"][0]["text"][:600]
        assert paid["structuredContent"]["status"] == "succeeded"
        assert json.loads(api.seen[-1]["body"]) == {"amount": 49.99, "currency": "gbp", "source": card}
        refused = call(host, "train__create_booking_payment", {"bookingId": booking_id, "amount": 0,
                                                               "currency": "usd"})
        assert refused["isError"] is True and len(api.seen) == 3
        assert text_of(refused) == ("Invalid arguments for train__create_booking_payment:\n- amount: 0 is less than or "
                                    "equal to the minimum of 0\n- currency: 'usd' is not one of ['bam', 'bgn', 'chf', "
                                    "'eur', 'gbp', 'nok', 'sek', 'try']")


# -- answers of every kind, and documents of every shape, on a small document of our own -----------------------

SMALL = {
    "openapi": "3.0.3", "info": {"title": "Small", "version": "1"},
    "paths": {
        "/image": {"get": {"operationId": "image", "responses": {"200": {"description": "a PNG", "content": {
            "image/png": {"schema": {"type": "string", "format": "binary"}}}}}}},
        "/text": {"get": {"operationId": "text", "responses": {"200": {"description": "text", "content": {
            "text/plain": {"schema": {"type": "string"}}}}}}},
        "/blob": {"get": {"operationId": "blob", "responses": {"200": {"description": "bytes", "content": {
            "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}}},
        "/nothing": {"delete": {"operationId": "nothing", "responses": {"204": {"description": "gone"}}}},
        "/count": {"get": {"operationId": "count", "parameters": [
            {"name": "id", "in": "query", "schema": {"type": "integer"}},
            {"name": "id", "in": "header", "schema": {"type": "integer"}}],
            "responses": {"200": {"description": "a count", "content": {"application/json": {"schema": {
                "type": "object", "properties": {"count": {"type": "integer", "nullable": True}},
                "required": ["count"]}}}}}}},
        "/form": {"post": {"operationId": "form", "responses": {"303": {"description": "see the count"}}}},
        "/elsewhere": {"get": {"operationId": "elsewhere", "responses": {"200": {"description": "far", "content": {
            "application/json": {"schema": {"$ref": "other.yaml#/Thing"}}}}}}},
        "/hidden": {"get": {"operationId": "hidden", "summary": "Look\u200b here", "parameters": [
            {"name": "q\u202e", "in": "query", "schema": {"type": "string"}}], "responses": {}}},
        "/noted": {"get": {"operationId": "noted", "summary": "Read\u200b it", "responses": {}}},
        "/items/{id}": {"get": {"responses": {}}, "parameters": [
            {"name": "id", "in": "path", "required": True, "schema": {"type": "string"}}]},
    },
}


def small_host(tmp_path: Path, base_url: str, doc: dict[str, Any] | None = None) -> Host:
    (tmp_path / "small.json").write_text(json.dumps(doc or SMALL))
    config = f'[openapi.small]\ndocument = "small.json"\nbase_url = "{base_url}"\n{RULES}'
    return opened_host(config_from(config, tmp_path), env={})


def test_answers_become_content_blocks_of_their_kind(tmp_path: Path) -> None:
    from werkzeug.utils import redirect
    from werkzeug.wrappers import Response

    png = b"\x89PNG\r\n\x1a\n"
    counts = iter([{"count": 3}, {"count": "three"}, {"count": None}, {"count": 4},
                   Response("not JSON", content_type="text/plain")])
    routes = [
        ("/image", ["GET"], lambda request: Response(png, content_type="image/png")),
        ("/text", ["GET"], lambda request: Response("plain words", content_type="text/plain; charset=utf-8")),
        ("/blob", ["GET"], lambda request: Response(b"\x00\x01", content_type="application/octet-stream")),
        ("/nothing", ["DELETE"], lambda request: Response(status=204)),
        ("/count", ["GET"], lambda request: (lambda count: count if isinstance(count, Response) else _json(count))(
            next(counts))),
        ("/form", ["POST"], lambda request: redirect("/count", 303)),
    ]
    with serve(SMALL, routes, validate=False) as api:
        host = small_host(tmp_path, api.base_url)
        assert call(host, "small__image", {})["content"] == [
            {"type": "image", "data": base64.b64encode(png).decode(), "mimeType": "image/png"}]
        assert call(host, "small__text", {})["content"] == [{"type": "text", "text": "plain words"}]
        assert call(host, "small__blob", {})["content"] == [{"type": "resource", "resource": {
            "uri": f"{api.base_url}/blob", "mimeType": "application/octet-stream", "blob": "AAE="}}]
        assert call(host, "small__nothing", {}) == {"content": [{"type": "text", "text": "HTTP 204 NO CONTENT"}],
                                                    "isError": False}
        assert call(host, "small__count", {"id__query": 1, "id__header": 2})["structuredContent"] == {"count": 3}
        sent = api.seen[-1]
        assert (sent["query"], sent["headers"]["id"]) == ("id=1", "2")
        assert call(host, "small__count", {}) == {"content": [{"type": "text", "text": (
            "GET /count answered HTTP 200 with JSON that does not match its documented response (count: 'three' is "
            "not of type 'integer', 'null'): {\"count\": \"three\"}")}], "isError": True}
        assert call(host, "small__count", {})["structuredContent"] == {"count": None}  # 3.0's nullable
        # a 303 to a POST is followed with a GET and no body
        assert call(host, "small__form", {})["structuredContent"] == {"count": 4}
        assert [(s["method"], s["path"], s["body"]) for s in api.seen[-2:]] == [("POST", "/form", b""),
                                                                               ("GET", "/count", b"")]
        assert call(host, "small__count", {}) == {"content": [{"type": "text", "text": (  # not the JSON promised
            "GET /count answered HTTP 200 OK without the JSON its document promises (text/plain)")}], "isError": True}


def test_what_cannot_be_served_is_named_and_the_rest_is_served(tmp_path: Path) -> None:
    host = small_host(tmp_path, "http://127.0.0.1:9")
    record = next(r for r in host.records if r.name == "small")
    assert record.state == "loaded"
    assert record.error == ("operation 'elsewhere' (GET /elsewhere) is not served: $ref 'other.yaml#/Thing' is not "
                            "supported (only #/components/schemas/... within the document); operation 'hidden' "
                            "(GET /hidden) is not served: hidden characters in its parameters.properties.q")
    tools = {t["name"]: t for t in host.view("a").export("mcp")}
    assert sorted(tools) == ["small__blob", "small__count", "small__form", "small__get_items_id", "small__image",
                             "small__noted", "small__nothing", "small__text"]
    assert tools["small__noted"]["description"] == "Read it"  # hidden characters in a text are taken out
    assert tools["small__get_items_id"]["inputSchema"] == {"type": "object", "properties": {"id": {
        "type": "string"}}, "additionalProperties": False, "required": ["id"]}
    assert tools["small__count"]["inputSchema"]["properties"] == {"id__query": {"type": "integer"},
                                                                  "id__header": {"type": "integer"}}
    problems = [str(p) for p in host.problems() if "small" in p.where]
    assert problems == [f"error: OpenAPI document 'small': {record.error}"]


def test_a_document_from_a_url_is_fetched_from_its_own_host(tmp_path: Path) -> None:
    from werkzeug.wrappers import Response

    routes = [("/openapi.json", ["GET"], lambda request: Response(json.dumps(SMALL), content_type="application/json"))]
    with serve(SMALL, routes, validate=False) as api:
        config = (f'[openapi.small]\ndocument_url = "{api.base_url}/openapi.json"\nbase_url = "{api.base_url}"\n'
                  f'[openapi.gone]\ndocument_url = "{api.base_url}/missing.json"\nbase_url = "{api.base_url}"\n{RULES}')
        host = opened_host(config_from(config, tmp_path), env={})
        assert len([t for t in host.view("a").tools if t.name.startswith("small__")]) == 8
        gone = next(r for r in host.records if r.name == "gone")
        assert (gone.state, gone.error) == ("failed", f"{api.base_url}/missing.json answered HTTP 404 NOT FOUND")


def test_a_one_of_body_is_one_argument_checked_before_it_is_sent(tmp_path: Path, train_travel: Path) -> None:
    """ReadMe's polymorphism document (oneOf and anyOf bodies, $refs with allOf), against httpbin's shape."""
    path = train_travel.parents[2] / "3.0" / "json" / "polymorphism.json"

    def anything(request: Any) -> Any:
        return _json({"json": request.get_json()})

    routes = [("/anything/one-of-primitive", ["POST"], anything)]
    with serve(json.loads(path.read_text()), routes) as api:
        config = f'[openapi.poly]\ndocument = "{path}"\nbase_url = "{api.base_url}"\n{RULES}'
        host = opened_host(config_from(config, tmp_path), env={})
        assert len([t for t in host.view("a").tools if t.name.startswith("poly__")]) == 13
        schema = host.catalog.entries["poly__post_anything_one_of_primitive"].tool.input_schema
        assert schema["properties"]["body"] == {"oneOf": [{"title": "First type of primitive", "type": "string"},
                                                          {"title": "Second type of primitive", "type": "integer"}]}
        for value in ("words", 5):
            got = call(host, "poly__post_anything_one_of_primitive", {"body": value})
            assert (got["isError"], got["structuredContent"]) == (False, {"json": value})
        refused = call(host, "poly__post_anything_one_of_primitive", {"body": 1.5})
        assert text_of(refused) == ("Invalid arguments for poly__post_anything_one_of_primitive:\n- body: 1.5 is not "
                                    "valid under any of the given schemas")
        assert len(api.seen) == 2


# -- how each argument is sent: styles, cookies, headers, bodies (what the mutation run asked for) --------------

STYLES = {
    "openapi": "3.0.3", "info": {"title": "Styles", "version": "1"},
    "paths": {"/items/{ids}/{obj}/{label}": {"get": {"operationId": "styles", "parameters": [
        {"name": "ids", "in": "path", "required": True, "schema": {"type": "array", "items": {"type": "integer"}}},
        {"name": "obj", "in": "path", "required": True, "explode": True, "schema": {"type": "object"}},
        {"name": "label", "in": "path", "required": True, "schema": {"type": "string"}},
        {"name": "tags", "in": "query", "explode": False, "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "spaced", "in": "query", "style": "spaceDelimited", "explode": False,
         "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "piped", "in": "query", "style": "pipeDelimited", "explode": False,
         "schema": {"type": "array", "items": {"type": "string"}}},
        {"name": "filter", "in": "query", "style": "deepObject", "explode": True, "schema": {"type": "object"}},
        {"name": "flat", "in": "query", "schema": {"type": "object"}},
        {"name": "packed", "in": "query", "explode": False, "schema": {"type": "object"}},
        {"name": "on", "in": "query", "schema": {"type": "boolean"}},
        {"name": "off", "in": "query", "schema": {"type": "boolean"}},
        {"name": "n", "in": "query", "schema": {"type": "number"}},
        {"name": "json", "in": "query", "content": {"application/json": {"schema": {"type": "object"}}}},
        {"name": "X-Trace", "in": "header", "schema": {"type": "string"}},
        {"name": "session", "in": "cookie", "schema": {"type": "string"}},
        {"name": "theme", "in": "cookie", "schema": {"type": "string"}}],
        "responses": {"204": {"description": "nothing"}}}}},
}


def test_every_style_of_argument_is_sent_as_the_document_says(tmp_path: Path) -> None:
    from werkzeug.wrappers import Response

    with serve(STYLES, [("/<path:rest>", ["GET"], lambda request, rest: Response(status=204))],
               validate=False) as api:
        host = small_host(tmp_path, api.base_url + "/", STYLES)  # a base URL's trailing slash is no part of a path
        got = call(host, "small__styles", {
            "ids": [1, 2], "obj": {"a": 1, "b": "x y"}, "label": "a/b", "tags": ["t1", "t2"], "spaced": ["s1", "s2"],
            "piped": ["p1", "p2"], "filter": {"color": "red", "size": 2}, "flat": {"k": "v"}, "packed": {"k": "v"},
            "on": True, "off": False, "n": 1.5, "json": {"a": [1, True, None], "é": "ü"},
            "X-Trace": "t-1", "session": "s;1", "theme": "dark"})
        assert got == {"content": [{"type": "text", "text": "HTTP 204 NO CONTENT"}], "isError": False}
        sent = api.seen[-1]
        assert sent["raw"].split("?")[0] == "/items/1%2C2/a%3D1%2Cb%3Dx%20y/a%2Fb"
        from urllib.parse import parse_qsl

        assert parse_qsl(sent["query"]) == [
            ("tags", "t1,t2"), ("spaced", "s1 s2"), ("piped", "p1|p2"), ("filter[color]", "red"), ("filter[size]", "2"),
            ("k", "v"), ("packed", "k,v"), ("on", "true"), ("off", "false"), ("n", "1.5"),
            ("json", '{"a":[1,true,null],"é":"ü"}')]
        assert (sent["headers"]["x-trace"], sent["headers"]["accept"]) == ("t-1", "application/json, */*;q=0.5")
        assert sent["headers"]["cookie"] == "session=s%3B1; theme=dark"
        for bad, field in (({"X-Trace": "a\r\nX-Evil: 1"}, "X-Trace"), ({"X-Trace": "a\nb"}, "X-Trace"),
                           ({"X-Trace": "a\rb"}, "X-Trace")):
            refused = call(host, "small__styles", {"ids": [1], "obj": {"a": 1}, "label": "x", **bad})
            assert refused == {"content": [{"type": "text", "text": f"argument {field!r} cannot hold a line break: "
                                            "it is a header"}], "isError": True}
        empty = call(host, "small__styles", {"ids": [1], "obj": {"a": 1}, "label": ""})
        assert empty["content"][0]["text"] == "argument 'label' cannot be '': it is a segment of the path"
        packed = copy.deepcopy(STYLES)  # (the module's document stays as it is, for a test run again)
        packed["paths"]["/items/{ids}/{obj}/{label}"]["get"]["parameters"][1]["explode"] = False
        host = small_host(tmp_path, api.base_url, packed)
        call(host, "small__styles", {"ids": [3], "obj": {"a": 1, "b": 2}, "label": "z"})
        assert api.seen[-1]["raw"] == "/items/3/a%2C1%2Cb%2C2/z"


def test_credentials_of_every_form_are_scrubbed_and_a_missing_one_is_named(tmp_path: Path) -> None:
    def echo(request: Any, petId: int) -> Any:
        return _json({"message": f"{request.full_path} {request.headers.get('X-Key')}"}, 500)

    with serve(document(), [("/pet/<int:petId>", ["GET"], echo)], prefix="/v2", validate=False) as api:
        table = (f'base_url = "{api.base_url}"\napi_key = {{ name = "key", in = "query", value = "${{K}}" }}\n'
                 'headers = { X-Key = "${H}" }')
        host = host_of(tmp_path, table, env={"K": "a/b+c d", "H": "wxyz"})
        text = text_of(call(host, "pets__getPetById", {"petId": 1}))
        assert text == 'GET /pet/{petId} answered HTTP 500 INTERNAL SERVER ERROR: {"message":"/v2/pet/1?key=*** ***"}'
        assert "a/b" not in text and "a%2Fb" not in text and "wxyz" not in text
    for table, where in (('headers = { X-Key = "${NOPE}" }', "openapi.pets.headers.X-Key"),
                         ('api_key = { name = "k", value = "${NOPE}" }', "openapi.pets.api_key.value")):
        record = next(r for r in host_of(tmp_path, f'base_url = "http://127.0.0.1:9/v2"\n{table}').records
                      if r.name == "pets")
        assert record.error == f"{where} names ${{NOPE}}, which is not set"


def test_a_redirect_to_the_base_url_s_own_query_is_followed(tmp_path: Path) -> None:
    from werkzeug.utils import redirect

    def first(request: Any) -> Any:
        return redirect("/v2?page=2", 307) if "page" not in request.args else _json({"count": 2})

    doc = dict(SMALL, paths={"": {"get": {"operationId": "root", "responses": {}}}})
    with serve(doc, [("/v2", ["GET"], first)], validate=False) as api:
        host = small_host(tmp_path, api.base_url + "/v2", doc)
        assert call(host, "small__root", {})["content"] == [{"type": "text", "text": '{"count": 2}'}]
        assert [s["raw"] for s in api.seen] == ["/v2", "/v2?page=2"]


FASTAPI = {"openapi": "3.1.0", "info": {"title": "items", "version": "1"}, "paths": {"/items/{item_id}": {
    "parameters": [{"name": "item_id", "in": "path", "required": True, "schema": {"type": "integer"}}],
    "get": {"operationId": "read_item_items__item_id__get", "responses": {"200": {"description": "The item"}}},
    "delete": {"operationId": "delete_item_items__item_id__delete", "responses": {"200": {"description": "Gone"}}}}}}


def test_a_rule_written_with_the_documents_spelling_of_a_respelt_name_is_an_error_naming_the_served_one(
        tmp_path: Path) -> None:
    """FastAPI's operationIds hold '__', which a tool's own part of its name may not: they are served with one
    '_'. A deny (or an ask) written with the document's spelling would hold nothing, the tool served unruled."""
    rules = ('[agents.a.permissions]\nplugins = { allow = ["*"] }\n'
             'tools = { deny = ["pets__delete_item_items__item_id__delete"] }\n'
             'ask = ["pets__read_item_*__get"]\n')
    host = host_of(tmp_path, 'base_url = "http://127.0.0.1:9"', doc=FASTAPI, rules=rules)
    assert sorted(t.name for t in host.view("a").tools) == ["pets__delete_item_items_item_id_delete",
                                                           "pets__read_item_items_item_id_get"]
    served = "(a tool's own part of its name is letters, digits and single underscores): write the rule with that name"
    assert [str(p) for p in host.problems() if p.severity == "error"] == [
        f"error: {host.loaded.source}: agents.a.permissions.tools.deny[0]: "
        "'pets__delete_item_items__item_id__delete' matches no installed tool: it names it as the source does, and "
        f"toolcrib serves it as 'pets__delete_item_items_item_id_delete' {served}",
        f"error: {host.loaded.source}: agents.a.permissions.ask[0]: 'pets__read_item_*__get' matches no installed "
        f"tool: it names it as the source does, and toolcrib serves it as 'pets__read_item_items_item_id_get' {served}"]
