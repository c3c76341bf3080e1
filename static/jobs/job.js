// Job page: draw the server-built timeline with our own copy of plotly.js.
(function () {
  "use strict";
  var holder = document.getElementById("job-chart");
  var data = document.getElementById("job-chart-data");
  if (!holder || !data || !window.Plotly) return;
  var figure = JSON.parse(JSON.parse(data.textContent));
  window.Plotly.newPlot(holder, figure.data, figure.layout, {responsive: true, displaylogo: false});
})();
