// Ticket page: draw the server-built Plotly figure with our own copy of plotly.js.
(function () {
  "use strict";
  var holder = document.getElementById("ticket-chart");
  var data = document.getElementById("ticket-chart-data");
  if (!holder || !data || !window.Plotly) return;
  var figure = JSON.parse(JSON.parse(data.textContent));
  window.Plotly.newPlot(holder, figure.data, figure.layout, {responsive: true, displaylogo: false});
  document.querySelectorAll(".evidence-ts").forEach(function (cell) {
    var seconds = parseFloat(cell.dataset.ts);
    if (!isNaN(seconds)) cell.textContent = new Date(seconds * 1000).toISOString().replace("T", " ").slice(0, 19);
  });
})();
