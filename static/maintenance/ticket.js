// Ticket page: draw the server-built Plotly figure with our own copy of plotly.js.
(function () {
  "use strict";
  var holder = document.getElementById("ticket-chart");
  var data = document.getElementById("ticket-chart-data");
  if (!holder || !data || !window.Plotly) return;
  var figure = JSON.parse(JSON.parse(data.textContent));
  window.Plotly.newPlot(holder, figure.data, figure.layout, {responsive: true, displaylogo: false});
})();
