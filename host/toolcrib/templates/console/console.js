// The console's live parts: the feed page appends each decision as the server sends it (written as text, never
// as HTML), and the approvals page looks in the background while nothing waits, so a new call appears within a
// second.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "feed") {
    const body = document.querySelector("#feed tbody");
    const running = document.querySelector("#running tbody");
    const row = (values) => {
      const tr = document.createElement("tr");
      for (const value of values) {
        const cell = document.createElement("td");
        cell.textContent = String(value);
        tr.appendChild(cell);
      }
      return tr;
    };
    const state = (waiting) => (waiting ? "waiting for approval" : "running");
    const events = new EventSource("/console/feed/events");
    events.onmessage = (event) => {
      const r = JSON.parse(event.data);
      if (r.event === "running") {  // the calls running when the page connected: from now on, each is told
        running.replaceChildren(...r.running.map((c) => {
          const tr = row([c.since, c.agent, c.tool, state(c.waiting)]);
          tr.dataset.key = String(c.key);
          return tr;
        }));
        document.body.dataset.live = "yes";
      } else if (r.event === "started") {
        const tr = row([r.since, r.agent, r.tool, state(r.waiting)]);
        tr.dataset.key = String(r.key);
        running.appendChild(tr);
      } else if (r.event === "waiting") {
        for (const tr of running.querySelectorAll("tr")) {
          if (tr.dataset.key === String(r.key)) tr.lastChild.textContent = state(r.waiting);
        }
      } else if (r.event === "ended") {
        for (const tr of running.querySelectorAll("tr")) {
          if (tr.dataset.key === String(r.key)) tr.remove();
        }
      } else {
        body.insertBefore(row([String(r.time).slice(11, 19), r.agent, r[r.kind], r.decision, r.by, r.duration_ms]), body.firstChild);
      }
    };
  }
  if (page === "approvals" && document.getElementById("none")) {
    // Look for a waiting call in the background and load the page again only when there is one: a page that
    // replaced itself on a timer would cancel the operator's own navigation (a click on another page) when
    // the two crossed.
    const look = async () => {
      try {
        const answer = await fetch(location.href, {cache: "no-store", credentials: "same-origin"});
        if (answer.ok && (await answer.text()).includes('<section class="approval"')) {
          location.replace(location.href);  // (keeps what the last answer did)
          return;
        }
      } catch (e) {
        // the server is away for a moment: look again
      }
      setTimeout(look, 500);
    };
    setTimeout(look, 500);
  }
});
