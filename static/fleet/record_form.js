// The record form's kind switch reloads the form for the chosen kind as soon as it changes
// (without script, the <noscript> button does it).
(function () {
  "use strict";
  const select = document.getElementById("kind-switch");
  if (select) select.addEventListener("change", function () { select.form.submit(); });
})();
