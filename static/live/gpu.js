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
  const RAW_METRICS = [
    "temperature_c", "power_w", "power_limit_w", "utilization_gpu_pct", "utilization_memory_pct",
    "fan_speed_pct", "sm_clock_mhz", "mem_clock_mhz", "memory_used_mib", "throttle_reasons",
  ];
  const ROLLUP_METRICS = [
    "temperature_c", "power_w", "utilization_gpu_pct", "utilization_memory_pct", "fan_speed_pct",
    "sm_clock_mhz", "mem_clock_mhz", "memory_used_mib",
  ];
  const RESOLUTION_NAMES = { raw: gettext("raw"), "1m": gettext("1m"), "1h": gettext("1h") };
  const THROTTLE_NAMES = ["hw_thermal", "sw_thermal", "hw_slowdown", "hw_power_brake"];
  const COLORS = { temp: "#d1495b", power: "#1f6feb", limit: "#9a6700", util: "#1a7f37", mem: "#8250df",
    fan: "#0a7ea4", sm: "#bf3989", memclk: "#6e7781" };
  const MARKER_COLORS = { cleaning: "#1a7f37", thermal_paste: "#1a7f37", fan_replacement: "#0a7ea4",
    repair: "#cf222e" };

  const state = { range: "live", rows: [], latest: null, resolution: "raw", uirevision: "live", request: 0,
    renderQueued: false };

  // Server and browser clocks may differ: silence is judged on the server's clock, as the fleet page does.
  const clockSkew = cfg.now != null ? cfg.now - Date.now() : 0;
  function serverNow() { return Date.now() + clockSkew; }

  function noteLatest(rows, arrived) {
    const last = rows.length ? rows[rows.length - 1] : null;
    if (last && last.power_limit_w !== undefined && (!state.latest || last.t >= state.latest.t)) state.latest = last;
    if (last) state.heard = Math.max(state.heard || 0, last.t, arrived || 0);
  }
  if (cfg.latest) {
    state.latest = rowFromPoint(cfg.latest);
    state.heard = cfg.latest.heard;
  }
  const root = document.getElementById("live-gpu");
  const note = document.getElementById("live-range-note");

  function rowFromPoint(point) {
    return {
      t: point.ts,
      temperature_c: point.temperature_c, power_w: point.power_w, power_limit_w: point.power_limit_w,
      utilization_gpu_pct: point.utilization_gpu_pct, utilization_memory_pct: point.utilization_memory_pct,
      fan_speed_pct: point.fan_speed_pct, sm_clock_mhz: point.sm_clock_mhz, mem_clock_mhz: point.mem_clock_mhz,
      memory_used_mib: point.memory_used_mib,
      throttled: point.throttle_reasons != null && (point.throttle_reasons & cfg.throttling_mask) !== 0,
    };
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

  function fetchSeries(from, to, range) {
    const spec = RANGES[range];
    const metrics = spec.resolution === "raw" ? RAW_METRICS : ROLLUP_METRICS;
    const params = new URLSearchParams({
      from: new Date(from).toISOString(), to: new Date(to).toISOString(),
      metrics: metrics.join(","), resolution: spec.resolution,
    });
    return fetch(cfg.readings_url + "?" + params, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        if (!response.ok) throw new Error("readings API answered " + response.status);
        return response.json();
      })
      .then(function (body) {
        const rows = body.ts.map(function (ts, i) {
          const row = { t: Date.parse(ts) };
          for (const metric of metrics) {
            if (metric === "throttle_reasons") {
              const names = body.values.throttle_reasons[i] || [];
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

  function load(range) {
    const request = ++state.request;
    const now = Date.now();
    state.range = range;
    state.rows = [];
    state.uirevision = range + ":" + request;  // a new range resets the zoom, live updates keep it
    root.querySelectorAll("[data-range]").forEach(function (button) {
      button.setAttribute("aria-pressed", String(button.dataset.range === range));
    });
    note.textContent = gettext("Loading…");
    render();
    fetchSeries(now - RANGES[range].span, now + MINUTE, range)
      .then(function (series) {
        if (request !== state.request) return;
        state.resolution = series.resolution;
        if (range === "live") noteLatest(series.rows);
        merge(series.rows);
        note.textContent = range === "live"
          ? gettext("Live, raw readings")
          : interpolate(gettext("History at %s resolution (mean)"), [RESOLUTION_NAMES[series.resolution] || series.resolution]);
        render();
      })
      .catch(function (error) {
        if (request === state.request) note.textContent = interpolate(gettext("Could not load history: %s"), [error.message]);
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

  function line(name, key, color, extra) {
    return Object.assign({
      type: "scatter", mode: "lines", name: name, line: { color: color, width: 1.8 },
      x: state.rows.map(function (row) { return Live.localMs(row.t); }),
      y: state.rows.map(function (row) { return row[key]; }),
      connectgaps: false,
    }, extra || {});
  }

  function hline(y, color, label, shapes, annotations, below) {
    if (y == null) return;
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, yref: "y", y0: y, y1: y,
      line: { color: color, width: 1.2, dash: "dash" } });
    annotations.push({ xref: "paper", x: 0.005, xanchor: "left", yref: "y", y: y, yanchor: below ? "top" : "bottom",
      text: label, showarrow: false, font: { size: 10, color: color } });
  }

  function xRange() {
    const now = Date.now();
    return [Live.localMs(now - RANGES[state.range].span), Live.localMs(now)];
  }

  function markerShapes(withLabels) {
    const [from, to] = xRange();
    const shapes = [], annotations = [];
    for (const marker of cfg.markers) {
      const x = Live.localMs(marker.ts);
      if (x < from || x > to) continue;
      const color = MARKER_COLORS[marker.kind] || "#6b7585";
      shapes.push({ type: "line", xref: "x", x0: x, x1: x, yref: "paper", y0: 0, y1: 1,
        line: { color: color, width: 1.5, dash: "dot" } });
      if (withLabels) {
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
      xaxis: { type: "date", range: xRange(), showgrid: true, gridcolor: "#eef1f4" },
      yaxis: Object.assign({ gridcolor: "#eef1f4", zeroline: false, automargin: true }, yaxis),
      shapes: markers.shapes.concat(extraShapes || []),
      annotations: markers.annotations.concat(extraAnnotations || []),
      paper_bgcolor: "#fff", plot_bgcolor: "#fff",
      font: { family: "system-ui, sans-serif", size: 11, color: "#1d2430" },
    };
  }

  const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["select2d", "lasso2d"] };

  function plot(id, traces, plotLayout) {
    const el = document.getElementById(id);
    if (el) window.Plotly.react(el, traces, plotLayout, PLOT_CONFIG);
  }

  function render() {
    state.renderQueued = false;
    const rows = state.rows;
    let shapes = [], annotations = [];
    hline(cfg.slowdown_c, "#d29922", interpolate(gettext("slowdown %s °C"), [cfg.slowdown_c]), shapes, annotations, true);
    hline(cfg.shutdown_c, "#cf222e", interpolate(gettext("shutdown %s °C"), [cfg.shutdown_c]), shapes, annotations);
    const throttled = rows.filter(function (row) { return row.throttled; });
    const temps = rows.map(function (row) { return row.temperature_c; }).filter(function (v) { return v != null; });
    const top = Math.max(cfg.shutdown_c || 0, temps.length ? Math.max.apply(null, temps) : 0) + 5;
    plot("chart-temperature", [
      line(gettext("Temperature °C"), "temperature_c", COLORS.temp),
      { type: "scatter", mode: "markers", name: gettext("Throttled"), marker: { color: "#cf222e", size: 4, opacity: 0.6 },
        x: throttled.map(function (row) { return Live.localMs(row.t); }),
        y: throttled.map(function (row) { return row.temperature_c; }), visible: throttled.length ? true : "legendonly" },
    ], layout(gettext("Temperature"), { range: [20, Math.max(top, 60)], ticksuffix: " °C" }, shapes, annotations, true));

    shapes = []; annotations = [];
    const hasLimit = rows.some(function (row) { return row.power_limit_w != null; });
    if (!hasLimit) hline(cfg.power_limit_default_w, COLORS.limit, gettext("default limit"), shapes, annotations);
    const powerTraces = [line(gettext("Power W"), "power_w", COLORS.power)];
    if (hasLimit) powerTraces.push(line(gettext("Limit W"), "power_limit_w", COLORS.limit, { line: { color: COLORS.limit, dash: "dash", shape: "hv", width: 1.2 } }));
    plot("chart-power", powerTraces, layout(gettext("Power vs limit"), { rangemode: "tozero", ticksuffix: " W" }, shapes, annotations));

    plot("chart-utilization", [
      line(gettext("GPU %"), "utilization_gpu_pct", COLORS.util),
      line(gettext("Memory %"), "utilization_memory_pct", COLORS.mem),
    ], layout(gettext("Utilization"), { range: [0, 105], ticksuffix: " %" }));

    plot("chart-fan", [line(gettext("Fan %"), "fan_speed_pct", COLORS.fan)], layout(gettext("Fan"), { range: [0, 105], ticksuffix: " %" }));

    plot("chart-clocks", [
      line(gettext("SM MHz"), "sm_clock_mhz", COLORS.sm),
      line(gettext("Memory MHz"), "mem_clock_mhz", COLORS.memclk),
    ], layout(gettext("Clocks"), { rangemode: "tozero", ticksuffix: " MHz" }));

    shapes = []; annotations = [];
    hline(cfg.memory_total_mib, "#6e7781", gettext("total"), shapes, annotations);
    plot("chart-memory", [line(gettext("Used MiB"), "memory_used_mib", COLORS.mem)],
      layout(gettext("Memory"), { rangemode: "tozero", ticksuffix: " MiB" }, shapes, annotations));
    renderNow();
  }

  function renderNow() {
    const last = state.latest;
    const set = function (key, text) {
      const el = root.querySelector('[data-now="' + key + '"]');
      if (el) el.textContent = text;
    };
    const fmt = function (value, unit, digits) {
      return value == null ? "—" : Number(value).toFixed(digits || 0) + unit;
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
    set("temperature", fmt(last.temperature_c, " °C"));
    set("power", fmt(last.power_w, " W") + (last.power_limit_w ? " / " + fmt(last.power_limit_w, " W") : ""));
    set("util", fmt(last.utilization_gpu_pct, " %"));
    set("fan", fmt(last.fan_speed_pct, " %"));
    set("sm", fmt(last.sm_clock_mhz, " MHz"));
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

  load("live");
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
  // Keep the window sliding (and the "x s ago") when no reading comes.
  setInterval(function () { if (state.range === "live") scheduleRender(); }, 5000);
})();
