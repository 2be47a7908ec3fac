// The console's live parts: the feed page appends each decision as the server sends it (written as text, never
// as HTML), and the approvals page looks again while nothing waits, so a new call appears within a second.
"use strict";
document.addEventListener("DOMContentLoaded", () => {
  const page = document.body.dataset.page;
  if (page === "feed") {
    const body = document.querySelector("#feed tbody");
    const events = new EventSource("/console/feed/events");
    events.onmessage = (event) => {
      const r = JSON.parse(event.data);
      const row = document.createElement("tr");
      for (const value of [r.time, r.agent, r[r.kind], r.decision, r.by, r.duration_ms]) {
        const cell = document.createElement("td");
        cell.textContent = String(value);
        row.appendChild(cell);
      }
      body.insertBefore(row, body.firstChild);
    };
  }
  if (page === "approvals" && document.getElementById("none")) {
    setTimeout(() => location.replace("/console/approvals"), 500);
  }
});
