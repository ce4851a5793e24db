// The execution page's conveniences. Everything here has a plain-HTML fallback: the
// prev/next links, the scrubber's Go button, provenance links and the in-flight
// <noscript> refresh all work with JavaScript off. This file only makes them quicker:
// ←/→ step through the timeline, provenance opens in place, the selected row stays in view.
(function () {
  "use strict";

  var htmx = window.htmx;

  function page() {
    return document.getElementById("execution");
  }

  function isTyping(target) {
    if (!target || !target.tagName) return false;
    var tag = target.tagName.toLowerCase();
    return tag === "input" || tag === "textarea" || tag === "select" || target.isContentEditable;
  }

  // ←/→ follow the prev/next links (htmx swaps them in place; without htmx they navigate).
  // Presses made while a swap is on its way are queued, not sent against stale links,
  // so pressing ← twice quickly moves two steps.
  var queued = 0;
  var busy = false;

  function step(delta) {
    var link = document.querySelector(delta < 0 ? "[data-step-prev]" : "[data-step-next]");
    if (!link) {
      queued = 0;
      return;
    }
    busy = Boolean(htmx);
    link.click();
  }

  function stepQueued() {
    busy = false;
    if (queued === 0) return;
    var delta = queued < 0 ? -1 : 1;
    queued -= delta;
    step(delta);
  }

  document.addEventListener("keydown", function (event) {
    if (event.defaultPrevented || event.altKey || event.ctrlKey || event.metaKey) return;
    if (isTyping(event.target)) return;
    var delta = event.key === "ArrowLeft" ? -1 : event.key === "ArrowRight" ? 1 : 0;
    if (!delta) return;
    event.preventDefault();
    if (busy) {
      queued += delta;
    } else {
      step(delta);
    }
  });
  document.addEventListener("htmx:afterSettle", stepQueued);
  document.addEventListener("htmx:responseError", function () { busy = false; queued = 0; });
  document.addEventListener("htmx:sendError", function () { busy = false; queued = 0; });

  // The scrubber shows the step it would go to while dragging; releasing it submits
  // the form (htmx listens for "change"; without htmx, submit it ourselves).
  document.addEventListener("input", function (event) {
    var target = event.target;
    if (!target.matches || !target.matches("[data-scrubber]")) return;
    var output = target.form && target.form.querySelector("[data-scrubber-value]");
    if (output) output.textContent = "step " + target.value;
  });
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (htmx || !target.matches || !target.matches("[data-scrubber]")) return;
    target.form.submit();
  });

  // A field name opens its provenance in place: the state explorer (timeline, step,
  // panel, tree) as the page renders it for ?path=…, so the timeline marks the field's
  // writes and its step links keep the panel open. Each opening is a history entry of
  // its own, so Back closes the panel again. `shownSearch` is the query the explorer on
  // screen answers: a popstate that does not change it (a #fragment link fires one too)
  // leaves it alone.
  var shownSearch = window.location.search;

  function loadProvenance(search, push, fallback) {
    var root = page();
    if (!root || !document.getElementById("state-explorer")) return false;
    fetch(root.getAttribute("data-base") + search, { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("provenance: HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var doc = new DOMParser().parseFromString(html, "text/html");
        var fresh = doc.getElementById("state-explorer");
        var current = document.getElementById("state-explorer");
        if (!fresh || !current) throw new Error("provenance: no state explorer in the answer");
        current.replaceWith(fresh);
        if (htmx) htmx.process(fresh);
        shownSearch = search;
        revealSelected();
        var panel = document.getElementById("provenance");
        if (push) {
          window.history.pushState({ provenance: true }, "", window.location.pathname + search);
          if (panel) {
            panel.focus({ preventScroll: true });
            panel.scrollIntoView({ block: "nearest", behavior: "smooth" });
          }
        }
      })
      .catch(function () {
        window.location.href = fallback;
      });
    return true;
  }

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[data-provenance]");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    var url = new URL(link.href, window.location.href);
    if (url.pathname !== window.location.pathname) return;
    if (loadProvenance(url.search, true, link.href)) event.preventDefault();
  });

  // Back and Forward between entries pushed above: show the panel the URL names. Entries
  // htmx pushed are htmx's to restore (their snapshot holds the panel as it was).
  window.addEventListener("popstate", function (event) {
    if (event.state && event.state.htmx) {
      shownSearch = window.location.search;  // htmx restores the page, panel included
      return;
    }
    if (window.location.search === shownSearch) return;
    loadProvenance(window.location.search, false, window.location.href);
  });

  // Keep the selected timeline row visible inside its scrolling box.
  function revealSelected() {
    var box = document.querySelector("[data-steps]");
    var row = box && box.querySelector(".is-selected");
    if (!row) return;
    var top = row.offsetTop - box.clientHeight / 2 + row.offsetHeight;
    if (row.offsetTop < box.scrollTop + 30 || row.offsetTop > box.scrollTop + box.clientHeight - 40) {
      box.scrollTop = Math.max(top, 0);
    }
  }

  // A link to #span-… opens that span's details.
  function openSpanFromHash() {
    var hash = window.location.hash;
    if (hash.indexOf("#span-") !== 0) return;
    var span = document.getElementById(hash.slice(1));
    if (span && span.tagName.toLowerCase() === "details") span.open = true;
  }

  function ready() {
    if (htmx) document.documentElement.classList.add("js");
    revealSelected();
    openSpanFromHash();
    // Without htmx the in-flight page cannot poll in place; reload it instead.
    var root = page();
    if (!htmx && root && root.hasAttribute("data-polling")) {
      window.setTimeout(function () { window.location.reload(); }, 2000);
    }
  }

  document.addEventListener("htmx:afterSettle", function () {
    shownSearch = window.location.search;
    revealSelected();
  });
  window.addEventListener("hashchange", openSpanFromHash);
  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", ready);
  } else {
    ready();
  }
})();
