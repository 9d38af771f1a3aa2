// A small line chart drawn as SVG (no library, nothing fetched): lineChart(el, times, series)
// where series = [{name, color, values}] and times are Unix ms.
"use strict";
function lineChart(el, times, series) {
  const W = 600, H = 220, L = 48, R = 10, T = 10, B = 24;
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("class", "line-chart");
  const add = (name, attrs, text) => {
    const e = document.createElementNS(ns, name);
    for (const k in attrs) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    svg.appendChild(e);
    return e;
  };
  let max = 1;
  for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
  const t0 = times.length ? times[0] : 0, t1 = times.length ? times[times.length - 1] : 1;
  const x = t => L + (t1 > t0 ? (t - t0) / (t1 - t0) : 1) * (W - L - R);
  const y = v => T + (1 - v / max) * (H - T - B);
  for (let i = 0; i <= 4; i++) {
    const v = Math.round(max * i / 4);
    add("line", { x1: L, x2: W - R, y1: y(v), y2: y(v), stroke: "#e5e7eb" });
    add("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", "font-size": 11, fill: "#667" }, String(v));
  }
  if (times.length) {
    const span = Math.round((t1 - t0) / 1000);
    add("text", { x: L, y: H - 6, "font-size": 11, fill: "#667" }, `-${span}s`);
    add("text", { x: W - R, y: H - 6, "text-anchor": "end", "font-size": 11, fill: "#667" }, "now");
  }
  for (const s of series) {
    const pts = [];
    s.values.forEach((v, i) => { if (v !== null) pts.push(`${x(times[i]).toFixed(1)},${y(v).toFixed(1)}`); });
    if (pts.length === 1) pts.unshift(pts[0].replace(/^[^,]+/, String(L)));
    add("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 2, "data-series": s.name });
  }
  el.replaceChildren(svg);
}
