/* One GPU's live charts: history from the readings API at the range's resolution, live points
   from /ws/live/gpu/<uuid>/, maintenance records as markers, zoom kept across updates. */
(function () {
  "use strict";
  const Live = window.PortalLive;
  // Texts in the page's language: gettext/interpolate come from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  const interpolate = window.interpolate || function (format, args) { return format.replace(/%s/g, function () { return String(args.shift()); }); };
  const cfg = Live.readJson("live-gpu-config");
  if (!cfg || !window.Plotly) return;

  const MINUTE = 60000, HOUR = 60 * MINUTE, DAY = 24 * HOUR;
  const RANGES = {
    live: { span: 15 * MINUTE, resolution: "raw", label: "Live 15 min" },
    "24h": { span: DAY, resolution: "auto", label: "24 h" },
    "7d": { span: 7 * DAY, resolution: "auto", label: "7 d" },
    "30d": { span: 30 * DAY, resolution: "auto", label: "30 d" },
  };
  // The metrics, from the portal's registry (portal/telemetry/metrics.py, served in the page's config):
  // those sent in live points, and those rolled up for the longer ranges.
  const REGISTRY = cfg.metrics || [];
  const RAW_METRICS = REGISTRY.filter(function (metric) { return metric.live; }).map(function (metric) { return metric.name; });
  const ROLLUP_METRICS = REGISTRY.filter(function (metric) { return metric.rollup === "min_max_mean"; })
    .map(function (metric) { return metric.name; });
  // The clock event reasons (a bit mask in live points, names in the readings API): a row's
  // `throttled`, drawn as markers on its chart's first line.
  const REASONS = (REGISTRY.find(function (metric) { return metric.type === "reasons"; }) || {}).name;
  // A setting rather than a measurement (live, never rolled up: a power limit): a dashed step line,
  // drawn only while readings carry it. Rows that carry one come from raw readings, not rollups.
  function isSetting(metric) { return metric.rollup == null && metric.type !== "reasons"; }
  const SETTINGS = REGISTRY.filter(function (metric) { return metric.live && isSetting(metric); })
    .map(function (metric) { return metric.name; });
  // The charts: one per registry group, in the page's chart-<group> box; each line is a metric of
  // the group (table order), named by its label and unit. Here only what a chart adds of its own.
  const GROUPS = {};
  REGISTRY.forEach(function (metric) {
    if (!metric.group || !metric.live) return;
    const group = GROUPS[metric.group] || (GROUPS[metric.group] = { lines: [], reasons: false });
    if (metric.type === "reasons") group.reasons = true;
    else group.lines.push(metric);
  });
  const RESOLUTION_NAMES = { raw: gettext("raw"), "1m": gettext("1m"), "1h": gettext("1h") };
  const THROTTLE_NAMES = ["hw_thermal", "sw_thermal", "hw_slowdown", "hw_power_brake"];
  // Each chart's lines' colours, in the order of its lines.
  const COLORS = { temperature: ["#d1495b"], power: ["#1f6feb", "#9a6700"], utilization: ["#1a7f37", "#8250df"],
    fan: ["#0a7ea4"], clocks: ["#bf3989", "#6e7781"], memory: ["#8250df"] };
  const OTHER_COLORS = ["#57606a", "#953800", "#1b7c83", "#6e40c9"];
  const MARKER_COLORS = { cleaning: "#1a7f37", thermal_paste: "#1a7f37", fan_replacement: "#0a7ea4",
    repair: "#cf222e" };

  const state = { range: "live", rows: [], latest: null, resolution: "raw", uirevision: "live", request: 0,
    renderQueued: false, view: null, overlays: {} };
  // A gap longer than this (or three typical steps) between two points is drawn as a gap, never
  // bridged by a line: seeded history then live readings, an agent's outage.
  const GAP_MIN_MS = { raw: 45 * 1000, "1m": 3 * MINUTE, "1h": 3 * HOUR };
  const OVERLAY_COLORS = ["#6e40c9", "#e36209", "#0550ae", "#116329", "#bf3989", "#953800", "#1b7c83", "#57606a"];

  // Server and browser clocks may differ: silence is judged on the server's clock, as the fleet page does.
  const clockSkew = cfg.now != null ? cfg.now - Date.now() : 0;
  function serverNow() { return Date.now() + clockSkew; }

  function noteLatest(rows, arrived) {
    const last = rows.length ? rows[rows.length - 1] : null;
    const raw = last && SETTINGS.every(function (name) { return last[name] !== undefined; });
    if (raw && (!state.latest || last.t >= state.latest.t)) state.latest = last;
    if (last) state.heard = Math.max(state.heard || 0, last.t, arrived || 0);
  }
  if (cfg.latest) {
    state.latest = rowFromPoint(cfg.latest);
    state.heard = cfg.latest.heard;
  }
  const root = document.getElementById("live-gpu");
  const note = document.getElementById("live-range-note");

  function rowFromPoint(point) {
    const row = { t: point.ts };
    RAW_METRICS.forEach(function (name) { if (name !== REASONS) row[name] = point[name]; });
    row.throttled = point[REASONS] != null && (point[REASONS] & cfg.throttling_mask) !== 0;
    return row;
  }

  /* Merge rows into state.rows, keeping them sorted by time with one row per timestamp. */
  function merge(rows) {
    if (!rows.length) return;
    const all = state.rows;
    const last = all.length ? all[all.length - 1].t : -Infinity;
    let ordered = true;
    for (const row of rows) {
      if (row.t <= last) ordered = false;
      all.push(row);
    }
    if (!ordered) {
      all.sort(function (a, b) { return a.t - b.t; });
      const unique = [];
      for (const row of all) {
        if (unique.length && unique[unique.length - 1].t === row.t) unique[unique.length - 1] = row;
        else unique.push(row);
      }
      state.rows = unique;
    }
    if (state.range === "live") {
      const cutoff = Date.now() - RANGES.live.span - MINUTE;
      let drop = 0;
      while (drop < state.rows.length && state.rows[drop].t < cutoff) drop++;
      if (drop) state.rows.splice(0, drop);
    }
  }

  function fetchSeries(from, to, range, url) {
    const resolution = range === "view" ? "auto" : RANGES[range].resolution;
    const metrics = resolution === "raw" ? RAW_METRICS : ROLLUP_METRICS;
    const params = new URLSearchParams({
      from: new Date(from).toISOString(), to: new Date(to).toISOString(),
      metrics: metrics.join(","), resolution: resolution,
    });
    return fetch((url || cfg.readings_url) + "?" + params, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("readings API answered " + response.status);
        return response.json();
      })
      .then(function (body) {
        const rows = body.ts.map(function (ts, i) {
          const row = { t: Date.parse(ts) };
          for (const metric of metrics) {
            if (!(metric in body.values)) continue;
            if (metric === REASONS) {
              const names = body.values[REASONS][i] || [];
              row.throttled = names.some(function (name) { return THROTTLE_NAMES.indexOf(name) >= 0; });
            } else {
              row[metric] = body.values[metric][i];
            }
          }
          return row;
        });
        return { resolution: body.resolution, rows: rows };
      });
  }

  /* The page's address keeps what is shown: ?range=24h, or ?from=…&to=… after a drag-zoom, and
     ?gpus=<uuid>,… for the GPUs drawn beside this one; reloading or sharing it shows the same. */
  function saveUrl() {
    const params = new URLSearchParams(window.location.search);
    ["range", "from", "to", "gpus"].forEach(function (key) { params.delete(key); });
    if (state.view) {
      params.set("from", new Date(state.view[0]).toISOString());
      params.set("to", new Date(state.view[1]).toISOString());
    } else if (state.range !== "live") {
      params.set("range", state.range);
    }
    const overlays = Object.keys(state.overlays);
    if (overlays.length) params.set("gpus", overlays.join(","));
    const query = params.toString().replace(/%2C/g, ",").replace(/%3A/g, ":");
    window.history.replaceState(null, "", window.location.pathname + (query ? "?" + query : "") + window.location.hash);
  }

  function window_() {
    const now = Date.now();
    return state.view ? [state.view[0], state.view[1]] : [now - RANGES[state.range].span, now + MINUTE];
  }

  function load(range, view) {
    const request = ++state.request;
    state.range = view ? "view" : range;
    state.view = view || null;
    state.rows = [];
    state.uirevision = state.range + ":" + request;  // a new range resets the zoom, live updates keep it
    root.querySelectorAll("[data-range]").forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.dataset.range === state.range));
    });
    saveUrl();
    note.textContent = gettext("Loading…");
    render();
    const span = window_();
    loadOverlays(request);
    fetchSeries(span[0], span[1], state.range)
      .then(function (series) {
        if (request !== state.request) return;
        state.resolution = series.resolution;
        if (state.range === "live") noteLatest(series.rows);
        merge(series.rows);
        note.textContent = state.range === "live"
          ? gettext("Live, raw readings")
          : state.view
            ? interpolate(gettext("%s to %s at %s resolution (mean) · double-click to go back"),
              [stamp(state.view[0]), stamp(state.view[1]), RESOLUTION_NAMES[series.resolution] || series.resolution])
            : interpolate(gettext("History at %s resolution (mean)"), [RESOLUTION_NAMES[series.resolution] || series.resolution]);
        render();
      })
      .catch(function (error) {
        if (request === state.request) note.textContent = interpolate(gettext("Could not load history: %s"), [error.message]);
      });
  }

  function stamp(ms) {
    const local = new Date(Live.localMs(ms)).toISOString();
    return local.slice(0, 10) + " " + local.slice(11, 16);
  }

  /* The GPUs drawn beside this one (the Compare boxes, ?gpus=): each one's series over the same
     window, refreshed with the live window every 30 s. */
  function loadOverlays(request) {
    const span = window_();
    Object.keys(state.overlays).forEach(function (uuid) {
      const other = (cfg.host_gpus || []).find(function (gpu) { return gpu.uuid === uuid; });
      if (!other) { delete state.overlays[uuid]; return; }
      fetchSeries(span[0], span[1], state.range, other.readings_url).then(function (series) {
        if (request !== state.request || !state.overlays[uuid]) return;
        state.overlays[uuid] = { label: other.label, rows: series.rows, resolution: series.resolution };
        scheduleRender();
      }).catch(function () { /* drawn at the next refresh */ });
    });
  }

  /* After a reconnect: fetch what the socket missed, from the newest point we have. */
  function backfill() {
    if (state.range !== "live") return;
    const now = Date.now();
    const from = state.rows.length ? state.rows[state.rows.length - 1].t + 1 : now - RANGES.live.span;
    const request = state.request;
    fetchSeries(from, now + MINUTE, "live").then(function (series) {
      noteLatest(series.rows, serverNow());
      if (request !== state.request) return;
      merge(series.rows);
      scheduleRender();
    }).catch(function () { /* the next reconnect tries again */ });
  }

  /* The rows with an empty row wherever two points lie further apart than a gap, so that no line
     is drawn across missing data. */
  function gapped(rows, resolution) {
    if (rows.length < 2) return rows;
    const steps = [];
    for (let i = 1; i < rows.length && steps.length < 200; i++) steps.push(rows[i].t - rows[i - 1].t);
    steps.sort(function (a, b) { return a - b; });
    const gap = Math.max(GAP_MIN_MS[resolution] || GAP_MIN_MS.raw, 3 * steps[Math.floor(steps.length / 2)]);
    const out = [rows[0]];
    for (let i = 1; i < rows.length; i++) {
      if (rows[i].t - rows[i - 1].t > gap) out.push({ t: rows[i - 1].t + 1, gap: true });
      out.push(rows[i]);
    }
    return out;
  }

  function line(name, key, color, extra, rows) {
    const drawn = rows || state.drawn;
    return Object.assign({
      type: "scatter", mode: "lines", name: name, line: { color: color, width: 1.8 },
      x: drawn.map(function (row) { return Live.localMs(row.t); }),
      y: drawn.map(function (row) { return row.gap ? null : row[key]; }),
      connectgaps: false,
    }, extra || {});
  }

  /* One dashed line per compared GPU for a chart's main metric. */
  function overlayLines(key) {
    return Object.keys(state.overlays).map(function (uuid, i) {
      const overlay = state.overlays[uuid];
      if (!overlay || !overlay.rows) return null;
      const color = OVERLAY_COLORS[i % OVERLAY_COLORS.length];
      return line(overlay.label, key, color, { line: { color: color, width: 1.4, dash: "dot" } },
        gapped(overlay.rows, overlay.resolution));
    }).filter(Boolean);
  }

  function hline(y, color, label, shapes, annotations, below) {
    if (y == null) return;
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: y, y1: y,
      line: { color: color, width: 1.2, dash: "dash" } });
    // At the right edge, inside the plot: clear of the value axis's labels and of the markers'
    // labels, which stand at the left of their lines.
    annotations.push({ xref: "paper", x: 0.995, xanchor: "right", yref: "y", y: y, yanchor: below ? "top" : "bottom",
      text: label, showarrow: false, font: { size: 10, color: color }, bgcolor: "rgba(255,255,255,.8)" });
  }

  function xRange() {
    if (state.view) return [Live.localMs(state.view[0]), Live.localMs(state.view[1])];
    const now = Date.now();
    return [Live.localMs(now - RANGES[state.range].span), Live.localMs(now)];
  }

  function markerColor(marker) {
    if (marker.group === "xid") return "#cf222e";
    if (marker.group === "ticket") return marker.kind === "critical" ? "#cf222e" : marker.kind === "warning" ? "#bc4c00" : "#0969da";
    return MARKER_COLORS[marker.kind] || "#6b7585";
  }

  function visibleMarkers() {
    const [from, to] = xRange();
    return cfg.markers.filter(function (marker) {
      const x = Live.localMs(marker.ts);
      return x >= from && x <= to;
    });
  }

  /* Records, XIDs and tickets as symbols along the top of each chart: hovering one names it,
     clicking a record or ticket opens it. On a hidden second value axis (0 to 1). */
  function markerTrace() {
    const markers = visibleMarkers();
    const symbols = { record: "triangle-down", xid: "x", ticket: "diamond" };
    return {
      type: "scatter", mode: "markers", name: gettext("Events"), showlegend: false, yaxis: "y2", cliponaxis: false,
      x: markers.map(function (marker) { return Live.localMs(marker.ts); }),
      y: markers.map(function () { return 0.96; }),
      text: markers.map(function (marker) { return marker.label; }),
      customdata: markers.map(function (marker) { return marker.url; }),
      hovertemplate: "%{text}<extra></extra>",
      marker: { size: 10, color: markers.map(markerColor), symbol: markers.map(function (marker) { return symbols[marker.group] || "circle"; }),
        line: { width: 1, color: "#fff" } },
    };
  }

  function markerShapes(withLabels) {
    const shapes = [], annotations = [];
    for (const marker of visibleMarkers()) {
      const x = Live.localMs(marker.ts);
      const color = markerColor(marker);
      shapes.push({ type: "line", xref: "x", x0: x, x1: x, yref: "paper", y0: 0, y1: 1,
        line: { color: color, width: marker.group === "record" ? 1.5 : 1, dash: marker.group === "xid" ? "solid" : "dot" } });
      if (withLabels && marker.group === "record") {
        annotations.push({ xref: "x", x: x, xanchor: "right", yref: "paper", y: 0.98, yanchor: "top", textangle: -90,
          text: marker.label, showarrow: false, font: { size: 10, color: color }, bgcolor: "rgba(255,255,255,.85)" });
      }
    }
    return { shapes: shapes, annotations: annotations };
  }

  function layout(title, yaxis, extraShapes, extraAnnotations, labels) {
    const markers = markerShapes(labels);
    return {
      title: { text: title, font: { size: 13 }, x: 0.01, xanchor: "left", y: 0.97, yanchor: "top" },
      height: 230,
      margin: { l: 56, r: 12, t: 34, b: 28 },
      uirevision: state.uirevision,
      datarevision: Date.now(),
      showlegend: true,
      legend: { orientation: "h", x: 1, xanchor: "right", y: 1.02, yanchor: "bottom", font: { size: 11 } },
      // A time label wider than its place at the ends is left out, never drawn over the value axis's.
      xaxis: { type: "date", range: xRange(), showgrid: true, gridcolor: "#eef1f4", ticklabeloverflow: "hide past domain",
        automargin: true },
      yaxis: Object.assign({ gridcolor: "#eef1f4", zeroline: false, automargin: true }, yaxis),
      yaxis2: { overlaying: "y", range: [0, 1], visible: false, fixedrange: true },
      dragmode: "zoom",
      shapes: markers.shapes.concat(extraShapes || []),
      annotations: markers.annotations.concat(extraAnnotations || []),
      paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      font: { family: "system-ui, sans-serif", size: 11, color: "#1d2430" },
    };
  }

  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function plot(id, traces, plotLayout) {
    const el = document.getElementById(id);
    if (!el) return;
    window.Plotly.react(el, traces.concat([markerTrace()]), plotLayout, PLOT_CONFIG);
    if (!el.dataset.wired) {
      el.dataset.wired = "1";
      el.on("plotly_relayout", zoomed);
      el.on("plotly_click", function (event) {
        const point = event.points && event.points[0];
        if (point && point.data.yaxis === "y2" && point.customdata) window.location.href = point.customdata;
      });
    }
  }

  /* A drag on any chart zooms all of them to the chosen time (loaded again at the finest resolution
     that fits) and puts it in the address; a double-click goes back to the range. */
  function zoomed(change) {
    if (state.rendering) return;
    if (change["xaxis.autorange"]) {
      load(state.view ? (state.lastRange || "live") : state.range);
      return;
    }
    const from = change["xaxis.range[0]"], to = change["xaxis.range[1]"];
    if (from === undefined || to === undefined) return;
    const utc = function (value) {
      const local = typeof value === "number" ? value : Date.parse(String(value).replace(" ", "T") + "Z");
      return local + new Date(local).getTimezoneOffset() * 60000;
    };
    const view = [utc(from), utc(to)];
    if (!(view[1] - view[0] > 1000)) return;
    if (!state.view) state.lastRange = state.range;
    load(null, view);
  }

  function render() {
    state.renderQueued = false;
    state.rendering = true;
    try { draw(); } finally { state.rendering = false; }
  }

  // What a chart adds to its lines: a title, its value axis, the GPU's limits as level lines.
  const CHARTS = {
    temperature: { title: gettext("Temperature"), labels: true, levels: function (shapes, annotations, values) {
      hline(cfg.slowdown_c, "#d29922", interpolate(gettext("slowdown %s °C"), [cfg.slowdown_c]), shapes, annotations, true);
      hline(cfg.shutdown_c, "#cf222e", interpolate(gettext("shutdown %s °C"), [cfg.shutdown_c]), shapes, annotations);
      const top = Math.max(cfg.shutdown_c || 0, values.length ? Math.max.apply(null, values) : 0) + 5;
      return { range: [20, Math.max(top, 60)] };
    } },
    power: { title: gettext("Power vs limit"), levels: function (shapes, annotations, values, settingShown) {
      if (!settingShown) hline(cfg.power_limit_default_w, COLORS.power[1], gettext("default limit"), shapes, annotations);
    } },
    utilization: { title: gettext("Utilization") },
    fan: { title: gettext("Fan") },
    clocks: { title: gettext("Clocks") },
    memory: { title: gettext("Memory"), levels: function (shapes, annotations) {
      hline(cfg.memory_total_mib, "#6e7781", gettext("total"), shapes, annotations);
    } },
  };

  function withUnit(text, unit) { return unit ? text + " " + unit : text; }

  /* One group's chart: its measured lines, the compared GPUs' lines of its first, its settings
     (while readings carry them), and the throttled readings as markers on its first line. */
  function drawGroup(name, group, rows) {
    const chart = CHARTS[name] || { title: group.lines.length ? group.lines[0].label : name };
    const first = group.lines[0];
    if (!first) return;
    const colors = COLORS[name] || OTHER_COLORS;
    const shapes = [], annotations = [];
    const measured = [], settings = [];
    group.lines.forEach(function (metric, i) {
      const color = colors[i % colors.length];
      if (!isSetting(metric)) {
        measured.push(line(withUnit(metric.label, metric.unit), metric.name, color));
      } else if (rows.some(function (row) { return row[metric.name] != null; })) {
        settings.push(line(withUnit(metric.label, metric.unit), metric.name, color,
          { line: { color: color, dash: "dash", shape: "hv", width: 1.2 } }));
      }
    });
    const traces = measured.concat(overlayLines(first.name), settings);
    if (group.reasons) {
      const throttled = rows.filter(function (row) { return row.throttled; });
      traces.push({ type: "scatter", mode: "markers", name: gettext("Throttled"), marker: { color: "#cf222e", size: 4, opacity: 0.6 },
        x: throttled.map(function (row) { return Live.localMs(row.t); }),
        y: throttled.map(function (row) { return row[first.name]; }), visible: throttled.length ? true : "legendonly" });
    }
    const values = rows.map(function (row) { return row[first.name]; }).filter(function (v) { return v != null; });
    const axis = first.unit === "%" ? { range: [0, 105] } : { rangemode: "tozero" };
    Object.assign(axis, { ticksuffix: first.unit ? " " + first.unit : "" },
      chart.levels ? chart.levels(shapes, annotations, values, settings.length > 0) : {});
    plot("chart-" + name, traces, layout(chart.title, axis, shapes, annotations, chart.labels));
  }

  function draw() {
    const rows = state.rows;
    state.drawn = gapped(rows, state.resolution);
    Object.keys(GROUPS).forEach(function (name) { drawGroup(name, GROUPS[name], rows); });
    renderNow();
  }

  function renderNow() {
    const last = state.latest;
    const set = function (key, text) {
      const el = root.querySelector('[data-now="' + key + '"]');
      if (el) el.textContent = text;
    };
    const fmt = function (value, unit, digits) {
      return value == null ? "—" : withUnit(Number(value).toFixed(digits || 0), unit);
    };
    if (!last) {
      set("age", gettext("no readings yet"));
      return;
    }
    // Past the silence limit the values are the last ones heard, not the present: greyed, aged.
    const silent = cfg.silent_after_s != null && state.heard != null && serverNow() - state.heard > cfg.silent_after_s * 1000;
    root.querySelector(".live-now").classList.toggle("stale", silent);
    const statusBadge = document.getElementById("gpu-status-badge");
    const silentBadge = document.getElementById("gpu-silent-badge");
    if (statusBadge && silentBadge) {
      statusBadge.hidden = silent;
      silentBadge.hidden = !silent;
    }
    // Each chart's first line now (and its setting, a power limit, beside it): data-now="<group>".
    Object.keys(GROUPS).forEach(function (name) {
      const first = GROUPS[name].lines[0];
      const setting = GROUPS[name].lines.find(function (metric) { return isSetting(metric) && last[metric.name]; });
      if (!first) return;
      set(name, fmt(last[first.name], first.unit) + (setting ? " / " + fmt(last[setting.name], setting.unit) : ""));
    });
    set("throttle", last.throttled ? gettext("throttling") : gettext("no"));
    const age = Math.max(0, Math.round((serverNow() - last.t) / 1000));
    const ago = age < 90 ? interpolate(gettext("%s s ago"), [age])
      : age < 90 * 60 ? interpolate(gettext("%s min ago"), [Math.round(age / 60)])
      : age < 48 * 3600 ? interpolate(gettext("%s h ago"), [Math.round(age / 3600)])
      : interpolate(gettext("%s d ago"), [Math.round(age / 86400)]);
    set("age", silent ? interpolate(gettext("silent · last seen %s"), [ago]) : ago);
  }

  function scheduleRender() {
    if (state.renderQueued) return;
    state.renderQueued = true;
    window.requestAnimationFrame(render);
  }

  root.querySelectorAll("[data-range]").forEach(function (button) {
    button.addEventListener("click", function () { load(button.dataset.range); });
  });

  const query = new URLSearchParams(window.location.search);
  (query.get("gpus") || "").split(",").forEach(function (uuid) {
    if ((cfg.host_gpus || []).some(function (gpu) { return gpu.uuid === uuid; })) state.overlays[uuid] = {};
  });
  root.querySelectorAll("[data-compare]").forEach(function (box) {
    box.checked = box.value in state.overlays;
    box.addEventListener("change", function () {
      if (box.checked) state.overlays[box.value] = {};
      else delete state.overlays[box.value];
      saveUrl();
      loadOverlays(state.request);
      scheduleRender();
    });
  });
  const from = Date.parse(query.get("from") || ""), to = Date.parse(query.get("to") || "");
  if (from < to) load(null, [from, to]);
  else load(RANGES[query.get("range")] ? query.get("range") : "live");
  new Live.LiveSocket(cfg.ws, {
    indicators: [root.querySelector(".live-indicator")],
    onOpen: function (reconnected) { if (reconnected) backfill(); },
    onMessage: function (message) {
      if (message.kind !== "points") return;
      const rows = Live.pointObjects(message).filter(function (p) { return p.gpu_id === cfg.id; }).map(rowFromPoint);
      noteLatest(rows, serverNow());
      if (state.range === "live") merge(rows);
      scheduleRender();
    },
  });
  // Keep the window sliding (and the "x s ago") when no reading comes; compared GPUs every 30 s.
  setInterval(function () { if (state.range === "live") scheduleRender(); }, 5000);
  setInterval(function () { if (state.range === "live") loadOverlays(state.request); }, 30000);
})();
