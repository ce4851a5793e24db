// statetrail studio: small conveniences on top of pages that work without JavaScript.
// Listeners are delegated from the document, so content htmx swaps in needs no re-binding.
(function () {
  "use strict";

  // "/" focuses the page's filter box (the first element marked data-hotkey="/").
  document.addEventListener("keydown", function (event) {
    if (event.key !== "/" || event.ctrlKey || event.metaKey || event.altKey) return;
    var target = event.target;
    if (target instanceof HTMLElement && (target.isContentEditable || /^(INPUT|TEXTAREA|SELECT)$/.test(target.tagName))) return;
    var box = document.querySelector('[data-hotkey="/"]');
    if (box instanceof HTMLInputElement) {
      event.preventDefault();
      box.focus();
      box.select();
    }
  });

  // A form marked data-drop-empty leaves out the fields left blank, so the address htmx
  // pushes holds only what was set (`?where=x`, not `?where=x&since=&until=`).
  document.addEventListener("htmx:configRequest", function (event) {
    var form = event.detail.elt;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute("data-drop-empty")) return;
    var data = event.detail.formData;
    Array.from(data.keys()).forEach(function (name) {
      if (data.getAll(name).every(function (value) { return value === ""; })) data.delete(name);
    });
  });

  // Compare: say how many runs are ticked and allow submitting only with exactly two.
  function updateCompare(form) {
    var ticked = form.querySelectorAll('input[name="run"]:checked').length;
    var button = form.querySelector("[data-compare-button]");
    var status = form.querySelector("[data-compare-status]");
    if (button) button.disabled = ticked !== 2;
    if (status) {
      status.textContent = ticked === 2 ? "Two runs picked" :
        ticked < 2 ? "Tick " + (2 - ticked) + " more run" + (ticked === 1 ? "" : "s") + " to compare" :
        "Tick only two runs (" + ticked + " ticked)";
    }
  }

  function initCompare(root) {
    root.querySelectorAll("form.compare-form").forEach(updateCompare);
  }

  document.addEventListener("change", function (event) {
    var target = event.target;
    if (target instanceof HTMLInputElement && target.name === "run" && target.form) {
      updateCompare(target.form);
    }
  });
  // Copy buttons ([data-copy], hidden in the HTML): shown once this script runs, they put
  // the whole id on the clipboard. navigator.clipboard needs a secure context (https or
  // loopback); elsewhere a hidden textarea and execCommand("copy") do the same.
  function showCopyButtons(root) {
    root.querySelectorAll("button[data-copy]").forEach(function (button) { button.hidden = false; });
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) return navigator.clipboard.writeText(text);
    return new Promise(function (resolve, reject) {
      var area = document.createElement("textarea");
      area.value = text;
      area.setAttribute("readonly", "");
      area.className = "copy-buffer";
      document.body.appendChild(area);
      area.select();
      var copied = document.execCommand("copy");
      area.remove();
      if (copied) resolve(); else reject(new Error("copy refused"));
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("button[data-copy]");
    if (!button) return;
    var label = button.textContent;
    copyText(button.getAttribute("data-copy") || "").then(
      function () { button.textContent = "copied"; },
      function () { button.textContent = "copy failed"; }
    ).then(function () {
      window.setTimeout(function () { button.textContent = label; }, 1500);
    });
  });

  // Times. The server writes every time in UTC, labelled so (templates/_macros.html `time`).
  // Here they are shown in the viewer's time zone, with the UTC time in the tooltip, unless
  // the header's toggle chose UTC (remembered in localStorage). A MutationObserver formats
  // whatever arrives later too: htmx swaps, the execution page's own fetches and polls.
  var TIME_MODE_KEY = "statetrail.times";
  var ISO = /^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?Z$/;

  function timeMode() {
    try { return window.localStorage.getItem(TIME_MODE_KEY) === "utc" ? "utc" : "local"; }
    catch (error) { return "local"; }  // storage refused (a privacy setting): the default
  }

  function pad(number) { return (number < 10 ? "0" : "") + number; }

  function zoneName(moment) {
    var part = new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
      .formatToParts(moment).filter(function (p) { return p.type === "timeZoneName"; })[0];
    return part ? part.value : "local";
  }

  // "2026-12-02T01:47:04.123456Z" -> the same moment on the viewer's clock, to the millisecond.
  function localParts(iso) {
    var match = ISO.exec(iso);
    if (!match) return null;
    var moment = new Date(Date.parse(match[1] + "Z"));
    if (isNaN(moment.getTime())) return null;
    var date = moment.getFullYear() + "-" + pad(moment.getMonth() + 1) + "-" + pad(moment.getDate());
    var clock = pad(moment.getHours()) + ":" + pad(moment.getMinutes()) + ":" + pad(moment.getSeconds()) +
      (match[2] || "").slice(0, 4);
    return { date: date, clock: clock, zone: zoneName(moment) };
  }

  function utcParts(iso) {
    return { date: iso.slice(0, 10), clock: iso.slice(11, 23), zone: "UTC" };
  }

  function showTime(element, mode) {
    if (element.getAttribute("data-shown") === mode) return;
    var iso = element.getAttribute("datetime") || "";
    var shown = mode === "utc" ? utcParts(iso) : localParts(iso);
    var other = mode === "utc" ? localParts(iso) : utcParts(iso);
    if (!shown || !other) return;
    var date = document.createElement("span");
    date.className = "date";
    date.textContent = shown.date;
    var nodes = [date, document.createTextNode(" " + shown.clock)];
    if (element.hasAttribute("data-zone")) {
      var zone = document.createElement("span");
      zone.className = "tz";
      zone.textContent = shown.zone;
      nodes.push(document.createTextNode(" "), zone);
    }
    element.replaceChildren.apply(element, nodes);
    element.title = other.date + " " + other.clock + " " + other.zone + " (" + iso + ")";
    element.setAttribute("data-shown", mode);
  }

  function showTimes(root) {
    var mode = timeMode();
    var zone = mode === "utc" ? "UTC" : zoneName(new Date());
    if (root.querySelectorAll) {
      root.querySelectorAll("time[datetime]").forEach(function (t) { showTime(t, mode); });
      root.querySelectorAll("[data-zone-label]").forEach(function (label) {
        if (label.textContent !== zone) label.textContent = zone;
      });
    }
    document.querySelectorAll("button[data-time-toggle]").forEach(function (button) {
      button.hidden = false;
      // A viewer whose own zone is UTC sees the same times either way: name the mode too.
      var shown = mode === "local" && zone === "UTC" ? "local (UTC)" : zone;
      // Changed only when it differs: the observer below would see a change as new content.
      if (button.textContent !== "Times: " + shown) {
        var word = document.createElement("span");
        word.className = "time-toggle-word";  // left out on a phone's narrow header
        word.textContent = "Times: ";
        button.replaceChildren(word, document.createTextNode(shown));
      }
      button.setAttribute("aria-pressed", mode === "utc" ? "true" : "false");
      button.title = mode === "utc" ? "Show times in your time zone" : "Show times in UTC";
    });
  }

  document.addEventListener("click", function (event) {
    var button = event.target instanceof Element && event.target.closest("button[data-time-toggle]");
    if (!button) return;
    try { window.localStorage.setItem(TIME_MODE_KEY, timeMode() === "utc" ? "local" : "utc"); }
    catch (error) { return; }
    showTimes(document);
  });

  new MutationObserver(function (changes) {
    var arrived = changes.some(function (change) {
      return Array.prototype.some.call(change.addedNodes, function (node) {
        return node instanceof Element && !node.closest("time");
      });
    });
    if (arrived) showTimes(document);
  }).observe(document.documentElement, { childList: true, subtree: true });

  // Filter suggestions. The server fills datalist#where-paths with the paths the newest runs
  // have (studio/field_suggestions.py); a browser offers those with JavaScript off. Here the
  // options become completions of the clause being typed at the end of the box: a path, then
  // "path = value" with the values the runs ended with (asked of /api/fields/values). Every
  // option's text goes through option.value (a property, never markup): paths are telemetry.
  var MAX_OPTIONS = 40;
  var TOKENS = /"(?:[^"\\]|\\.)*"?|\s+|[()]|[^\s()"]+/g;
  var PATH = '(?:[^\\s()"]|"(?:[^"\\\\]|\\\\.)*")+';
  var VALUE_CLAUSE = new RegExp("^(" + PATH + ")(\\s*)(!=|<=|>=|=|<|>|contains)(\\s*)(.*)$");
  var AFTER_PATH = new RegExp("^(" + PATH + ")(\\s+)(\\w*)$");
  // A path being typed may end inside a quoted name: `metadata."extra/k`.
  var PATH_PREFIX = new RegExp("^(?:" + PATH + ')?(?:"(?:[^"\\\\]|\\\\.)*)?$');
  var valueCache = {};

  // Where the clause being typed starts: after the last "(", ")", and, or, not.
  function clauseStart(text) {
    var start = 0;
    var tokens = text.match(TOKENS) || [];
    var at = 0;
    tokens.forEach(function (token, i) {
      at += token.length;
      var word = token.toLowerCase();
      var spaced = i + 1 < tokens.length && /^\s/.test(tokens[i + 1]);
      if (token === "(" || token === ")" || (spaced && (word === "and" || word === "or" || word === "not"))) {
        start = at;
      }
    });
    return start;
  }

  function knownPaths(list) {
    if (!list.__paths) {
      list.__paths = Array.from(list.querySelectorAll("option[data-path]")).map(function (option) {
        return { path: option.getAttribute("data-path") || "", kinds: option.label };
      });
    }
    return list.__paths;
  }

  function workflowOf(input) {
    var field = input.form && input.form.querySelector('input[name="workflow"]');
    return field instanceof HTMLInputElement ? field.value : "";
  }

  function setOptions(list, options) {
    var fresh = document.createDocumentFragment();
    options.slice(0, MAX_OPTIONS).forEach(function (item) {
      var option = document.createElement("option");
      option.value = item.value;
      if (item.label) option.label = item.label;
      fresh.appendChild(option);
    });
    list.replaceChildren(fresh);
  }

  function valuesFor(list, input, path, then) {
    var key = workflowOf(input) + "\n" + path;
    if (valueCache[key]) return then(valueCache[key]);
    var url = list.getAttribute("data-values-url") + "?path=" + encodeURIComponent(path);
    if (workflowOf(input)) url += "&workflow=" + encodeURIComponent(workflowOf(input));
    fetch(url, { headers: { accept: "application/json" }, credentials: "same-origin" })
      .then(function (answer) { return answer.ok ? answer.json() : null; })
      .then(function (found) {
        if (!found) return;  // a bad path, or the store unavailable: no values, asked again later
        valueCache[key] = found.values || [];
        then(valueCache[key]);
      }, function () { return null; });
  }

  // The completions of `text` (the whole box, the caret at its end).
  function suggest(list, input) {
    var paths = knownPaths(list);
    var text = input.value;
    var start = clauseStart(text);
    var scope = /^(\s*(?:(?:ever|final)\s+)?)/i.exec(text.slice(start));
    var head = text.slice(0, start) + (scope ? scope[1] : "");
    var rest = text.slice(head.length);
    var known = function (path) { return paths.some(function (p) { return p.path === path; }); };
    var clause = VALUE_CLAUSE.exec(rest);
    if (clause && known(clause[1])) {
      var typed = clause[5];
      var lead = head + clause[1] + clause[2] + clause[3] + (clause[4] || (typed ? "" : " "));
      return valuesFor(list, input, clause[1], function (values) {
        if (input.value !== text) return;  // typed on meanwhile
        setOptions(list, values.filter(function (v) { return v.literal.indexOf(typed) === 0; })
          .map(function (v) { return { value: lead + v.literal, label: v.kind + ", " + v.runs + " runs" }; }));
      });
    }
    var after = AFTER_PATH.exec(rest);
    if (after && known(after[1])) {
      var base = head + after[1] + after[2];
      return valuesFor(list, input, after[1], function (values) {
        if (input.value !== text) return;
        var options = values.map(function (v) {
          return { value: base + "= " + v.literal, label: v.kind + ", " + v.runs + " runs" };
        });
        ["exists", "missing"].forEach(function (word) { options.push({ value: base + word }); });
        setOptions(list, options.filter(function (o) { return o.value.indexOf(text) === 0; }));
      });
    }
    if (!PATH_PREFIX.test(rest)) return setOptions(list, []);
    setOptions(list, paths.filter(function (p) { return p.path.indexOf(rest) === 0; })
      .map(function (p) { return { value: head + p.path, label: p.kinds }; }));
  }

  document.addEventListener("input", function (event) {
    var input = event.target;
    if (!(input instanceof HTMLInputElement) || !input.hasAttribute("data-suggest")) return;
    var list = input.list;
    if (!list || input.selectionStart !== input.value.length) return;
    suggest(list, input);
  });

  // The way back from a run to the list, per tab. The server remembers the last list read
  // in a cookie (studio/list_return.py), which every tab shares: with two tabs filtering
  // differently, a run's breadcrumb led back to whichever tab listed last. Each tab's own
  // list is kept in its sessionStorage too and takes the cookie's place; only the query is
  // taken from it, so the breadcrumb still names a page of the list and nothing else.
  var LIST_KEY = "statetrail.list";
  var MAX_LIST_QUERY = 2000;  // the server's MAX_QUERY_CHARS

  function storage() {
    try { return window.sessionStorage; } catch (refused) { return null; }  // storage blocked
  }

  function rememberList() {
    var store = storage();
    // Only the list page, and only a list that rendered: a bad filter keeps the last good one.
    if (!store || !document.getElementById("results") || document.getElementById("filter-error")) return;
    var params = new URLSearchParams(window.location.search);
    var kept = new URLSearchParams();
    params.forEach(function (value, key) { if (value !== "") kept.append(key, value); });
    var query = kept.toString();
    store.setItem(LIST_KEY, query.length > MAX_LIST_QUERY ? "" : query);
  }

  function restoreListReturn() {
    var store = storage();
    var link = document.querySelector("a[data-list-return]");
    var query = store && store.getItem(LIST_KEY);
    if (!link || query === null) return;  // no list read in this tab: the cookie's stands
    var params = new URLSearchParams(query);
    var label = [];
    params.forEach(function (value, key) { label.push(key + ": " + value); });
    var path = (link.getAttribute("href") || "").split("?")[0];
    var search = params.toString();
    link.setAttribute("href", search ? path + "?" + search : path);
    if (label.length) link.title = "Back to the list as you left it: " + label.join("; ");
    else link.removeAttribute("title");
  }

  // Facets sit above the results on a narrow screen: there they start folded, and stay
  // as the reader left them across swaps. Open in the HTML, they show without JavaScript.
  var NARROW = window.matchMedia("(max-width: 900px)");
  var facetsOpened = false;

  function foldFacets() {
    var fold = document.querySelector("details[data-facets]");
    if (fold) fold.open = !NARROW.matches || facetsOpened;
  }

  document.addEventListener("click", function (event) {
    var summary = event.target instanceof Element && event.target.closest("details[data-facets] > summary");
    if (summary && summary.parentElement instanceof HTMLDetailsElement) {
      facetsOpened = !summary.parentElement.open;
    }
  });
  NARROW.addEventListener("change", foldFacets);

  // Focus survives a swap. The control that had it (a facet, a sort header, a page link)
  // is found again in the new content by its id or data-focus-key; one that is gone hands
  // focus to the swapped region's own target (the results), never back to the page's top.
  var focusBefore = null;

  function focusKey(element) {
    if (!(element instanceof HTMLElement) || element === document.body) return null;
    var key = element.getAttribute("data-focus-key");
    if (key) return { name: "data-focus-key", value: key };
    return element.id ? { name: "id", value: element.id } : null;
  }

  function findByKey(key) {
    return Array.prototype.find.call(document.querySelectorAll("[" + key.name + "]"), function (element) {
      return element.getAttribute(key.name) === key.value;
    });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var active = document.activeElement;
    var target = event.detail.target;
    // Only focus the swap takes away: inside what it replaces, or the control that asked.
    if (!(active instanceof HTMLElement) || active === document.body) { focusBefore = null; return; }
    if (!(target instanceof Element && target.contains(active)) && active !== event.detail.requestConfig.elt) {
      focusBefore = null;
      return;
    }
    focusBefore = { key: focusKey(active), target: target };
  });

  document.addEventListener("htmx:afterSettle", function () {
    var before = focusBefore;
    focusBefore = null;
    if (!before) return;
    var active = document.activeElement;
    if (active && active !== document.body && active.isConnected) return;
    var again = before.key && findByKey(before.key);
    var region = before.target instanceof HTMLElement && before.target.isConnected ?
      before.target.querySelector("[tabindex='-1']") || before.target : null;
    var next = again || region;
    if (!(next instanceof HTMLElement)) return;
    if (!again && !next.hasAttribute("tabindex")) next.setAttribute("tabindex", "-1");
    next.focus({ preventScroll: true });
  });

  document.addEventListener("DOMContentLoaded", function () {
    foldFacets();
    showTimes(document);
    initCompare(document);
    showCopyButtons(document);
    rememberList();
    restoreListReturn();
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target instanceof Element) {
      foldFacets();
      initCompare(event.target);
      showCopyButtons(event.target);
    }
  });
  // htmx pushes the list's new address before it swaps the results in.
  document.addEventListener("htmx:afterSettle", rememberList);
  document.addEventListener("htmx:historyRestore", rememberList);
})();
