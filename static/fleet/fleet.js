/* Fleet page: a host row's GPUs are fetched when it is opened (the page itself lists hosts only,
   so it stays small at thousands of GPUs). */
(function () {
  "use strict";
  // Texts in the page's language: gettext comes from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  document.querySelectorAll("#fleet-hosts details[data-gpus-url]").forEach(function (details) {
    details.addEventListener("toggle", function () {
      const row = details.closest("tr");
      let gpusRow = row.nextElementSibling;
      if (gpusRow && gpusRow.classList.contains("host-gpus")) {
        gpusRow.hidden = !details.open;
        return;
      }
      if (!details.open) return;
      gpusRow = document.createElement("tr");
      gpusRow.className = "host-gpus";
      const cell = document.createElement("td");
      cell.colSpan = row.children.length;
      cell.textContent = gettext("Loading…");
      gpusRow.appendChild(cell);
      row.after(gpusRow);
      fetch(details.dataset.gpusUrl, { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.text() : Promise.reject(r.status); })
        .then(function (html) { cell.innerHTML = html; })
        .catch(function () { cell.textContent = gettext("Could not load the GPUs; open the host's page."); });
    });
  });
})();
