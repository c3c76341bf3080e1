// Job page: draw the server-built timeline with our own copy of plotly.js.
(function () {
  "use strict";
  var holder = document.getElementById("job-chart");
  var data = document.getElementById("job-chart-data");
  if (!holder || !data || !window.Plotly) return;
  var figure = JSON.parse(JSON.parse(data.textContent));
  var layout = figure.layout;
  if (holder.clientWidth < 600) {
    /* A phone: the legend (two lines per GPU) goes under the chart, one entry a line, and the
       chart grows to hold it; otherwise plotly squeezes it into a scrolling box beside a plot a
       few pixels wide, and turns the time axis's labels on end. */
    layout.legend = {orientation: "h", x: 0, xanchor: "left", y: -0.15, yanchor: "top", font: {size: 10}, maxheight: 400};
    layout.xaxis = Object.assign({}, layout.xaxis, {nticks: 4, tickangle: 0, tickformat: "%H:%M"});
    layout.margin = {l: 45, r: 45, t: 10, b: 10};
    layout.height = 320 + 19 * figure.data.length;
  }
  window.Plotly.newPlot(holder, figure.data, layout, {responsive: true, displaylogo: false});
})();
