/* Ticket feed: opened / acknowledged / resolved tickets as they happen, from /ws/live/tickets/.
   Also keeps the fleet page's "open tickets" tile current when events carry open_counts. */
(function () {
  "use strict";
  const Live = window.PortalLive;
  // Texts in the page's language: gettext/interpolate come from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (format, args) { return format.replace(/%s/g, function () { return String(args.shift()); }); };
  // The feed's words for the events and severities (the messages carry them in English).
  const EVENTS = { opened: gettext("opened"), acknowledged: gettext("acknowledged"), resolved: gettext("resolved"),
    reopened: gettext("reopened"), escalated: gettext("escalated"), changed: gettext("changed") };
  const SEVERITIES = { info: pgettext("severity", "info"), warning: pgettext("severity", "warning"),
    critical: pgettext("severity", "critical") };
  function pgettext(context, text) { return window.pgettext ? window.pgettext(context, text) : text; }
  const list = document.getElementById("ticket-feed");
  if (!list) return;
  const MAX_ITEMS = 50;

  /* A time as the rest of the page prints it: the language's SHORT_DATETIME_FORMAT (from /jsi18n/)
     in the portal's time zone (the feed's data-time-zone), e.g. 2026-12-07 12:29. */
  const FORMAT = window.get_format ? window.get_format("SHORT_DATETIME_FORMAT") : "Y-m-d H:i";
  const PARTS = new Intl.DateTimeFormat("en-GB", { timeZone: list.dataset.timeZone || undefined, hourCycle: "h23",
    year: "numeric", month: "numeric", day: "numeric", hour: "numeric", minute: "numeric", second: "numeric" });
  function timeText(at) {
    const when = at ? new Date(at) : new Date();
    if (isNaN(when)) return "";
    const parts = {};
    PARTS.formatToParts(when).forEach(function (part) { parts[part.type] = part.value; });
    const two = function (value) { return String(Number(value)).padStart(2, "0"); };
    const codes = { Y: parts.year, m: two(parts.month), n: String(Number(parts.month)), d: two(parts.day),
      j: String(Number(parts.day)), H: two(parts.hour), G: String(Number(parts.hour)), i: two(parts.minute),
      s: two(parts.second) };
    let text = "";
    for (let i = 0; i < FORMAT.length; i++) {
      const char = FORMAT[i];
      if (char === "\\") { text += FORMAT[++i] || ""; continue; }
      text += char in codes ? codes[char] : char;
    }
    return text;
  }

  function add(event) {
    const empty = list.querySelector("[data-empty]");
    if (empty) empty.remove();
    const item = document.createElement("li");
    item.className = "fresh severity-" + (event.severity || "info");
    item.dataset.ticketId = String(event.ticket_id);

    const when = document.createElement("span");
    when.className = "when";
    const stamp = document.createElement("time");
    if (event.at) stamp.dateTime = String(event.at);
    stamp.textContent = timeText(event.at);
    when.appendChild(stamp);

    const badge = document.createElement("span");
    const kind = event.event || "changed";
    const pill = document.createElement("span");
    pill.className = "badge event-" + kind;
    pill.textContent = EVENTS[kind] || kind;
    badge.appendChild(pill);

    const what = document.createElement("span");
    const title = event.url ? document.createElement("a") : document.createElement("strong");
    if (event.url) title.href = event.url;
    const titles = event.titles || {};
    title.textContent = titles[document.documentElement.lang] || event.title || interpolate(gettext("Ticket #%s"), [event.ticket_id]);
    what.appendChild(title);
    const subject = [SEVERITIES[event.severity] || event.severity, event.hostname, event.gpu_label,
      event.by ? interpolate(gettext("by %s"), [event.by]) : ""]
      .filter(Boolean).join(" · ");
    if (subject) {
      const meta = document.createElement("span");
      meta.className = "muted";
      meta.textContent = " " + subject;
      what.appendChild(meta);
    }
    item.append(when, badge, what);
    list.insertBefore(item, list.firstChild);
    while (list.children.length > MAX_ITEMS) list.removeChild(list.lastChild);

    if (event.open_counts) {
      Object.keys(event.open_counts).forEach(function (severity) {
        const cell = document.querySelector('[data-ticket-count="' + severity + '"]');
        if (cell) cell.textContent = String(event.open_counts[severity]);
      });
      document.querySelectorAll("[data-ticket-count]").forEach(function (cell) {
        if (!(cell.dataset.ticketCount in event.open_counts)) cell.textContent = "0";
      });
    }
  }

  new Live.LiveSocket(list.dataset.ws, {
    indicators: [document.querySelector("#live-tickets .live-indicator")],
    onMessage: function (message) {
      if (message.kind === "tickets") message.events.forEach(add);
    },
  });
})();
