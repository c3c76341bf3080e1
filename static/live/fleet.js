/* Fleet page: a live heatmap of every GPU's temperature grouped by host, and the status tiles
   (hot, throttling, silent). The starting state comes from the URL in data-state-url (rows in
   the server's "fields" order; "hot_c" and "silent_after_s" are the rules' limits in force for
   each GPU's host, silent_after_s null where the agent_silent rule does not watch the GPU), then
   points from /ws/live/fleet/; click a cell to open that GPU.
   Silent is judged as the agent_silent rule judges it: nothing heard for longer than the limit,
   "heard" being the newest reading's time or its arrival at the server, whichever is later (the
   state's "heard"; a point pushed over the socket has just arrived). An agent delivering its
   spool after an outage sends old readings, and is not silent. */
(function () {
  "use strict";
  const Live = window.PortalLive;
  // Texts in the page's language: gettext/interpolate come from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (format, args) { return format.replace(/%s/g, function () { return String(args.shift()); }); };
  const ngettext = window.ngettext || function (one, many, n) { return n === 1 ? one : many; };
  const el = document.getElementById("fleet-heatmap");
  if (!el || !window.Plotly) return;
  const stateUrl = el.dataset.stateUrl;

  function loadState() {
    return fetch(stateUrl, { credentials: "same-origin" }).then(function (r) { return r.ok ? r.json() : null; });
  }

  function gpuObjects(state) {
    return state.gpus.map(function (row) {
      const gpu = {};
      state.fields.forEach(function (name, i) { gpu[name] = row[i]; });
      gpu.url = state.gpu_url.replace("UUID", gpu.uuid);
      return gpu;
    });
  }

  loadState().then(function (state) { if (state) start(state); }).catch(function () {});

  function start(fleet) {
  fleet.gpus = gpuObjects(fleet);
  // Which of the state's fields (and of a live point's) is the temperature, the GPU utilisation
  // and the clock event reasons: the metric registry's names, served in the state's "metrics".
  const TEMP = fleet.metrics.temperature, UTIL = fleet.metrics.utilization, REASONS = fleet.metrics.reasons;
  // Server and browser clocks may differ; judge "silent" on the server's clock.
  const skew = Date.now() - fleet.now;
  const byId = new Map(fleet.gpus.map(function (gpu) { return [gpu.id, gpu]; }));
  const hosts = [];
  const hostRow = new Map();
  fleet.gpus.forEach(function (gpu) {
    if (!hostRow.has(gpu.host)) { hostRow.set(gpu.host, hosts.length); hosts.push(gpu.host); }
  });
  const columns = Math.max(1, 1 + Math.max.apply(null, fleet.gpus.map(function (gpu) { return gpu.index; }).concat([0])));
  let queued = false;

  function serverNow() {
    return Date.now() - skew;
  }

  function isSilent(gpu) {
    // A GPU that never reported has no agent yet: "no data", not "silent".
    return gpu.heard != null && gpu.silent_after_s != null && serverNow() - gpu.heard > gpu.silent_after_s * 1000;
  }

  function grid() {
    const z = hosts.map(function () { return new Array(columns).fill(null); });
    const text = hosts.map(function () { return new Array(columns).fill(""); });
    const custom = hosts.map(function () { return new Array(columns).fill(null); });
    // A narrow cell (a phone, many GPUs a host) writes a dash for "no data" and "silent" instead of
    // words that would run into the next cell; the grey says it and hovering names it.
    const narrow = (el.clientWidth - 180) / columns < 62;
    fleet.gpus.forEach(function (gpu) {
      const row = hostRow.get(gpu.host);
      const silent = isSilent(gpu);
      z[row][gpu.index] = silent ? null : gpu[TEMP];
      const full = gpu.ts == null ? gettext("no data") : silent ? gettext("silent") : (gpu[TEMP] == null ? "?" : gpu[TEMP] + "°");
      text[row][gpu.index] = narrow && (gpu.ts == null || silent) ? "–" : full;
      custom[row][gpu.index] = [gpu.url, full];
    });
    return { z: z, text: text, custom: custom };
  }

  function render() {
    queued = false;
    const cells = grid();
    const trace = {
      type: "heatmap", z: cells.z, text: cells.text, customdata: cells.custom,
      x: Array.from({ length: columns }, function (_, i) { return "GPU " + i; }), y: hosts,
      texttemplate: "%{text}", textfont: { size: 12 },
      hovertemplate: "%{y} · %{x}<br>%{customdata[1]}<extra></extra>",
      colorscale: [[0, "#3b82c4"], [0.45, "#9fd3a8"], [0.7, "#f6d55c"], [0.85, "#f28e2b"], [1, "#c62828"]],
      zmin: 25, zmax: 95, xgap: 3, ygap: 3, hoverongaps: false,
      colorbar: { title: { text: "°C" }, thickness: 12, len: 1 },
    };
    const layout = {
      height: Math.max(170, 70 + hosts.length * (hosts.length > 40 ? 16 : 34)),
      margin: { l: 110, r: 10, t: 8, b: 28 },
      xaxis: { side: "bottom", fixedrange: true },
      yaxis: { autorange: "reversed", fixedrange: true, automargin: true },
      plot_bgcolor: "#eef1f4", paper_bgcolor: "#fff",
      font: { family: "system-ui, sans-serif", size: 12, color: "#1d2430" },
      uirevision: "fleet",
    };
    window.Plotly.react(el, [trace], layout, { displayModeBar: false, responsive: true });
    renderTiles();
  }

  /* "last seen 12 min ago": a silent GPU's last values are history, so the tile names their age, not them. */
  function lastSeen(gpu) {
    const minutes = Math.max(0, Math.round((serverNow() - gpu.heard) / 60000));
    const ago = minutes < 90 ? interpolate(gettext("%s min ago"), [minutes])
      : minutes < 48 * 60 ? interpolate(gettext("%s h ago"), [Math.round(minutes / 60)])
      : interpolate(gettext("%s d ago"), [Math.round(minutes / 1440)]);
    return interpolate(gettext("last seen %s"), [ago]);
  }

  function tile(name, gpus, bad) {
    const box = document.querySelector('[data-tile="' + name + '"]');
    if (!box) return;
    box.querySelector("[data-count]").textContent = String(gpus.length);
    box.classList.toggle(bad, gpus.length > 0);
    box.classList.toggle("is-ok", gpus.length === 0);
    const list = box.querySelector("[data-list]");
    list.replaceChildren();
    gpus.slice(0, 5).forEach(function (gpu) {
      const item = document.createElement("li");
      const link = document.createElement("a");
      link.href = gpu.url;
      link.textContent = gpu.host + " #" + gpu.index + (name === "silent" ? " · " + lastSeen(gpu)
        : gpu[TEMP] != null ? " · " + gpu[TEMP] + " °C" : "");
      item.appendChild(link);
      list.appendChild(item);
    });
    if (gpus.length > 5) {
      const more = document.createElement("li");
      more.className = "muted";
      more.textContent = interpolate(ngettext("and %s more", "and %s more", gpus.length - 5), [gpus.length - 5]);
      list.appendChild(more);
    }
  }

  function renderTiles() {
    const live = fleet.gpus.filter(function (gpu) { return !isSilent(gpu); });
    tile("hot", live.filter(function (gpu) { return gpu[TEMP] != null && gpu.hot_c != null && gpu[TEMP] >= gpu.hot_c; })
      .sort(function (a, b) { return b[TEMP] - a[TEMP]; }), "is-bad");
    tile("throttling", live.filter(function (gpu) { return gpu[REASONS] != null && (gpu[REASONS] & fleet.throttling_mask) !== 0; }), "is-warn");
    tile("silent", fleet.gpus.filter(isSilent), "is-warn");
  }

  function scheduleRender() {
    if (queued) return;
    queued = true;
    window.requestAnimationFrame(render);
  }

  function apply(points) {
    const arrived = serverNow();
    points.forEach(function (point) {
      const gpu = byId.get(point.gpu_id);
      // Older than what the GPU last sent: the server keeps its latest (and when it heard it) too.
      if (!gpu || (gpu.ts != null && point.ts < gpu.ts)) return;
      gpu.ts = point.ts;
      gpu.heard = Math.max(point.ts, arrived);
      [TEMP, UTIL, REASONS].forEach(function (name) { gpu[name] = point[name]; });
    });
    scheduleRender();
  }

  render();
  window.addEventListener("resize", scheduleRender);  // a cell's words or dash follow its width
  el.on("plotly_click", function (event) {
    const url = event.points && event.points[0] && event.points[0].customdata && event.points[0].customdata[0];
    if (url) window.location.href = url;
  });
  new Live.LiveSocket(fleet.ws, {
    indicators: [document.querySelector("#live-fleet .live-indicator")],
    onMessage: function (message) { if (message.kind === "points") apply(Live.pointObjects(message)); },
    onOpen: function (reconnected) {
      // The heatmap shows each GPU's newest value only, so after a gap it is enough to refresh
      // from the state URL again.
      if (!reconnected) return;
      loadState().then(function (state) {
          if (!state) return;
          gpuObjects(state).forEach(function (fresh) {
            const gpu = byId.get(fresh.id);
            if (!gpu) return;
            gpu.silent_after_s = fresh.silent_after_s;  // the limits in force now
            gpu.hot_c = fresh.hot_c;
            if (fresh.ts == null) return;
            if (gpu.ts == null || fresh.ts > gpu.ts) {
              gpu.ts = fresh.ts;
              gpu[TEMP] = fresh[TEMP];
            }
            if (gpu.heard == null || fresh.heard > gpu.heard) gpu.heard = fresh.heard;
          });
          scheduleRender();
        }).catch(function () {});
    },
  });
  setInterval(scheduleRender, 5000);  // silence is a matter of time passing
  }
})();
