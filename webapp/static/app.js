// Airlock web app: the only script. Served from 'self' (CSP forbids inline script).
// Two jobs, both conveniences; the checkpoint enforces every rule on its own:
//  1. the Approve button of a high-risk action stays disabled until the typed id matches;
//  2. the queue fetches its rows again every few seconds so new proposals appear, keeping
//     the rows a person ticked for a bulk decision ticked;
//  3. an open proposal's page follows it to its end state: it polls the proposal's
//     signature and reloads when it changes (unless the person is typing in a form).
"use strict";

(function () {
  function gateConfirmations() {
    document.querySelectorAll("input[data-confirm-for]").forEach(function (input) {
      var button = document.getElementById(input.getAttribute("data-confirm-for"));
      var expect = input.getAttribute("data-expect");
      if (!button || expect === null) { return; }
      function update() { button.disabled = input.value !== expect; }
      input.addEventListener("input", update);
      update();
    });
  }

  function pollQueue() {
    var table = document.getElementById("queue");
    if (!table) { return; }
    var url = table.getAttribute("data-poll-url");
    var ms = parseInt(table.getAttribute("data-poll-ms"), 10) || 5000;
    var status = document.getElementById("queue-status");
    var stopped = false;

    function tick() {
      if (stopped) { return; }
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
        .then(function (response) {
          if (response.status === 401) {
            stopped = true;
            if (status) { status.textContent = "Your session has ended: reload to sign in again."; }
            return null;
          }
          return response.ok ? response.text() : null;
        })
        .then(function (html) {
          if (html === null || html === undefined) { return; }
          var doc = new DOMParser().parseFromString("<table>" + html + "</table>", "text/html");
          var fresh = doc.getElementById("queue-rows");
          var current = document.getElementById("queue-rows");
          if (!fresh || !current) { return; }
          var changed = fresh.getAttribute("data-signature") !== current.getAttribute("data-signature");
          // Do not pull a focused row out from under a keyboard user unless it changed.
          if (changed || !current.contains(document.activeElement)) {
            var ticked = {};
            current.querySelectorAll("input[type=checkbox][name=id]:checked").forEach(function (box) {
              ticked[box.value] = true;
            });
            fresh.querySelectorAll("input[type=checkbox][name=id]").forEach(function (box) {
              if (ticked[box.value]) { box.checked = true; }
            });
            current.replaceWith(document.adoptNode(fresh));
            if (changed && status) { status.textContent = "The queue was updated."; }
          }
        })
        .catch(function () {
          if (status) { status.textContent = "Could not refresh the queue; retrying."; }
        })
        .then(function () { window.setTimeout(tick, ms); });
    }
    window.setTimeout(tick, ms);
  }

  function typing() {
    var fields = document.querySelectorAll("main textarea, main input, main select");
    for (var i = 0; i < fields.length; i++) {
      var f = fields[i];
      if (f.type === "hidden") { continue; }
      if (f === document.activeElement) { return true; }
      if (f.type === "radio" || f.type === "checkbox") {
        if (f.checked) { return true; }
      } else if (f.tagName !== "SELECT" && f.value !== "") {
        return true;
      }
    }
    return false;
  }

  function pollProposal() {
    var box = document.getElementById("state-box");
    if (!box || !box.hasAttribute("data-poll-url")) { return; }
    var url = box.getAttribute("data-poll-url");
    var ms = parseInt(box.getAttribute("data-poll-ms"), 10) || 5000;
    var shown = box.getAttribute("data-signature");
    var status = document.getElementById("proposal-status");
    var stopped = false;

    function tick() {
      fetch(url, { credentials: "same-origin", headers: { "Accept": "text/plain" } })
        .then(function (response) {
          if (response.status === 401) {
            stopped = true;
            if (status) { status.textContent = "Your session has ended: reload to sign in again."; }
            return null;
          }
          return response.ok ? response.text() : null;
        })
        .then(function (signature) {
          if (signature === null || signature === undefined || signature === shown) { return; }
          if (typing()) {
            if (status) { status.textContent = "This proposal changed: reload the page to see it."; }
            return;
          }
          stopped = true;
          window.location.reload();
        })
        .catch(function () {
          if (status) { status.textContent = "Could not check the proposal for changes; retrying."; }
        })
        .then(function () { if (!stopped) { window.setTimeout(tick, ms); } });
    }
    window.setTimeout(tick, ms);
  }

  document.addEventListener("DOMContentLoaded", function () {
    gateConfirmations();
    pollQueue();
    pollProposal();
  });
})();
