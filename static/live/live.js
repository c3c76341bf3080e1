/* Live pages: one WebSocket per feed with reconnect and backoff, and the live / reconnecting
   indicator. Used by gpu.js, fleet.js and tickets.js (plain scripts, no build step). */
(function () {
  "use strict";
  if (window.PortalLive) return;  // several partials on one page may each include this file
  // Texts in the page's language: gettext/interpolate come from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (format, args) { return format.replace(/%s/g, function () { return String(args.shift()); }); };

  const CLOSE_UNAUTHENTICATED = 4401;
  const CLOSE_FORBIDDEN = 4403;
  const CLOSE_NOT_FOUND = 4404;
  const FINAL = new Set([CLOSE_UNAUTHENTICATED, CLOSE_FORBIDDEN, CLOSE_NOT_FOUND]);

  function setIndicator(elements, state, text) {
    elements.forEach(function (el) {
      el.dataset.state = state;
      const label = el.querySelector(".live-text");
      if (label) label.textContent = text;
      el.title = text;
    });
  }

  /* LiveSocket(path, {onMessage, onOpen(reconnected), indicators}) keeps one WebSocket open.
     Backoff: 1 s doubling to 30 s, with jitter, reset after a connection lasts 10 s. */
  function LiveSocket(path, options) {
    this.path = path;
    this.onMessage = options.onMessage || function () {};
    this.onOpen = options.onOpen || function () {};
    this.indicators = options.indicators || Array.from(document.querySelectorAll(".live-indicator"));
    this.attempt = 0;
    this.openedOnce = false;
    this.stopped = false;
    this.connect();
    const self = this;
    // A laptop waking up or a tab coming back: try at once instead of waiting out the backoff.
    window.addEventListener("online", function () { self.retryNow(); });
    document.addEventListener("visibilitychange", function () {
      if (document.visibilityState === "visible") self.retryNow();
    });
  }

  LiveSocket.prototype.url = function () {
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + this.path;
  };

  LiveSocket.prototype.connect = function () {
    const self = this;
    clearTimeout(this.timer);
    if (this.stopped) return;
    setIndicator(this.indicators, "connecting", this.openedOnce ? gettext("Reconnecting…") : gettext("Connecting…"));
    let socket;
    try {
      socket = new WebSocket(this.url());
    } catch (error) {
      this.scheduleRetry();
      return;
    }
    this.socket = socket;
    socket.onopen = function () {
      self.openedAt = Date.now();
    };
    socket.onmessage = function (event) {
      let message;
      try { message = JSON.parse(event.data); } catch (error) { return; }
      if (message.kind === "hello") {
        const reconnected = self.openedOnce;
        self.openedOnce = true;
        setIndicator(self.indicators, "live", gettext("Live"));
        self.onOpen(reconnected);
        return;
      }
      self.onMessage(message);
    };
    socket.onclose = function (event) {
      if (self.socket !== socket) return;
      self.socket = null;
      if (FINAL.has(event.code)) {
        self.stopped = true;
        const text = event.code === CLOSE_UNAUTHENTICATED ? gettext("Offline: log in again")
          : event.code === CLOSE_FORBIDDEN ? gettext("Offline: no permission") : gettext("Offline: not found");
        setIndicator(self.indicators, "stopped", text);
        return;
      }
      if (self.openedAt && Date.now() - self.openedAt > 10000) self.attempt = 0;
      self.openedAt = null;
      self.scheduleRetry();
    };
  };

  LiveSocket.prototype.scheduleRetry = function () {
    const self = this;
    const delay = Math.min(30000, 1000 * Math.pow(2, this.attempt)) * (0.75 + Math.random() * 0.5);
    this.attempt += 1;
    this.retryAt = Date.now() + delay;
    const tick = function () {
      const left = Math.max(0, Math.round((self.retryAt - Date.now()) / 1000));
      setIndicator(self.indicators, "reconnecting", interpolate(gettext("Reconnecting in %s s"), [left]));
    };
    tick();
    clearInterval(this.countdown);
    this.countdown = setInterval(tick, 1000);
    this.timer = setTimeout(function () {
      clearInterval(self.countdown);
      self.connect();
    }, delay);
  };

  LiveSocket.prototype.retryNow = function () {
    if (this.stopped || this.socket) return;
    clearInterval(this.countdown);
    this.connect();
  };

  /* Points as sent by the server: {fields: [...], points: [[...], ...]} -> objects by name. */
  function pointObjects(message) {
    const fields = message.fields;
    return message.points.map(function (row) {
      const point = {};
      for (let i = 0; i < fields.length; i++) point[fields[i]] = row[i];
      return point;
    });
  }

  /* Plotly shows date axes as given; shift epoch milliseconds so that it shows local time. */
  function localMs(ms) {
    return ms - new Date(ms).getTimezoneOffset() * 60000;
  }

  function readJson(id) {
    const el = document.getElementById(id);
    return el ? JSON.parse(el.textContent) : null;
  }

  window.PortalLive = {
    LiveSocket: LiveSocket,
    pointObjects: pointObjects,
    localMs: localMs,
    readJson: readJson,
  };
})();
