// mailroom admin: progressive enhancement only; every page works without it.
(function () {
  "use strict";

  var fmt = new Intl.NumberFormat("en-US");

  // Forms with data-confirm ask first.
  document.addEventListener("submit", function (ev) {
    var msg = ev.target.getAttribute("data-confirm");
    if (msg && !window.confirm(msg)) ev.preventDefault();
  });

  // Filters submit on change.
  document.querySelectorAll("form[data-autosubmit]").forEach(function (form) {
    form.querySelectorAll(".js-hide").forEach(function (el) { el.hidden = true; });
    form.addEventListener("change", function () { form.submit(); });
  });

  // Copy buttons: data-copy="#selector".
  document.querySelectorAll("[data-copy]").forEach(function (btn) {
    btn.addEventListener("click", function () {
      var el = document.querySelector(btn.getAttribute("data-copy"));
      if (!el) return;
      var text = el.value !== undefined ? el.value : el.textContent;
      var done = function () {
        var was = btn.textContent;
        btn.textContent = "Copied";
        setTimeout(function () { btn.textContent = was; }, 1500);
      };
      if (navigator.clipboard && window.isSecureContext) {
        navigator.clipboard.writeText(text).then(done);
      } else if (el.select) {
        el.select();
        document.execCommand("copy");
        done();
      }
    });
  });

  // Live overview: refresh the counts and charts every 2.5 s.
  var root = document.querySelector("[data-refresh]");
  if (!root) return;
  var url = root.getAttribute("data-refresh");
  var live = document.querySelector("[data-live]");
  var stamp = document.querySelector("[data-updated]");
  var last = Date.now();
  if (live) live.hidden = false;

  function setText(el, v) {
    var s = typeof v === "number" ? fmt.format(v) : String(v);
    if (el.textContent !== s) el.textContent = s;
  }

  function apply(data) {
    Object.keys(data.totals || {}).forEach(function (k) {
      var el = document.querySelector('[data-total="' + k + '"]');
      if (el) setText(el, data.totals[k]);
    });
    (data.queues || []).forEach(function (q) {
      document.querySelectorAll('[data-queue="' + CSS.escape(q.name) + '"]').forEach(function (scope) {
        scope.querySelectorAll("[data-field]").forEach(function (el) {
          var f = el.getAttribute("data-field");
          if (!(f in q)) return;
          if (f === "status") {
            el.className = "badge badge-" + q.statusClass;
          } else if (typeof q[f] === "number") {
            el.classList.toggle("zero", q[f] === 0);
            if (f === "deadLettered") el.classList.toggle("dead-count", q[f] > 0);
          }
          setText(el, q[f]);
        });
        var spark = scope.querySelector("[data-spark]");
        if (spark && q.spark) spark.innerHTML = q.spark;
      });
    });
    last = Date.now();
    root.setAttribute("data-refreshes", String(Number(root.getAttribute("data-refreshes") || 0) + 1));
  }

  function tick() {
    if (document.hidden) return;
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) {
        if (r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.json() : null;
      })
      .then(function (data) { if (data) apply(data); })
      .catch(function () {})
      .finally(function () {
        var age = Math.round((Date.now() - last) / 1000);
        if (stamp) stamp.textContent = age < 3 ? "just now" : age + (age === 1 ? " second ago" : " seconds ago");
        if (live) live.classList.toggle("stale", age > 10);
      });
  }
  setInterval(tick, 2500);
})();
