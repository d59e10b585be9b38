// lmlite dashboard: refresh the panel every 2 s without reloading the page. The
// panel is HTML the server rendered with html/template (every value escaped), so it
// is inserted as is. Refreshing pauses while a form inside the panel has focus.
(function () {
  "use strict";
  var panel = document.getElementById("panel");
  if (!panel) {
    return;
  }
  function busy() {
    var a = document.activeElement;
    return a && a !== document.body && panel.contains(a) && a.form;
  }
  function refresh() {
    if (busy()) {
      return;
    }
    fetch("/dashboard/panel", { credentials: "same-origin", cache: "no-store" })
      .then(function (r) {
        if (r.status === 401) {
          window.location.assign("/dashboard");
          return null;
        }
        return r.ok ? r.text() : null;
      })
      .then(function (html) {
        if (html !== null && html !== undefined) {
          panel.innerHTML = html;
          document.body.setAttribute("data-refreshes", String(Number(document.body.getAttribute("data-refreshes") || 0) + 1));
        }
      })
      .catch(function () { /* the server is away: try again at the next tick */ });
  }
  window.setInterval(refresh, 2000);
})();
