// Small charts as inline SVG, built from the API's JSON: no library, no inline style
// (the CSP forbids it; colours come from app.css classes on the SVG elements).

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 480;
const HEIGHT = 140;
const PAD = { left: 52, right: 8, top: 8, bottom: 18 };

function el(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

// A round upper bound for an axis: 1, 2 or 5 times a power of ten.
export function niceMax(value) {
  if (!(value > 0)) return 1;
  const power = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) if (step * power >= value) return step * power;
  return 10 * power;
}

function fmtTick(value) {
  return value >= 10_000 ? `${Math.round(value / 1000)}k` : String(value);
}

function hhmm(ms) {
  return new Date(ms).toISOString().slice(11, 16);
}

// `series`: [{ name, cls, values: [number|null] }] over the same `times` (epoch ms, one
// step each); `kind` "bars" (stacked, counts) or "lines" (gaps where a value is null);
// `label` writes a time on the axis and in tooltips (UTC hours and minutes unless given).
export function chart({ title, times, series, kind, unit = "", label = hhmm }) {
  const n = times.length;
  const plotW = WIDTH - PAD.left - PAD.right;
  const plotH = HEIGHT - PAD.top - PAD.bottom;
  const totals = times.map((_, i) =>
    kind === "bars"
      ? series.reduce((sum, s) => sum + (s.values[i] || 0), 0)
      : Math.max(0, ...series.map((s) => s.values[i] || 0)),
  );
  const top = niceMax(Math.max(0, ...totals));
  const x = (i) => PAD.left + (i * plotW) / n;
  const y = (v) => PAD.top + plotH - (v / top) * plotH;
  const svg = el("svg", {
    viewBox: `0 0 ${WIDTH} ${HEIGHT}`,
    class: "chart",
    role: "img",
    "aria-label": title,
  });
  svg.append(el("title", {}, title));
  for (const v of [0, top / 2, top]) {
    svg.append(el("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: "grid" }));
    svg.append(el("text", { x: PAD.left - 4, y: y(v) + 3, class: "tick end" }, `${fmtTick(v)}${unit}`));
  }
  const labelled = [
    [0, "tick"],
    [Math.floor(n / 2), "tick middle"],
    [n - 1, "tick end"],
  ];
  for (const [i, cls] of labelled) {
    if (n > 0) svg.append(el("text", { x: cls === "tick end" ? x(i + 1) : x(i), y: HEIGHT - 4, class: cls }, label(times[i])));
  }
  if (kind === "bars") {
    const barW = Math.max(1, plotW / n - 1);
    times.forEach((at, i) => {
      let base = 0;
      for (const s of series) {
        const v = s.values[i] || 0;
        if (v <= 0) continue;
        const rect = el("rect", { x: x(i), y: y(base + v), width: barW, height: y(base) - y(base + v), class: s.cls });
        rect.append(el("title", {}, `${label(at)} ${s.name}: ${v}`));
        svg.append(rect);
        base += v;
      }
    });
  } else {
    for (const s of series) {
      let d = "";
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) return;
        const joined = i > 0 && s.values[i - 1] !== null && s.values[i - 1] !== undefined;
        d += `${joined ? "L" : "M"}${(x(i) + plotW / n / 2).toFixed(1)},${y(v).toFixed(1)}`;
      });
      if (d) svg.append(el("path", { d, class: `line ${s.cls}` }));
      s.values.forEach((v, i) => {
        if (v === null || v === undefined) return;
        const dot = el("circle", { cx: x(i) + plotW / n / 2, cy: y(v), r: 1.8, class: s.cls });
        dot.append(el("title", {}, `${label(times[i])} ${s.name}: ${v}${unit}`));
        svg.append(dot);
      });
    }
  }
  return svg;
}

export function legend(series) {
  const box = document.createElement("div");
  box.className = "legend";
  for (const s of series) {
    const key = document.createElement("span");
    key.className = `key ${s.cls}`;
    box.append(key, ` ${s.name} `);
  }
  return box;
}
