// Usage report page: four charts drawn from the report's own figures (json_script) with our copy of plotly.js.
(function () {
  "use strict";
  var source = document.getElementById("usage-data");
  if (!source || !window.Plotly) return;
  var data = JSON.parse(source.textContent);
  var L = data.labels;
  var config = {responsive: true, displaylogo: false};
  function layout(extra) {
    return Object.assign({margin: {l: 50, r: 10, t: 10, b: 60}, height: 280, template: "plotly_white",
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)"}, extra);
  }
  function draw(id, traces, extra) {
    var holder = document.getElementById(id);
    if (holder) window.Plotly.newPlot(holder, traces, layout(extra), config);
  }
  function known(values) { return values.some(function (value) { return value !== null; }); }
  /* A chart with nothing to draw says so, in words, instead of plotly's default axes (−1 to 4, or
     0 to 6 for no unit at all). */
  function empty(id, text) {
    var holder = document.getElementById(id);
    if (!holder) return;
    holder.dataset.empty = "true";
    window.Plotly.newPlot(holder, [], layout({height: 140, xaxis: {visible: false}, yaxis: {visible: false},
      annotations: [{text: text, xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false,
        font: {size: 14, color: "#5f6878"}}]}), Object.assign({staticPlot: true}, config));
  }
  // A share is 0 to 100 % whatever the days hold (all idle: not 0 to 1).
  if (known(data.days.y)) {
    draw("usage-days", [{type: "bar", x: data.days.x, y: data.days.y, name: L.busy, marker: {color: "#2f6fb0"}}],
      {yaxis: {title: {text: L.busy}, range: [0, 100]}, xaxis: {type: "date"}});
  } else {
    empty("usage-days", L.no_data);
  }
  if (data.users.names.length) {
    draw("usage-users", [
      {type: "bar", x: data.users.names, y: data.users.busy, name: L.busy_part, marker: {color: "#2f6fb0"}},
      {type: "bar", x: data.users.names, y: data.users.idle, name: L.idle, marker: {color: "#d1762a"}}
    ], {barmode: "stack", yaxis: {title: {text: L.gpu_hours}, rangemode: "tozero"}, xaxis: {type: "category"},
        legend: {orientation: "h", x: 0, y: 1, yanchor: "bottom"}, margin: {l: 50, r: 10, t: 50, b: 60}});
  } else {
    empty("usage-users", L.no_jobs);
  }
  // Models side by side as horizontal bars: their long names read on the axis at any width.
  function byModel(id, values, label, color) {
    if (!known(values)) return empty(id, L.no_data);
    draw(id, [{type: "bar", orientation: "h", y: data.models.names, x: values, name: label, marker: {color: color}}],
      {xaxis: {title: {text: label}, rangemode: "tozero"}, yaxis: {type: "category", automargin: true},
       margin: {l: 10, r: 10, t: 10, b: 50}, height: Math.max(200, 60 + 40 * data.models.names.length)});
  }
  byModel("usage-energy", data.models.energy, L.energy, "#3a8f5c");
  byModel("usage-failures", data.models.failures, L.failures, "#b0413e");
})();
