"""The operator's console (``[operator] console = true``): its pages, who opens them, and approvals answered in
them; in process through httpx, and in a real browser (Debian's chromium, driven by Selenium)."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import time
from html import unescape
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest

from approving import (
    AGENT_TOKEN,
    CONFIG,
    CONSOLE,
    ENV,
    OPERATOR_TOKEN,
    PACK,
    app_of,
    client_of,
    open_session,
    signed_in,
)
from conftest import config_from, until
from toolcrib import Host


def text_of(html: str, element: str) -> list[str]:
    """The text of each ``element`` (tags removed, spaces collapsed)."""
    return [" ".join(unescape(re.sub(r"<[^>]+>", " ", m)).split())
            for m in re.findall(rf"<{element}(?:\s[^>]*)?>(.*?)</{element}>", html, re.S)]




def test_only_the_operator_token_opens_the_console_and_every_form_needs_its_csrf_token(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            seen["anonymous"] = ((a := await http.get("/console/")).status_code, a.headers["location"])
            agent = await http.post("/console/login", data={"token": AGENT_TOKEN})
            seen["agent token"] = (agent.status_code, text_of(agent.text, "p")[0], "set-cookie" in agent.headers)
            seen["bearer"] = (await http.get("/console/", headers={"Authorization": f"Bearer {OPERATOR_TOKEN}"})
                              ).status_code  # the console takes its own sign-in, not a bearer header
            csrf = await signed_in(http)
            index = await http.get("/console/")
            seen["index"] = (index.status_code, text_of(index.text, "tr"), index.headers["content-security-policy"])
            no_csrf = await http.post("/console/logout", data={})
            seen["no csrf"] = no_csrf.status_code
            seen["no csrf page"] = (text_of(no_csrf.text, "h1"), text_of(no_csrf.text, "p"))
            seen["login elsewhere"] = (await http.post("/console/login", data={"token": OPERATOR_TOKEN},
                                                       headers={"Origin": "https://evil.example"})).status_code
            seen["foreign origin"] = (await http.post("/console/logout", data={"csrf": csrf},
                                                      headers={"Origin": "https://evil.example"})).status_code
            seen["content type"] = index.headers["content-type"]
            real = http.cookies["toolcrib_console"]
            expires, who, sid, signature = real.split(".")
            forged = [f"9999999999.{who}.{sid}.{signature}",  # a later expiry under the real signature
                      f"{expires}.{base64.urlsafe_b64encode(b'someone').decode().rstrip('=')}.{sid}.{signature}",
                      f"{expires}.{who}.{'A' * 24}.{signature}",  # another session under it
                      f"{expires}.{who}.{sid}.{'0' * 64}", "9999999999." + "0" * 64, "",
                      "9" * 5000 + f".{who}.{sid}.{signature}"]  # (int() of 5000 digits would raise)
            seen["forged cookie"] = []
            for cookie in forged:
                async with client_of(app) as stranger:
                    stranger.cookies.set("toolcrib_console", cookie, path="/console")
                    seen["forged cookie"].append((await stranger.get("/console/")).status_code)
            console = app.console
            seen["csrf per session"] = console.csrf(console._session(1, "x", "s" * 24)) != console.csrf(
                console._session(1, "x", "t" * 24))
            async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app),
                                          base_url="https://127.0.0.1:8000") as tls:
                seen["over https"] = await signed_in(tls) != ""  # its cookie is Secure (checked in signed_in)
            seen["large form"] = (await http.post("/console/logout", data={"csrf": csrf, "pad": "x" * 5000})
                                  ).status_code  # a form anyone may post is small, or refused unread
            seen["multipart"] = (await http.post("/console/login", files={"token": ("t", OPERATOR_TOKEN)})
                                 ).status_code
            out = await http.post("/console/logout", data={"csrf": csrf})
            seen["logout"] = out.status_code
            seen["logout headers"] = (out.headers["location"], out.headers["set-cookie"])
            seen["after"] = (await http.get("/console/")).status_code
            async with client_of(app) as copy:  # the signed-out cookie, kept by someone: it opens nothing
                copy.cookies.set("toolcrib_console", real, path="/console")
                seen["copy after sign-out"] = (await copy.get("/console/")).status_code
                seen["feed after sign-out"] = (await copy.get("/console/feed/events")).status_code
        return seen

    seen = anyio.run(main)
    assert seen["anonymous"] == (303, "/console/login")
    assert seen["agent token"] == (401, "That is not the operator token; an agent's token never opens the console.",
                                   False)
    assert seen["bearer"] == 303
    status, rows, policy = seen["index"]
    assert status == 200 and rows == ["agent mode approvals tools it sees tool search limits",
                                      "a default operator 2 - -", "b plan client 1 - -"]
    assert policy.startswith("default-src 'none'; script-src 'self'")
    assert seen["no csrf page"] == (["Refused"], ["This form is not the console's (its CSRF token differs): open "
                                                  "the page again and resubmit."])
    assert seen["login elsewhere"] == 403  # Origin checked on the sign-in too
    assert seen["no csrf"] == 403 and seen["foreign origin"] == 403 and seen["forged cookie"] == [303] * 7
    assert seen["copy after sign-out"] == 303 and seen["feed after sign-out"] == 303  # ended on the server
    assert seen["csrf per session"] and seen["content type"] == "text/html; charset=utf-8" and seen["over https"]
    assert seen["large form"] == 403 and seen["multipart"] == 401
    assert seen["logout"] == 303 and seen["after"] == 303
    location, cleared = seen["logout headers"]
    assert location == "/console/login" and cleared.startswith('toolcrib_console=""; ') and "Max-Age=0" in cleared \
        and "Path=/console" in cleared


def test_the_pages_that_check_and_explain_do_it_away_from_the_event_loop(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The config check (the first page) builds every tool's models and schemas (about 1 ms a tool) and every
    agent's view; an agent's page and the matrix explain each hidden tool: made in a worker thread, while the
    agents' clients go on being served."""
    import threading

    seen: dict[str, set[int]] = {"problems": set(), "explain": set()}
    for method in seen:
        given = getattr(Host, method)

        def noting(self: Host, *args: Any, _given: Any = given, _method: str = method, **kwargs: Any) -> Any:
            seen[_method].add(threading.get_ident())
            return _given(self, *args, **kwargs)

        monkeypatch.setattr(Host, method, noting)

    async def main() -> tuple[list[int], int]:
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            await signed_in(http)
            statuses = [(await http.get(f"/console{page}")).status_code for page in ("/", "/agents/b", "/matrix")]
        return statuses, threading.get_ident()

    statuses, loop_thread = anyio.run(main)
    assert statuses == [200, 200, 200]
    assert seen["problems"] and seen["explain"]  # (the serving state's start checks too, in its own thread)
    assert loop_thread not in seen["problems"] | seen["explain"]


def test_an_agent_page_names_the_prompts_and_resources_it_may_use(tmp_path: Path) -> None:
    """An agent's page lists its prompts by name (a page for an agent with prompts once failed: it read each prompt
    as a pair)."""
    import toolcrib
    from packs import Pack

    @toolcrib.prompt
    def review(code: str) -> str:
        """Ask for a review of some code."""
        return f"Review this: {code}"

    @toolcrib.resource("notes://today")
    def today() -> str:
        """Today's notes."""
        return "nothing yet"

    class Prompting(Pack):
        @toolcrib.hookimpl
        def toolcrib_prompts(self) -> list[Any]:
            return [review]

        @toolcrib.hookimpl
        def toolcrib_resources(self) -> list[Any]:
            return [today]

    from toolcrib.mcp.http import HttpApp, HttpOptions
    from toolcrib.mcp.state import ServingState

    # agent b (its permissions are CONSOLE's last table) may use the pack p's prompts and resources too
    text = CONSOLE.replace('plugins = { allow = ["t"] }', 'plugins = { allow = ["t", "p"] }') + \
        'prompts = { allow = ["*"] }\nresources = { allow = ["*"] }\n'
    state = ServingState(Host(config_from(text, tmp_path), plugins={"t": PACK, "p": Prompting()}, autoload=False,
                              env={}))
    app = HttpApp(state, HttpOptions(), env={**ENV, "TOK_B": "b" * 32})

    async def main() -> tuple[int, str]:
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            await signed_in(http)
            page = await http.get("/console/agents/b")
        return page.status_code, page.text

    status, page = anyio.run(main)
    assert status == 200
    assert text_of(page, "p")[1].startswith("Resources: p__today. Prompts: p__review.")


def test_the_pages_show_who_sees_what_and_why_and_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch
                                                               ) -> None:
    for name in ("TOK_A", "TOK_B"):  # the config check on the first page reads the process's environment
        monkeypatch.delenv(name, raising=False)
    statuses: dict[str, int] = {}

    async def main() -> dict[str, Any]:
        text = CONSOLE.replace('[agents.b.permissions]\n', '[agents.b.permissions]\nsubagents = { allow = ["a"] }\n'
                               'skills = { allow = ["deploying"] }\n')
        (tmp_path / "deploying").mkdir()
        (tmp_path / "deploying" / "SKILL.md").write_text("---\nname: deploying\ndescription: How to deploy.\n---\n")
        app = app_of(tmp_path, '[skills.deploying]\npath = "deploying"\n' + text +
                     '[agents.b.limits]\nrate = "10/minute"\nin_flight = 2\n')
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            csrf = await signed_in(http)
            untouched = (await http.get("/console/agents/b")).text
            await app.state.host.call("b", "t__status", {})
            answers = {page: await http.get(f"/console{page}") for page in (
                "/", "/agents/a", "/agents/b", "/matrix", "/sources", "/agents/nobody", "/approvals", "/feed")}
            pages = {page: answer.text for page, answer in answers.items()}
            statuses.update({page: a.status_code for page, a in answers.items() if a.status_code != 200})
            forged = (await http.get("/console/approvals?done=Your%20session%20ended:%20sign%20in%20at%20evil")).text
            signed = app.console._signed_said("Denied: agent a's call of t__deploy (call_1).")
            done = (await http.get("/console/approvals", params={
                "done": "Denied: agent a's call of t__deploy (call_1).", "sig": signed})).text
            return {**pages, "untouched": untouched, "csrf": csrf, "done": done, "forged": forged}

    pages = anyio.run(main)
    csrf = pages.pop("csrf")
    for name, page in pages.items():  # each page has the navigation and a sign-out form with this session's token
        assert 'href="/console/approvals">Approvals</a>' in page, name
        assert f'<input type="hidden" name="csrf" value="{csrf}">' in page, name
    assert text_of(pages.pop("done"), "p")[0] == "Denied: agent a's call of t__deploy (call_1)."
    assert text_of(pages.pop("forged"), "p") == ["No call is waiting for an approval."]  # words unsigned: not shown
    assert text_of(pages["/"], "p")[0] == "Config toolcrib.toml ."  # no call waits for approval
    assert text_of(pages["/"], "h2") == ["The config check"]
    assert text_of(pages["/"], "li") == ["warning: toolcrib.toml: agents.a.token_env: $TOK_A is not set here",
                                         "warning: toolcrib.toml: agents.b.token_env: $TOK_B is not set here"]
    assert text_of(pages["/agents/a"], "p")[1] == ("Resources: none. Prompts: none. Skills it may load: none. Agents "
                                                   "it may hand a task to: none.")
    assert 'title="visible"' in pages["/matrix"]
    assert text_of(pages["/agents/b"], "h1") == ["Agent b"]
    assert text_of(pages["/agents/b"], "tr")[1:] == [
        "t__status t__status yes yes The service's status.",
        "toolcrib__load_skill toolcrib__load_skill yes yes Load a skill: expert instructions for a kind of task (its "
        "SKILL.md), or one of its other files. Load the skill before starting a task it covers.",
        "tool why",
        "t__deploy plan mode shows only tools annotated read-only (readOnlyHint), and this one is not",
        "toolcrib__run_agent plan mode shows only tools annotated read-only (readOnlyHint), and this one is not",
        "tools running rate: calls it would let through now", "* 0 of 2 9 of 10 (10/minute)"]
    assert text_of(pages["untouched"], "p")[-1] == "No call has met a limit since the server started."
    assert text_of(pages["/agents/b"], "p")[1] == ("Resources: none. Prompts: none. Skills it may load: "
                                                   "deploying. Agents it may hand a task to: a.")
    for page in pages.values():  # no page shows a token
        assert OPERATOR_TOKEN not in page and AGENT_TOKEN not in page and "b" * 32 not in page
    assert text_of(pages["/matrix"], "tr") == ["tool a b", "t__deploy ✓ ·", "t__status ✓ ✓",
                                               "toolcrib__load_skill · ✓", "toolcrib__run_agent · ·"]
    assert 'title="plan mode shows only tools annotated read-only (readOnlyHint), and this one is not"' in \
        pages["/matrix"]
    assert text_of(pages["/sources"], "tr") == [
        "name kind state from tools note", "toolcrib.audit builtin disabled toolcrib 0.1.0 0 off: the config sets no "
        "[host] audit_log (a file that records every call's decision)", "toolcrib.hooks builtin disabled toolcrib "
        "0.1.0 0 off: the config has no [hooks] (programs that decide or check calls: docs/hooks.md)",
        "toolcrib builtin loaded toolcrib 0.1.0 2",
        "t pack loaded 2"]
    assert text_of(pages["/agents/nobody"], "p") == ["No agent is named 'nobody' in this config."]
    assert text_of(pages["/agents/nobody"], "h1") == ["No such agent"]
    assert statuses == {"/agents/nobody": 404}


def test_a_call_waiting_for_approval_is_answered_in_the_console_and_shows_in_the_feed(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http, \
                anyio.create_task_group() as tg:
            csrf = await signed_in(http)
            call = await open_session(http)

            async def held() -> None:
                seen["result"] = await call("t__deploy", {"target": "<b>prod</b>"})

            tg.start_soon(held)

            async def listed() -> bool:
                return "approval-" in (await http.get("/console/approvals")).text

            await until(listed, "the console lists the call")
            seen["index"] = text_of((await http.get("/console/")).text, "p")[0]
            running = (await http.get("/console/feed")).text
            seen["running"] = text_of(running.split('id="running"')[1].split("</table>")[0], "tr")
            page = (await http.get("/console/approvals")).text
            seen["escaped"] = "&lt;b&gt;prod&lt;/b&gt;" in page and "<b>prod</b>" not in page
            seen["shown"] = text_of(page.split('class="approval"')[1].split("</table>")[0], "tr")
            seen["call"] = re.search(r"<th>call</th><td>(call_[0-9a-f]+)</td>", page).group(1)
            approval_id = re.search(r'id="approval-([\w-]+)"', page).group(1)
            digest = re.search(r'name="digest" value="([0-9a-f]+)"', page).group(1)
            forged = await http.post(f"/console/approvals/{approval_id}", data={
                "csrf": "0" * 64, "digest": digest, "decision": "approve"})
            seen["forged"] = forged.status_code
            maybe = await http.post(f"/console/approvals/{approval_id}", data={
                "csrf": csrf, "digest": digest, "decision": "maybe"})
            seen["maybe"] = (maybe.status_code, maybe.text)
            answered = await http.post(f"/console/approvals/{approval_id}", data={
                "csrf": csrf, "digest": digest, "decision": "approve"})
            seen["answered"] = (answered.status_code, answered.headers["location"])

            async def denied() -> None:
                seen["denied"] = await call("t__deploy", {"target": "mōon"})

            tg.start_soon(denied)
            await until(listed, "the console lists the second call")
            page = (await http.get("/console/approvals")).text
            second = re.search(r'id="approval-([\w-]+)"', page).group(1)
            digest = re.search(r'name="digest" value="([0-9a-f]+)"', page).group(1)
            seen["second arguments"] = re.search(r'<pre class="arguments">(.*?)</pre>', page, re.S).group(1)
            no_digest = await http.post(f"/console/approvals/{second}", data={"csrf": csrf, "decision": "approve"})
            seen["no digest"] = no_digest.headers["location"]
            refused = await http.post(f"/console/approvals/{second}", data={
                "csrf": csrf, "digest": digest, "decision": "deny"})
            seen["refused"] = refused.headers["location"]
        seen["feed"] = text_of((await _feed(app)), "tr")
        return seen

    async def _feed(app: Any) -> str:
        async with client_of(app) as http:
            await signed_in(http)
            return str((await http.get("/console/feed")).text)

    seen = anyio.run(main)
    assert [re.sub(r"^\d\d:\d\d:\d\d ", "<since> ", row) for row in seen["running"]] == [
        "since (UTC) agent tool state", "<since> a t__deploy waiting for approval"]  # running, and marked
    assert seen["escaped"] and seen["forged"] == 403
    assert seen["index"] == "Config toolcrib.toml . 1 call waiting for approval"
    shown = seen["shown"]
    assert shown[:5] == ["agent a", "who token $TOK_A", "tool t__deploy",
                         'arguments { "target": "<b>prod</b>" }', "asked by ask rule 't__deploy'"]
    assert re.fullmatch(r"call call_[0-9a-f]+", shown[5]) and re.fullmatch(r"expires \d\d:\d\d:\d\d UTC", shown[6])
    assert seen["maybe"] == (400, "expected decision = approve or deny")
    assert (seen["answered"][0], said(seen["answered"][1])) == (
        303, f"Approved: agent a's call of t__deploy ({seen['call']}).")
    assert said(seen["refused"]).startswith("Denied: agent a's call of t__deploy (call_")
    assert seen["second arguments"] == '{\n  &#34;target&#34;: &#34;mōon&#34;\n}'  # as JSON, indented, as written
    assert said(seen["no digest"]).startswith("Not answered: the approval's digest differs")
    assert seen["denied"] == (True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and the "
                                    "operator (token $TOK_OP, in the console) denied it.")
    assert seen["result"] == (False, "deployed to <b>prod</b>")
    rows = seen["feed"]
    assert rows[:2] == ["since (UTC) agent tool state", "time (UTC) agent what decision by ms"]  # nothing runs any more
    assert re.fullmatch(r"\S+ a t__deploy denied Permission denied: .* [\d.]+", rows[2])
    assert re.fullmatch(r"\S+ a t__deploy allowed approved by the operator \(token \$TOK_OP, in the console\) "
                        r"[\d.]+", rows[3])


def said(location: str) -> str:
    """What a redirect after an answer asks the approvals page to say (signed: checked by the page)."""
    from urllib.parse import parse_qs, urlsplit

    where = urlsplit(location)
    query = parse_qs(where.query)
    assert where.path == "/console/approvals" and len(query["sig"][0]) == 64, location
    return query["done"][0]


# -- in a real browser --------------------------------------------------------------------------------------------

CHROMIUM, CHROMEDRIVER = shutil.which("chromium") or "/usr/bin/chromium", shutil.which("chromedriver") or \
    "/usr/bin/chromedriver"
SHOTS_ENV = "TOOLCRIB_SCREENSHOTS"  # where the browser test saves its screenshots (docs/images for the docs)


def browser(tmp_path: Path) -> Any:
    """Headless Chromium from Debian's packages, driven by Selenium through Debian's chromedriver (no download)."""
    if not (Path(CHROMIUM).exists() and Path(CHROMEDRIVER).exists()):
        pytest.skip("needs Debian's chromium and chromium-driver (.ci/run installs them)")
    import os

    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    os.environ["SE_OFFLINE"] = "true"  # Selenium Manager must not look for a driver on the network
    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--window-size=1400,900", f"--user-data-dir={tmp_path / 'chromium'}"):
        options.add_argument(flag)
    return webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)


@pytest.mark.slow
def test_in_a_browser_an_operator_signs_in_sees_why_a_tool_is_hidden_and_approves_and_denies_calls(
        tmp_path: Path) -> None:
    """``toolcrib serve --http`` with the console; an agent connected with the mcp SDK's client and no elicitation
    handler (as frameworks connect) makes calls that need approval; the operator answers them in the page."""
    import os

    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    from approving import serve_http

    config = tmp_path / "toolcrib.toml"
    config.write_text(CONSOLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(ENV, TOK_B="b" * 32, TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="t=approving:PACK",
               PYTHONPATH=str(Path(__file__).parent) + os.pathsep + env.get("PYTHONPATH", ""))
    driver = browser(tmp_path)  # first: without a browser the test skips, and leaves no server running
    try:
        proc, base, _ = serve_http(config, env)
    except BaseException:
        driver.quit()
        raise
    wait = WebDriverWait(driver, 30)  # a hang guard
    shots: list[Path] = []

    folder = Path(os.environ.get(SHOTS_ENV) or tmp_path / "shots")

    def shot(name: str) -> None:
        folder.mkdir(exist_ok=True)
        shots.append(folder / f"console-{name}.png")
        driver.save_screenshot(str(shots[-1]))

    def sign_in(token: str) -> None:
        driver.get(f"{base}/console/login")
        driver.find_element(By.ID, "token").send_keys(token)
        driver.find_element(By.ID, "sign-in").click()
        try:
            wait.until(lambda d: d.find_elements(By.ID, "message") or d.find_elements(By.ID, "agents"))
        except Exception:
            print(driver.current_url, driver.page_source[:2000])
            raise

    async def agent_calls(target: str) -> tuple[bool, str]:
        http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {AGENT_TOKEN}"}, timeout=120)
        async with http, Client(streamable_http_client(f"{base}/agents/a/mcp", http_client=http)) as client:
            result = await client.call_tool("t__deploy", {"target": target})
            return result.is_error, result.content[0].text  # type: ignore[union-attr]

    def answer_in_the_page(decision: str, target: str) -> tuple[bool, str]:
        async def main() -> tuple[bool, str]:
            found: list[tuple[bool, str]] = []
            async with anyio.create_task_group() as tg:
                async def call() -> None:
                    found.append(await agent_calls(target))

                feed = driver.current_window_handle
                if decision == "deny":  # the feed page, open before the call, is told of it as it runs
                    await anyio.to_thread.run_sync(lambda: driver.get(f"{base}/console/feed"))
                    await anyio.to_thread.run_sync(lambda: wait.until(  # its event stream is connected
                        lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-live") == "yes"))
                tg.start_soon(call)
                if decision == "deny":
                    await anyio.to_thread.run_sync(lambda: wait.until(lambda d: [
                        r.text.split()[1:] for r in d.find_elements(By.CSS_SELECTOR, "#running tbody tr")] == [
                        ["a", "t__deploy", "waiting", "for", "approval"]]))
                    shot("running")
                    driver.switch_to.new_window("tab")
                await anyio.to_thread.run_sync(lambda: driver.get(f"{base}/console/approvals"))
                await anyio.to_thread.run_sync(lambda: wait.until(
                    expected_conditions.presence_of_element_located((By.CSS_SELECTOR, "section.approval"))))
                shown = driver.find_element(By.CSS_SELECTOR, "section.approval pre.arguments").text
                assert shown == '{\n  "target": "' + target + '"\n}', shown
                if decision == "approve":
                    shot("approvals")
                driver.find_element(By.CSS_SELECTOR, f"section.approval button.{decision}").click()
                await anyio.to_thread.run_sync(lambda: wait.until(
                    expected_conditions.presence_of_element_located((By.ID, "done"))))
                if decision == "deny":  # back on the feed: the call ended, and its decision came in
                    driver.close()
                    driver.switch_to.window(feed)
                    await anyio.to_thread.run_sync(lambda: wait.until(lambda d: not d.find_elements(
                        By.CSS_SELECTOR, "#running tbody tr") and d.find_elements(
                        By.CSS_SELECTOR, "#feed tbody tr")[0].text.split()[1:4] == ["a", "t__deploy", "denied"]))
            return found[0]

        return anyio.run(main)

    try:
        sign_in(AGENT_TOKEN)
        assert driver.find_element(By.ID, "message").text == ("That is not the operator token; an agent's token "
                                                              "never opens the console.")
        shot("refused")
        sign_in(OPERATOR_TOKEN)
        assert driver.find_element(By.TAG_NAME, "h1").text == "Agents"
        shot("agents")
        driver.get(f"{base}/console/agents/b")
        hidden = driver.find_elements(By.CSS_SELECTOR, "#hidden tr")[1].text
        assert hidden == ("t__deploy plan mode shows only tools annotated read-only (readOnlyHint), and this one "
                          "is not")
        shot("agent")
        driver.get(f"{base}/console/matrix")
        shot("matrix")
        driver.get(f"{base}/console/sources")
        shot("sources")
        for width in (1400, 500):  # a desktop's window and a phone's: no page is wider than the window
            driver.set_window_size(width, 900)
            for page in ("", "agents/b", "matrix", "sources", "feed", "approvals"):
                driver.get(f"{base}/console/{page}")
                wider = driver.execute_script("return document.documentElement.scrollWidth - "
                                              "document.documentElement.clientWidth;")
                assert wider <= 0, (width, page, wider)
                if width == 500 and page in ("agents/b", "feed"):
                    shot(f"{page.replace('/', '-')}-narrow")
        driver.set_window_size(1400, 900)
        assert answer_in_the_page("approve", "prod") == (False, "deployed to prod")
        assert re.fullmatch(r"Approved: agent a's call of t__deploy \(call_[0-9a-f]+\)\.",
                            driver.find_element(By.ID, "done").text)
        # Nothing waits now: the page looks in the background and stays put (a page that replaced itself on a timer
        # cancelled the operator's own navigation when the two crossed).
        driver.execute_script("window.stayed = 'yes';")
        time.sleep(1.6)  # three of its looks
        assert driver.execute_script("return window.stayed;") == "yes"
        assert driver.find_elements(By.ID, "none") != []
        assert answer_in_the_page("deny", "staging") == (
            True, "Permission denied: t__deploy needs approval (ask rule 't__deploy'), and the operator (token "
            "$TOK_OP, in the console) denied it.")
        driver.get(f"{base}/console/feed")
        rows = [row.text for row in driver.find_elements(By.CSS_SELECTOR, "#feed tbody tr")]
        assert [r.split()[1:4] for r in rows[:2]] == [["a", "t__deploy", "denied"], ["a", "t__deploy", "allowed"]]
        shot("feed")
        problems = [e["message"] for e in driver.get_log("browser") if "favicon.ico" not in e["message"] and
                    not e["message"].endswith("/console/login - Failed to load resource: the server responded "
                                              "with a status of 401 (Unauthorized)")]  # the agent token's refusal
        assert problems == []  # no script error, nothing the Content-Security-Policy refused
    finally:
        driver.quit()
        proc.terminate()
        proc.wait(timeout=20)
    assert all(path.stat().st_size > 1000 for path in shots) and len(shots) == 10


def test_toolcrib_console_needs_the_operator_and_its_token(cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import cli

    plain = cli_config("[agents.a]\n", "t=approving:PACK")
    assert cli("console", "--config", plain)[0::2] == (
        2, "error: the console needs an [operator] table: its token_env names the token that opens it\n")
    path = cli_config(CONSOLE, "t=approving:PACK")
    monkeypatch.delenv("TOK_OP", raising=False)
    assert cli("console", "--config", path)[0::2] == (
        2, "error: $TOK_OP is not set: the console opens with the operator token\n")


@pytest.mark.slow
def test_toolcrib_console_serves_the_console_of_a_config_and_none_of_its_agents(tmp_path: Path) -> None:
    import os
    import sys
    import time

    config = tmp_path / "toolcrib.toml"
    config.write_text(CONFIG.format(approvals="client", timeout=60, operator=""))  # console = false: the command
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(ENV, TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="t=approving:PACK",
               PYTHONPATH=str(Path(__file__).parent) + os.pathsep + env.get("PYTHONPATH", ""))
    log = tmp_path / "console.log"
    with log.open("wb") as err:
        proc = subprocess.Popen([sys.executable, "-m", "toolcrib.cli", "console", "--port", "0", "--config",
                                 str(config)], stderr=err, env=env)
    try:
        deadline = time.monotonic() + 60  # a hang guard
        while not (found := re.search(r"the operator's console at (http://127\.0\.0\.1:\d+)/console/ \(no agent is "
                                      r"served here\)", log.read_text())):
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        base = found.group(1)
        with httpx2.Client(base_url=base, timeout=30) as http:
            assert http.post("/console/login", data={"token": OPERATOR_TOKEN}).status_code == 303
            index = http.get("/console/")
            agent = http.post("/agents/a/mcp", headers={"Authorization": f"Bearer {AGENT_TOKEN}"}, json={})
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert text_of(index.text, "tr") == ["agent mode approvals tools it sees tool search limits",
                                         "a default client 2 - -"]
    assert agent.status_code == 401  # no agent is served here: its token opens nothing


def test_the_console_serves_its_own_script_and_style_only() -> None:
    async def main() -> list[tuple[int, str, bool]]:
        app = app_of(Path.cwd())
        async with client_of(app) as http:
            answers = [await http.get(f"/console/static/{name}") for name in (
                "console.js", "console.css", "base.html", "..%2fconsole.py")]
        assert 'new EventSource("/console/feed/events")' in answers[0].text and "section.approval" in answers[1].text
        assert answers[0].headers["cache-control"] == "max-age=300" and answers[2].text == "not found"
        return [(a.status_code, a.headers["content-type"].split(";")[0], "nosniff" in a.headers.get(
            "x-content-type-options", "")) for a in answers]

    assert anyio.run(main) == [(200, "text/javascript", True), (200, "text/css", True),
                               (404, "text/plain", True), (404, "text/plain", False)]  # (the router's own 404)


def test_the_live_feed_sends_the_calls_running_then_each_start_end_and_decision() -> None:
    """The event stream, read as a browser's EventSource reads it (raw ASGI: the stream never ends by itself)."""
    async def main() -> list[Any]:
        app = app_of(Path.cwd())
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            await signed_in(http)
            cookie = "; ".join(f"{k}={v}" for k, v in http.cookies.items())
        feed = app.console.feed
        key = feed.begin("a", "t__deploy")  # running before the page connects: in the snapshot
        chunks: list[bytes] = []
        started: dict[str, str] = {}
        done = anyio.Event()
        connected = anyio.Event()

        async def receive() -> dict[str, Any]:
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.update({k.decode(): v.decode() for k, v in message["headers"]})
            if message["type"] == "http.response.body" and message.get("body"):
                chunks.append(message["body"])
                if len(chunks) == 2:
                    connected.set()
                if len(chunks) == 5:
                    done.set()

        scope = {"type": "http", "method": "GET", "path": "/console/feed/events", "raw_path": b"/console/feed/events",
                 "query_string": b"", "headers": [(b"host", b"127.0.0.1:8000"), (b"cookie", cookie.encode())],
                 "scheme": "http", "server": ("127.0.0.1", 8000), "client": ("127.0.0.1", 5000), "root_path": "",
                 "http_version": "1.1", "asgi": {"version": "3.0"}}
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, scope, receive, send)
            await connected.wait()
            feed.end(key)
            await app.state.host.call("a", "t__status", {})
            await done.wait()
        assert started["content-type"].startswith("text/event-stream")
        assert started["content-security-policy"].startswith("default-src 'none'")
        return [chunk.decode() for chunk in chunks]

    chunks = anyio.run(main)
    assert chunks[0] == "retry: 2000\n\n"
    events = [json.loads(chunk.removeprefix("data: ")) for chunk in chunks[1:]]
    assert events[0] == {"event": "running", "running": [
        {"event": "started", "key": 1, "agent": "a", "tool": "t__deploy", "since": events[0]["running"][0]["since"],
         "waiting": False}]}
    assert events[1] == {"event": "ended", "key": 1}
    assert events[2]["event"] == "started" and (events[2]["agent"], events[2]["tool"]) == ("a", "t__status")
    assert (events[3]["agent"], events[3]["tool"], events[3]["decision"]) == ("a", "t__status", "allowed")


# -- what the full mutation run left: the session cookie, the sign-in page, every redirect's headers -------------

CONSOLE_HEADERS = {"cache-control": "no-store", "x-frame-options": "DENY", "referrer-policy": "same-origin",
                   "x-content-type-options": "nosniff",
                   "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src "
                                              "'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"}


def headers_of(response: Any) -> dict[str, str]:
    return {k: response.headers.get(k) for k in CONSOLE_HEADERS}


def test_a_session_cookie_is_spelled_out_and_read_back_for_every_length_of_name(tmp_path: Path) -> None:
    import hashlib
    import hmac

    from starlette.requests import Request

    console = app_of(tmp_path).console
    key = hmac.new(OPERATOR_TOKEN.encode(), b"toolcrib console sessions", hashlib.sha256).digest()
    named, sid = base64.urlsafe_b64encode(b"op").decode().rstrip("="), "s" * 24
    assert console._session(1_900_000_000, "op", sid) == (f"1900000000.{named}.{sid}." + hmac.new(
        key, f"session|1900000000|{named}|{sid}".encode(), hashlib.sha256).hexdigest())

    def read(cookie: str) -> Any:
        scope = {"type": "http", "method": "GET", "path": "/console/",
                 "headers": [(b"cookie", f"toolcrib_console={cookie}".encode())]}
        return console._signed_in(Request(scope))

    for who in ("a", "ab", "abc", "abcd", "the operator (token $OPERATOR)", "op abW"):  # every padding; and one
        # whose name ends in X (b3AgYWJX): only the padding is stripped
        cookie = console._session(1_900_000_000, who, sid)
        assert "=" not in cookie and read(cookie) == (cookie, who, sid, 1_900_000_000)
    far = console._session(999_999_999_999, "op", sid)  # twelve digits: the most an expiry may have
    assert read(far) == (far, "op", sid, 999_999_999_999)
    assert read(console._session(1_000_000_000_000, "op", sid)) is None  # thirteen
    assert read(console._session(1_000_000_000, "op", sid)) is None  # 2001: expired
    assert read(console._session(1_900_000_000, "op", "s" * 23)) is None  # not a session id of the console's


def test_the_sign_in_page_and_every_redirect_and_refusal_carry_the_console_s_headers(tmp_path: Path) -> None:
    async def main() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            page = await http.get("/console/login")
            seen["login page"] = (page.status_code, text_of(page.text, "h1"), text_of(page.text, "p"),
                                  'name="csrf"' in page.text, headers_of(page))
            no_token = await http.post("/console/login", data={"other": "1"})
            seen["no token"] = (no_token.status_code, text_of(no_token.text, "p")[0])
            seen["anonymous"] = headers_of(await http.get("/console/"))
            answer = await http.post("/console/login", data={"token": OPERATOR_TOKEN})
            seen["signed in"] = headers_of(answer)
            csrf = str(re.search(r'name="csrf" value="([0-9a-f]+)"', (await http.get("/console/")).text).group(1))
            other = await http.post("/console/logout", data={"other": "1"})  # a form without the CSRF field
            seen["no csrf field"] = (other.status_code, text_of(other.text, "h1"),
                                     f'name="csrf" value="{csrf}"' in other.text)
            seen["static post"] = (await http.post("/console/static/console.js")).status_code
            bad = await http.post("/console/approvals/x", data={"csrf": csrf, "digest": "d"})
            seen["no decision"] = (bad.status_code, bad.text, headers_of(bad))
            gone = await http.post("/console/approvals/x", data={"csrf": csrf, "decision": "deny", "digest": "d"})
            seen["answered nothing"] = (gone.status_code, gone.headers["location"], headers_of(gone))
            out = await http.post("/console/logout", data={"csrf": csrf})
            seen["signed out"] = headers_of(out)
        return seen

    seen = anyio.run(main)
    assert seen["login page"] == (200, ["Sign in"], ["The token in the environment variable that [operator] token_env "
                                                     "names."], False, CONSOLE_HEADERS)
    assert seen["no token"] == (401, "That is not the operator token; an agent's token never opens the console.")
    assert seen["anonymous"] == seen["signed in"] == seen["signed out"] == CONSOLE_HEADERS
    assert seen["no csrf field"] == (403, ["Refused"], True)  # the refusal is a page of the session's
    assert seen["static post"] == 405
    assert seen["no decision"] == (400, "expected decision = approve or deny", CONSOLE_HEADERS)
    assert (seen["answered nothing"][0], said(seen["answered nothing"][1]), seen["answered nothing"][2]) == (
        303, "Not answered: no such pending approval: it was answered, it expired, or its call ended.",
        CONSOLE_HEADERS)


def test_the_feed_keeps_its_last_decisions_drops_a_page_that_does_not_keep_up_and_sends_text_as_it_is() -> None:
    from toolcrib.mcp.console import FEED_KEPT, Feed, _event

    feed = Feed()
    slow = feed.subscribe()  # never read: dropped once its buffer of 100 is full
    quick = feed.subscribe()
    got: list[Any] = []
    for n in range(FEED_KEPT + 5):
        feed.kept.append({"n": n})
        feed._send({"n": n})
        if n < 150:
            got.append(quick.receive_nowait())
    assert [r["n"] for r in feed.kept] == list(range(5, FEED_KEPT + 5))  # the last FEED_KEPT
    assert len(feed._listeners) == 1 and got[149] == {"n": 149}  # the slow page went; the quick one stays
    assert slow.statistics().current_buffer_used == 100
    feed.end(12345)  # a call that never began (or ended already) ends quietly
    assert _event({"tool": "fs__write_file", "path": "résumé.txt", "raw": b"\x00"}) == (
        'data: {"tool": "fs__write_file", "path": "résumé.txt", "raw": "b\'\\\\x00\'"}\n\n').encode()


def test_the_sources_page_names_what_the_lock_holds_back_and_the_agent_page_says_why(tmp_path: Path) -> None:
    import dataclasses

    async def main() -> tuple[str, str]:
        app = app_of(tmp_path)
        host = app.state.host
        entry = host.catalog.entries["t__status"]
        host.catalog.entries["t__status"] = dataclasses.replace(
            entry, held="its definition changed since toolcrib.lock: description; toolcrib lock accepts it")
        host._views.clear()
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            await signed_in(http)
            return (await http.get("/console/sources")).text, (await http.get("/console/agents/b")).text

    sources, agent = anyio.run(main)
    assert text_of(sources, "h2") == ["Held back by the definition lock"]
    assert text_of(sources.split('id="held"')[1], "tr") == [
        "tool why", "t__status its definition changed since toolcrib.lock: description; toolcrib lock accepts it"]
    hidden = text_of(agent, "tr")
    assert "t__status its definition changed since toolcrib.lock: description; toolcrib lock accepts it" in hidden


NEEDS_JINJA = ("console = true needs Jinja2, which renders the console's pages, and it is not installed: pip install "
               "'toolcrib[console]'")


def test_a_console_without_jinja2_is_an_error_check_names(cli_config: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import cli

    path = cli_config(CONSOLE, "t=approving:PACK")
    for name, value in {**ENV, "TOK_B": "b" * 32}.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setitem(sys.modules, "jinja2", None)  # as where toolcrib[console] was not installed
    code, out, err = cli("check", "--config", path)
    assert (code, err.splitlines()) == (1, [f"error: {path}: operator.console: {NEEDS_JINJA}"])
    assert out == f"{path}: 2 agent(s), 2 tool(s), 1 error(s), 0 warning(s)\n"


@pytest.mark.slow
def test_serving_a_console_without_jinja2_says_so_in_one_line(tmp_path: Path) -> None:
    """In processes of their own (serving ends everything its process started, and sets up its logging): Jinja2
    hidden by a module of that name that cannot be imported."""
    import os

    shim = tmp_path / "shim" / "jinja2"
    shim.mkdir(parents=True)
    (shim / "__init__.py").write_text('raise ImportError("No module named \'jinja2\'")\n')
    config = tmp_path / "toolcrib.toml"
    config.write_text(CONSOLE)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TOOLCRIB_")}
    env.update(ENV, TOK_B="b" * 32, TOOLCRIB_DISABLE_PLUGIN_AUTOLOAD="1", TOOLCRIB_PLUGINS="t=approving:PACK",
               PYTHONPATH=os.pathsep.join([str(tmp_path / "shim"), str(Path(__file__).parent)]))
    for command in (["console", "--port", "0"], ["serve", "--http", "--port", "0", "--no-reload"]):
        ran = subprocess.run([sys.executable, "-m", "toolcrib.cli", *command, "--config", str(config)], env=env,
                             capture_output=True, text=True, timeout=120)
        assert (ran.returncode, ran.stderr) == (2, f"error: {NEEDS_JINJA}\n"), command


def test_the_grants_people_gave_sources_are_listed_and_revoked_in_the_console(tmp_path: Path) -> None:
    """(toolcrib.consent) Whose grant, at which source, until when, never a token; revoked by its button, with the
    console's CSRF token only."""
    from toolcrib.consent import Person, vault_for

    vault = vault_for(base64.b64encode(bytes(range(1, 33))).decode(), "key")

    async def main() -> dict[str, Any]:
        await vault.forget()
        await vault.keep(Person("https://idp", "alice"), "mcps.tickets", {"access": "tok-alice-9", "expires": None})
        await vault.keep(Person("https://idp", "bob"), "mcps.tickets", {"access": "tok-bob-9", "expires": 4102444800})
        seen: dict[str, Any] = {}
        app = app_of(tmp_path)
        async with app.app.router.lifespan_context(app.app), client_of(app) as http:
            csrf = await signed_in(http)
            page = (await http.get("/console/credentials")).text
            seen["listed"] = text_of(page, "tr")[1:]
            seen["no token"] = "tok-alice-9" not in page and "tok-bob-9" not in page
            forged = await http.post("/console/credentials/revoke", data={"csrf": "0" * 64, "subject": "alice",
                                                                          "source": "mcps.tickets"})
            seen["forged"] = forged.status_code
            done = await http.post("/console/credentials/revoke", data={"csrf": csrf, "subject": "alice",
                                                                        "source": "mcps.tickets"})
            seen["done"] = (done.status_code, text_of((await http.get(done.headers["location"])).text, "p")[0])
            seen["left"] = [(g["subject"], g["source"]) for g in await vault.grants()]
        await vault.forget()
        return seen

    seen = anyio.run(main)
    assert seen["listed"] == ["alice https://idp mcps.tickets no expiry Revoke",
                              "bob https://idp mcps.tickets 2100-01-01 00:00:00 UTC Revoke"]
    assert seen["no token"] and seen["forged"] == 403
    assert seen["done"] == (303, "Revoked: alice's grant to mcps.tickets.")
    assert seen["left"] == [("bob", "mcps.tickets")]
