// The console's only script: draws the charts (uPlot) from the JSON each page carries (data-chart), again after htmx refreshes
// a page's live part, and ticks "select all" on the dead letters page. No inline script anywhere (the CSP forbids it).
(function () {
  "use strict";
  const palette = ["#2563eb", "#16a34a", "#d97706", "#dc2626", "#7c3aed"];
  const kinds = {
    events: (d) => [["sent", d.events.sent], ["acked", d.events.acked], ["redelivered", d.events.redelivered],
                    ["dead-lettered", d.events.dead_lettered]],
    backlog: (d) => [["waiting", d.backlog]],
    processing: (d) => [["p50", d.processing.p50], ["p95", d.processing.p95], ["p99", d.processing.p99]],
  };

  function draw(el) {
    const holder = el.closest(".charts");
    if (!holder) return;
    const data = JSON.parse(holder.dataset.chart);
    const lines = kinds[el.dataset.kind](data);
    el.textContent = "";
    const opts = {
      width: Math.max(260, el.clientWidth || 360), height: 170,
      // Times in UTC, as every page gives them.
      tzDate: (ts) => uPlot.tzDate(new Date(ts * 1e3), "Etc/UTC"),
      // Percentiles have gaps (minutes without an ack): points too, or a lone minute would not show.
      series: [{}, ...lines.map(([label], i) => ({label, stroke: palette[i], width: 1.5, spanGaps: false,
                                                   points: {show: el.dataset.kind === "processing", size: 4}}))],
      axes: [{}, {size: 56}],
      legend: {show: true, live: false},
    };
    new uPlot(opts, [data.t, ...lines.map(([, values]) => values)], el);
  }

  function drawAll() {
    if (typeof uPlot === "undefined") return;
    document.querySelectorAll(".chart").forEach(draw);
  }

  document.addEventListener("DOMContentLoaded", () => {
    drawAll();
    const all = document.getElementById("select-all");
    if (all) {
      all.addEventListener("change", () => {
        document.querySelectorAll("input[name=ids]").forEach((box) => { box.checked = all.checked; });
      });
    }
  });
  document.addEventListener("htmx:afterSettle", drawAll);
})();
