// mailroom demo pages: redraw the part marked data-demo-live="MS" every MS
// milliseconds from a fresh copy of the same page, so rows and labels are
// seen arriving (the dead letters page uses it too, to follow a redriven
// task). Without JavaScript the pages simply do not refresh.
(function () {
  "use strict";
  var live = document.querySelector("[data-demo-live]");
  if (!live || !window.fetch || !window.DOMParser) return;
  var every = Math.max(1000, Number(live.getAttribute("data-demo-live")) || 3000);
  var busy = false;
  function tick() {
    if (busy || document.hidden) return;
    busy = true;
    fetch(window.location.href, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) {
        if (r.redirected || r.status === 401) { window.location.reload(); return null; }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (!html) return;
        var next = new DOMParser().parseFromString(html, "text/html").querySelector("[data-demo-live]");
        if (next && next.innerHTML !== live.innerHTML) live.innerHTML = next.innerHTML;
        // A part marked data-live-final has reached its end state.
        if (next && next.hasAttribute("data-live-final")) clearInterval(timer);
      })
      .catch(function () {})
      .finally(function () { busy = false; });
  }
  var timer = setInterval(tick, every);
})();
