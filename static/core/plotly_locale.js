// Charts in the page's language: on a Chinese page, Plotly's dates (axis ticks, hover) use Chinese
// month and day names. Loaded right after plotly-cartesian.min.js, before the page's chart scripts.
(function () {
  "use strict";
  if (!window.Plotly || (document.documentElement.lang || "").toLowerCase().indexOf("zh") !== 0) return;
  var months = ["一月", "二月", "三月", "四月", "五月", "六月", "七月", "八月", "九月", "十月", "十一月", "十二月"];
  window.Plotly.register({
    moduleType: "locale",
    name: "zh-CN",
    dictionary: {},
    format: {
      days: ["星期日", "星期一", "星期二", "星期三", "星期四", "星期五", "星期六"],
      shortDays: ["周日", "周一", "周二", "周三", "周四", "周五", "周六"],
      months: months,
      shortMonths: months.map(function (name, index) { return (index + 1) + "月"; }),
      date: "%Y-%m-%d",
    },
  });
  window.Plotly.setPlotConfig({locale: "zh-CN"});
})();
