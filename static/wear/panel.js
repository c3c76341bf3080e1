// The GPU page's Wear panel: monthly meters and thermal resistance with cleaning markers.
(function () {
  // Texts in the page's language: gettext comes from /jsi18n/ (base.html loads it first).
  const gettext = window.gettext || function (text) { return text; };
  const source = document.getElementById("wear-data");
  if (!source || !window.Plotly) return;
  const data = JSON.parse(source.textContent);
  const layout = (title, extra) => Object.assign({
    title: { text: title, font: { size: 14 } }, height: 280, margin: { l: 50, r: 50, t: 36, b: 40 },
    legend: { orientation: "h", y: -0.2 }, paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
  }, extra || {});
  const config = { displaylogo: false, responsive: true };
  const months = data.monthly.map((m) => m.month);
  // Plotly 4 takes axis titles as {text}; cycles are whole numbers: a whole tick step
  const axisTitle = (text) => ({ text, font: { size: 12 } });
  const cycles = data.monthly.map((m) => m.thermal_cycles);
  const cycleStep = Math.max(1, Math.ceil(Math.max(1, ...cycles) / 4));
  const bar = (name, key) => ({ type: "bar", name, x: months, y: data.monthly.map((m) => m[key]) });
  window.Plotly.newPlot("wear-monthly", [
    bar(gettext("busy h"), "busy_hours"), bar(gettext("hot h"), "hot_hours"), bar(gettext("fan-high h"), "fan_high_hours"),
    { type: "scatter", mode: "lines+markers", name: gettext("thermal cycles"), x: months,
      y: cycles, yaxis: "y2" },
  ], layout(gettext("Per month"), { barmode: "group", xaxis: { type: "category" }, yaxis: { title: axisTitle(gettext("hours")) },
    yaxis2: { title: axisTitle(gettext("thermal cycles")), overlaying: "y", side: "right", rangemode: "tozero",
      dtick: cycleStep, showgrid: false } }), config);
  const shapes = data.cleanings.map((day) => ({
    type: "line", xref: "x", yref: "paper", x0: day, x1: day, y0: 0, y1: 1,
    line: { dash: "dot", width: 2, color: "#2a9d8f" },
  }));
  const annotations = data.cleanings.map((day) => ({
    x: day, xref: "x", y: 1, yref: "paper", text: gettext("cleaning"), showarrow: false, yanchor: "bottom",
    font: { size: 10, color: "#2a9d8f" },
  }));
  // Few days of readings (a new GPU: often one): the axis spans at least a week of whole days
  // around them and the value axis a margin around the values, never Plotly's fractions of a
  // millisecond around one point.
  const DAY_MS = 86400000;
  const dayMs = (day) => Date.parse(day + "T00:00:00Z");
  const days = data.resistance.map((r) => dayMs(r.day)).concat(data.cleanings.map(dayMs));
  const isoDay = (ms) => new Date(ms).toISOString().slice(0, 10);
  const xaxis = { type: "date", tickformat: "%Y-%m-%d", hoverformat: "%Y-%m-%d" };
  if (days.length && Math.max(...days) - Math.min(...days) < 7 * DAY_MS) {
    const middle = (Math.max(...days) + Math.min(...days)) / 2;
    xaxis.range = [isoDay(middle - 4 * DAY_MS), isoDay(middle + 4 * DAY_MS)];
    xaxis.dtick = 2 * DAY_MS;
  }
  const values = data.resistance.map((r) => r.c_per_w).filter((v) => v != null);
  const yaxis = { title: axisTitle(gettext("°C per W")), tickformat: ".3f", rangemode: "tozero" };
  if (values.length && Math.max(...values) - Math.min(...values) < 1e-6) yaxis.range = [0, Math.max(...values) * 1.5 || 0.1];
  window.Plotly.newPlot("wear-resistance", [{
    type: "scatter", mode: "lines+markers", name: gettext("°C per W at load"),
    x: data.resistance.map((r) => r.day), y: data.resistance.map((r) => r.c_per_w),
  }], layout(gettext("Thermal resistance at load (°C/W)"), { shapes, annotations, xaxis, yaxis }), config);
})();
