// shaper status page: polls /status.json and copies its view into the page.
// Every figure is formatted by the server (the JSON's "view"), so the page
// and the JSON always agree. No dependencies; nothing leaves this origin.
(function () {
  "use strict";
  var body = document.body;
  var interval = parseInt(body.getAttribute("data-interval-ms"), 10) || 1000;
  var loadedAt = Date.now();
  var polls = 0;
  var live = document.getElementById("live");

  function setLive(ok, text) {
    if (!live) return;
    live.textContent = text;
    live.className = ok ? "live" : "live stale";
  }

  function apply(snap) {
    var cells = snap.view.cells;
    var missing = false;
    Object.keys(cells).forEach(function (k) {
      var els = document.querySelectorAll('[data-k="' + k.replace(/["\\]/g, "\\$&") + '"]');
      if (els.length === 0) { missing = true; return; }
      els.forEach(function (el) {
        if (el.textContent !== cells[k]) el.textContent = cells[k];
        if (el.hasAttribute("data-state")) el.setAttribute("data-state", cells[k]);
      });
    });
    Object.keys(snap.view.sparks).forEach(function (name) {
      var svg = document.querySelector('svg[data-spark="' + name.replace(/["\\]/g, "\\$&") + '"]');
      if (!svg) { missing = true; return; }
      var sp = snap.view.sparks[name];
      svg.querySelector("polyline").setAttribute("points", sp.points);
      var ref = svg.querySelector("line.ref");
      ref.setAttribute("y1", sp.rate_y);
      ref.setAttribute("y2", sp.rate_y);
    });
    var rows = snap.view.rows || {};
    Object.keys(rows).forEach(function (k) {
      document.querySelectorAll('[data-row="' + k.replace(/["\\]/g, "\\$&") + '"]').forEach(function (el) {
        el.hidden = !rows[k];
      });
    });
    procs(snap.view.processes || []);
    // A limiter or script that appeared since the page was rendered: render
    // the page again (at most every 10 s).
    if (missing && Date.now() - loadedAt > 10000) {
      location.reload();
    }
  }

  // procs rebuilds the list of live processes, this one marked.
  function procs(list) {
    var ul = document.getElementById("procs");
    if (!ul) return;
    var items = list.map(function (p) {
      var li = document.createElement("li");
      if (p.self) li.className = "self";
      var id = document.createElement("span");
      id.className = "pid";
      id.textContent = p.id;
      li.appendChild(id);
      if (p.self) {
        var me = document.createElement("span");
        me.className = "me";
        me.textContent = "this process";
        li.appendChild(document.createTextNode(" "));
        li.appendChild(me);
      }
      var text = document.createElement("span");
      text.className = "ptext";
      text.textContent = p.text;
      li.appendChild(document.createTextNode(" "));
      li.appendChild(text);
      return li;
    });
    ul.replaceChildren.apply(ul, items);
  }

  function poll() {
    fetch("/status.json", { cache: "no-store", credentials: "same-origin" })
      .then(function (r) {
        if (!r.ok) throw new Error("HTTP " + r.status);
        return r.json();
      })
      .then(function (snap) {
        apply(snap);
        polls++;
        body.setAttribute("data-polls", String(polls));
        setLive(!snap.redis || snap.redis.reachable, snap.view.cells.live || "live");
      })
      .catch(function (e) {
        setLive(false, "stale: " + e.message);
      })
      .finally(function () {
        setTimeout(poll, interval);
      });
  }
  setTimeout(poll, 0);
})();
