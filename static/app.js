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

  document.addEventListener("DOMContentLoaded", function () {
    initCompare(document);
    showCopyButtons(document);
  });
  document.addEventListener("htmx:afterSwap", function (event) {
    if (event.target instanceof Element) {
      initCompare(event.target);
      showCopyButtons(event.target);
    }
  });
})();
