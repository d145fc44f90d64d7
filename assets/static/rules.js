// mailroom admin, Rules page: countdowns, the editor's live preview and
// inline validation, and a live refresh of the reclassify state. Progressive
// enhancement only: the page works without it.
(function () {
  "use strict";

  var fmt = new Intl.NumberFormat("en-US");

  // unit says a count with its unit in words: "1 second", "5 seconds".
  function unit(n, one) { return n + " " + one + (n === 1 ? "" : "s"); }

  // Countdowns: <time data-countdown="RFC 3339">.
  function countdown() {
    document.querySelectorAll("[data-countdown]").forEach(function (el) {
      var left = Math.round((Date.parse(el.getAttribute("data-countdown")) - Date.now()) / 1000);
      var text;
      if (left <= 0) text = "any moment now";
      else if (left < 60) text = "in " + unit(left, "second");
      else if (left < 3600) text = "in " + unit(Math.floor(left / 60), "minute") + (left % 60 ? " " + unit(left % 60, "second") : "");
      else text = "in " + unit(Math.floor(left / 3600), "hour") + (left % 3600 >= 60 ? " " + unit(Math.floor((left % 3600) / 60), "minute") : "");
      if (el.textContent !== text) el.textContent = text;
    });
  }
  countdown();
  setInterval(countdown, 1000);

  var form = document.querySelector("form[data-preview]");
  var dirty = false;
  // leaving is set once any form on the page is submitted (a save, a
  // delete): the browser is on its way to the answer, and a reload now
  // would abort it, so the change may be made while its answer and flash
  // are lost.
  var leaving = false;
  document.addEventListener("submit", function () { leaving = true; });
  window.addEventListener("pageshow", function () { leaving = false; }); // back from the cache
  if (form) {
    var csrf = form.querySelector('input[name="csrf"]').value;
    var box = form.querySelector("[data-preview-box]");
    var count = box.querySelector("[data-preview-count]");
    var sample = box.querySelector("[data-preview-sample]");
    var timer = null;
    var seq = 0;

    // Add a condition row (up to 20).
    var add = form.querySelector("[data-add-condition]");
    add.addEventListener("click", function () {
      var rows = form.querySelectorAll(".condition");
      if (rows.length >= 20) return;
      var row = rows[rows.length - 1].cloneNode(true);
      row.setAttribute("data-row", String(rows.length));
      row.querySelector('input[name="value"]').value = "";
      row.querySelector('input[name="value"]').removeAttribute("aria-invalid");
      var err = row.querySelector(".field-error");
      err.hidden = true;
      err.textContent = "";
      err.setAttribute("data-error-row", String(rows.length));
      add.parentNode.insertBefore(row, add);
    });

    function draft() {
      var rule = {
        label: form.querySelector('[name="label"]').value,
        match: form.querySelector('[name="match"]').value,
        conditions: [],
        actions: { markRead: form.querySelector('[name="markRead"]').checked, archive: form.querySelector('[name="archive"]').checked }
      };
      var rowOf = [];
      form.querySelectorAll(".condition").forEach(function (row, i) {
        var value = row.querySelector('[name="value"]').value;
        if (value.trim() === "") return;
        rule.conditions.push({ field: row.querySelector('[name="field"]').value, op: row.querySelector('[name="op"]').value, value: value });
        rowOf.push(i);
      });
      return { rule: rule, rowOf: rowOf };
    }

    function clearErrors() {
      form.querySelectorAll(".field-error").forEach(function (el) { el.hidden = true; el.textContent = ""; });
      form.querySelectorAll("[aria-invalid]").forEach(function (el) { el.removeAttribute("aria-invalid"); });
    }

    function showError(err, rowOf) {
      var m = /^conditions\[(\d+)\]/.exec(err.field || "");
      var target = null, input = null;
      if (m && rowOf[Number(m[1])] !== undefined) {
        var i = rowOf[Number(m[1])];
        target = form.querySelector('[data-error-row="' + i + '"]');
        input = form.querySelectorAll(".condition")[i].querySelector('[name="value"]');
      } else if (err.field) {
        target = form.querySelector('[data-error-for="' + err.field + '"]');
        input = form.querySelector('[data-field="' + err.field + '"]');
      }
      if (!target) return;
      target.textContent = err.message;
      target.hidden = false;
      if (input) input.setAttribute("aria-invalid", "true");
    }

    function preview() {
      var d = draft();
      if (d.rule.conditions.length === 0) {
        clearErrors();
        count.textContent = "Type a condition to see what it matches.";
        sample.textContent = "";
        return;
      }
      var mine = ++seq;
      fetch(form.getAttribute("data-preview"), {
        method: "POST", credentials: "same-origin",
        headers: { "Content-Type": "application/json", "X-CSRF-Token": csrf, Accept: "application/json" },
        body: JSON.stringify(d.rule)
      }).then(function (r) { return r.ok ? r.json() : null; }).then(function (p) {
        if (!p || mine !== seq) return;
        clearErrors();
        if (!p.valid) {
          showError(p.error, d.rowOf);
          count.textContent = "Fix the rule to see what it matches.";
          sample.textContent = "";
          return;
        }
        count.textContent = "Matches " + fmt.format(p.matchedThreads) + " of " + fmt.format(p.threads) + " threads" +
          (p.bodyFromSnippet ? " (body conditions are previewed against Gmail's snippet)" : "");
        sample.textContent = "";
        p.sample.forEach(function (m) {
          var li = document.createElement("li");
          var when = document.createElement("span");
          when.className = "muted small";
          when.textContent = m.date + " ";
          var from = document.createElement("b");
          from.textContent = m.from;
          li.appendChild(when);
          li.appendChild(from);
          li.appendChild(document.createTextNode(" — " + m.subject));
          sample.appendChild(li);
        });
      }).catch(function () {});
    }

    form.addEventListener("input", function () {
      dirty = true;
      clearTimeout(timer);
      timer = setTimeout(preview, 300);
    });
    form.addEventListener("change", function () {
      dirty = true;
      clearTimeout(timer);
      timer = setTimeout(preview, 100);
    });
    form.addEventListener("submit", function () { dirty = false; });
  }

  // Live reclassify state: numbers update in place; a new job or a fired
  // pending reclassify reloads the page (unless the editor has unsaved input).
  var root = document.querySelector("[data-rules-status]");
  if (!root) return;
  var url = root.getAttribute("data-rules-status");
  var hadPending = !!document.querySelector("[data-pending] [data-countdown]");
  var jobs = {};
  document.querySelectorAll("[data-job]").forEach(function (el) { jobs[el.getAttribute("data-job")] = el; });
  setInterval(function () {
    if (document.hidden) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (st) {
        if (!st) return;
        var reload = (!!st.pending) !== hadPending;
        (st.jobs || []).forEach(function (j) {
          var row = jobs[j.jobId];
          if (!row) { reload = true; return; }
          row.querySelectorAll("[data-field]").forEach(function (el) {
            var f = el.getAttribute("data-field");
            var v = typeof j[f] === "number" ? fmt.format(j[f]) : String(j[f]);
            if (el.textContent !== v) el.textContent = v;
          });
        });
        if (reload && !dirty && !leaving) window.location.reload();
      })
      .catch(function () {});
  }, 2000);
})();
