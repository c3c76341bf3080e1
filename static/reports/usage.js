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
  draw("usage-days", [{type: "bar", x: data.days.x, y: data.days.y, name: L.busy, marker: {color: "#2f6fb0"}}],
    {yaxis: {title: {text: L.busy}, range: [0, 100]}, xaxis: {type: "date"}});
  draw("usage-users", [
    {type: "bar", x: data.users.names, y: data.users.busy, name: L.busy_part, marker: {color: "#2f6fb0"}},
    {type: "bar", x: data.users.names, y: data.users.idle, name: L.idle, marker: {color: "#d1762a"}}
  ], {barmode: "stack", yaxis: {title: {text: L.gpu_hours}}, xaxis: {type: "category"},
      legend: {orientation: "h", y: 1.12}});
  draw("usage-energy", [{type: "bar", x: data.models.names, y: data.models.energy, name: L.energy,
    marker: {color: "#3a8f5c"}}], {yaxis: {title: {text: L.energy}}, xaxis: {type: "category"}});
  draw("usage-failures", [{type: "bar", x: data.models.names, y: data.models.failures, name: L.failures,
    marker: {color: "#b0413e"}}], {yaxis: {title: {text: L.failures}}, xaxis: {type: "category"}});
})();
