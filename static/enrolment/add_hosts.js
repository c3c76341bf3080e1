// The "Add hosts" page: the Copy button beside the install line. The Clipboard API needs a secure
// context (HTTPS or localhost); a portal on a LAN over plain HTTP falls back to selecting the line
// and the browser's copy command, and failing that leaves it selected for Ctrl+C.
(function () {
  "use strict";

  function selectText(element) {
    const range = document.createRange();
    range.selectNodeContents(element);
    const selection = window.getSelection();
    selection.removeAllRanges();
    selection.addRange(range);
  }

  function copyBySelection(element) {
    selectText(element);
    try {
      return document.execCommand("copy");
    } catch (error) {
      return false;
    }
  }

  function copy(element) {
    const text = element.textContent;
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text).then(
        () => true,
        () => copyBySelection(element),
      );
    }
    return Promise.resolve(copyBySelection(element));
  }

  document.querySelectorAll("button[data-copy]").forEach((button) => {
    const source = document.getElementById(button.dataset.copy);
    const state = document.getElementById("copy-state");
    if (!source) return;
    button.addEventListener("click", () => {
      copy(source).then((copied) => {
        if (!copied) selectText(source);
        if (state) {
          state.textContent = copied ? gettext("Copied.") : gettext("Selected: press Ctrl+C to copy.");
        }
      });
    });
  });
})();
