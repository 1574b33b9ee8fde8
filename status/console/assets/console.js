// The console refreshes its parts in place; it sends only GET requests.
"use strict";
(function () {
  const refresh = Number(document.body.dataset.refreshMs) || 10000;

  async function load(url, target) {
    const r = await fetch(url, { headers: { Accept: "text/html" } });
    if (!r.ok) throw new Error(url + ": " + r.status);
    target.innerHTML = await r.text();
  }

  function reportError(err) {
    const el = document.querySelector(".updated");
    if (el) el.classList.add("stale");
    console.warn("console refresh:", err.message);
  }

  async function tick() {
    try {
      await load("/console/sites", document.getElementById("sites"));
      await load("/console/streams", document.getElementById("streams"));
      for (const status of ["dead_lettered", "expired", "overdue"]) {
        await load("/console/events?status=" + status, document.getElementById(status));
      }
    } catch (err) {
      reportError(err);
    }
  }

  async function show(id) {
    const out = document.getElementById("event-result");
    try {
      await load("/console/event?id=" + encodeURIComponent(id), out);
    } catch (err) {
      out.textContent = "Search failed: " + err.message;
    }
  }

  document.getElementById("search").addEventListener("submit", function (ev) {
    ev.preventDefault();
    show(document.getElementById("search-id").value.trim());
  });

  document.addEventListener("click", function (ev) {
    const link = ev.target.closest(".evlink");
    if (link) {
      ev.preventDefault();
      show(link.dataset.id);
      return;
    }
    const more = ev.target.closest(".more");
    if (more) {
      const box = document.getElementById(more.dataset.status);
      load("/console/events?status=" + more.dataset.status + "&after=" + encodeURIComponent(more.dataset.after), box)
        .catch(reportError);
    }
  });

  setInterval(tick, refresh);
})();
