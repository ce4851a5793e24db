// The execution page's conveniences. Everything here has a plain-HTML fallback: the
// step links (real ?step=N addresses), the scrubber's Go button, provenance links and
// the in-flight <noscript> refresh all work with JavaScript off. This file only makes
// them quicker: ←/→ step through the timeline fetching only the step, provenance opens
// in place, the selected row stays in view.
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

  // Stepping. A step link (data-step), ←/→ and the scrubber fetch only what changes: the
  // step panel (step, provenance, state) and the stepper, `&partial=step`, while the
  // timeline rows stay and the selected one is marked here. A step whose row is not on
  // screen, or a link to another field's provenance, brings the whole explorer
  // (`&partial=explorer`). The address is replaced, not pushed, so Back leaves the run
  // instead of walking back through its steps. Presses made while a step is on its way
  // are queued, so pressing → twice quickly moves two steps.
  var queued = 0;
  var busy = false;

  function partialHref(url, kind) {
    var asked = new URL(url.href);
    asked.searchParams.set("partial", kind);
    return asked.pathname + asked.search;
  }

  function stepRow(sequence) {
    if (!/^\d+$/.test(sequence || "")) return null;
    return document.querySelector('[data-steps] tr[data-sequence="' + sequence + '"]');
  }

  // Only the panel changes when the rows on screen already show the step and the open
  // field (whose writes the rows mark) stays the same.
  function panelOnly(url) {
    var shown = new URLSearchParams(window.location.search);
    return url.pathname === window.location.pathname &&
      url.searchParams.get("path") === shown.get("path") &&
      stepRow(url.searchParams.get("step")) !== null;
  }

  function markSelected(sequence) {
    document.querySelectorAll("[data-steps] tr.is-selected").forEach(function (row) {
      row.classList.remove("is-selected");
      row.removeAttribute("aria-current");
    });
    var row = stepRow(sequence);
    if (row) {
      row.classList.add("is-selected");
      row.setAttribute("aria-current", "step");
    }
  }

  function replaceById(fresh, ids) {
    ids.forEach(function (id) {
      var incoming = fresh.getElementById(id);
      var current = document.getElementById(id);
      if (incoming && current) {
        current.replaceWith(incoming);
        if (htmx) htmx.process(incoming);
      }
    });
  }

  // The control that had focus is found again by its id once its replacement is in; one
  // that is gone (→ at the last step) hands focus to the scrubber beside it.
  function keepFocus(id) {
    if (!id || (document.activeElement && document.activeElement !== document.body)) return;
    var again = document.getElementById(id) || document.getElementById("scrubber");
    if (again) again.focus({ preventScroll: true });
  }

  function goToStep(href) {
    var url = new URL(href, window.location.href);
    if (!page() || !document.getElementById("state-explorer")) return false;
    var kind = panelOnly(url) ? "step" : "explorer";
    var focused = document.activeElement && document.activeElement.id;
    busy = true;
    fetch(partialHref(url, kind), { credentials: "same-origin" })
      .then(function (response) {
        if (!response.ok) throw new Error("step: HTTP " + response.status);
        return response.text();
      })
      .then(function (html) {
        var fresh = new DOMParser().parseFromString(html, "text/html");
        if (kind === "step") {
          replaceById(fresh, ["stepper", "step-panel"]);
          var panel = document.getElementById("step-panel");
          markSelected(panel && panel.getAttribute("data-selected"));
        } else {
          replaceById(fresh, ["state-explorer"]);
        }
        window.history.replaceState(window.history.state, "", url.pathname + url.search + url.hash);
        shownSearch = url.search;
        revealSelected();
        keepFocus(focused);
        busy = false;
        stepQueued();
      })
      .catch(function () {
        window.location.href = url.href;
      });
    return true;
  }

  function step(delta) {
    var link = document.querySelector(delta < 0 ? "[data-step-prev]" : "[data-step-next]");
    if (!link) {
      queued = 0;
      return;
    }
    if (!goToStep(link.href)) window.location.href = link.href;
  }

  function stepQueued() {
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

  document.addEventListener("click", function (event) {
    var link = event.target.closest && event.target.closest("a[data-step]");
    if (!link || event.button !== 0 || event.ctrlKey || event.metaKey || event.shiftKey) return;
    if (new URL(link.href, window.location.href).pathname !== window.location.pathname) return;
    if (busy) {
      event.preventDefault();  // a click lands after the step on its way, not against it
      return;
    }
    if (goToStep(link.href)) event.preventDefault();
  });

  // The scrubber shows the step it would go to while dragging; releasing it goes there
  // (its Go button submits the same form with JavaScript off).
  function scrubberHref(form) {
    var query = new URLSearchParams(new FormData(form));
    return form.getAttribute("action") + "?" + query.toString();
  }

  document.addEventListener("input", function (event) {
    var target = event.target;
    if (!target.matches || !target.matches("[data-scrubber]")) return;
    var output = target.form && target.form.querySelector("[data-scrubber-value]");
    if (output) output.textContent = "step " + target.value;
  });
  document.addEventListener("change", function (event) {
    var target = event.target;
    if (!target.matches || !target.matches("[data-scrubber]") || !target.form) return;
    if (!goToStep(scrubberHref(target.form))) target.form.submit();
  });
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("[data-stepper]")) return;
    if (goToStep(scrubberHref(form))) event.preventDefault();
  });

  // An in-flight run refreshes itself: ask for the step the address names now, not the
  // one the page was opened at.
  document.addEventListener("htmx:configRequest", function (event) {
    if (event.detail.elt === page()) {
      event.detail.path = window.location.pathname + window.location.search;
    }
  });

  // A field name opens its provenance in place: the state explorer (timeline, step,
  // panel, tree) as the page renders it for ?path=… (`&partial=explorer`), so the timeline marks the field's
  // writes and its step links keep the panel open. Each opening is a history entry of
  // its own, so Back closes the panel again. `shownSearch` is the query the explorer on
  // screen answers: a popstate that does not change it (a #fragment link fires one too)
  // leaves it alone.
  var shownSearch = window.location.search;

  function loadProvenance(search, push, fallback) {
    var root = page();
    if (!root || !document.getElementById("state-explorer")) return false;
    var asked = new URLSearchParams(search);
    asked.set("partial", "explorer");
    fetch(root.getAttribute("data-base") + "?" + asked.toString(), { credentials: "same-origin" })
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
