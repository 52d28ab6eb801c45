// Heatmap cells drawn by our own canvas code: one Path2D per colour level when cells are big
// enough to be seen as rectangles, an ImageData written pixel by pixel when they are small
// (thousands of 1–3 px cells make path building and anti-aliased fills the cost).

/** Colour levels of the count scale. */
export const LEVELS = 48;
/** Below this mean cell area (canvas px²) cells are written into an ImageData. */
const IMAGE_CELL_AREA_PX_MAX = 24;

/** Cells in canvas pixels, struct-of-arrays so 10^5..10^6 cells stay cheap to build. */
export interface Cells {
  n: number;
  x0: Float32Array;
  x1: Float32Array;
  y0: Float32Array; // top
  y1: Float32Array; // bottom
  level: Uint8Array;
}

export function allocCells(capacity: number): Cells {
  return {
    n: 0,
    x0: new Float32Array(capacity),
    x1: new Float32Array(capacity),
    y0: new Float32Array(capacity),
    y1: new Float32Array(capacity),
    level: new Uint8Array(capacity),
  };
}

export interface Box {
  left: number;
  top: number;
  width: number;
  height: number;
}

/** A perceptual ramp (dark blue → green → yellow) readable on light and dark backgrounds. */
export function palette(): Array<[number, number, number]> {
  const stops: Array<[number, number, number]> = [
    [40, 30, 110],
    [40, 90, 160],
    [30, 150, 140],
    [90, 195, 90],
    [200, 220, 40],
    [253, 231, 37],
  ];
  const out: Array<[number, number, number]> = [];
  for (let i = 0; i < LEVELS; i++) {
    const t = (i / (LEVELS - 1)) * (stops.length - 1);
    const k = Math.min(stops.length - 2, Math.floor(t));
    const f = t - k;
    const a = stops[k];
    const b = stops[k + 1];
    out.push([
      Math.round(a[0] + (b[0] - a[0]) * f),
      Math.round(a[1] + (b[1] - a[1]) * f),
      Math.round(a[2] + (b[2] - a[2]) * f),
    ]);
  }
  return out;
}

const PALETTE = palette();
const CSS = PALETTE.map(([r, g, b]) => `rgb(${r},${g},${b})`);

/** The colour level of a count on a log scale up to `maxCount`. */
export function levelOf(count: number, maxCount: number): number {
  if (maxCount <= 1) return LEVELS - 1;
  const f = Math.log(Math.max(1, count)) / Math.log(maxCount);
  return Math.max(0, Math.min(LEVELS - 1, Math.round(f * (LEVELS - 1))));
}

/**
 * A log colour scale from `lo` to `hi` (both > 0): the lowest level at `lo`, the highest at `hi`,
 * one level per equal ratio in between. `lo === hi` is all top level.
 */
export interface Scale {
  lo: number;
  hi: number;
}

export function scaleLevel(v: number, s: Scale): number {
  if (!(s.hi > s.lo)) return LEVELS - 1;
  const f = Math.log(Math.max(v, s.lo) / s.lo) / Math.log(s.hi / s.lo);
  return Math.max(0, Math.min(LEVELS - 1, Math.round(f * (LEVELS - 1))));
}

/** The value a level stands for (its centre), the inverse of `scaleLevel`. */
export function levelValue(level: number, s: Scale): number {
  if (!(s.hi > s.lo)) return s.hi;
  return s.lo * Math.pow(s.hi / s.lo, level / (LEVELS - 1));
}

/** The CSS colour of a level, for legends. */
export function levelCss(level: number): string {
  return CSS[Math.max(0, Math.min(LEVELS - 1, level))];
}

/** The RGB of a level (tests compare canvas pixels against it). */
export function levelRgb(level: number): [number, number, number] {
  return PALETTE[Math.max(0, Math.min(LEVELS - 1, level))];
}

export type Mode = 'path' | 'image';

export function chooseMode(cells: Cells): Mode {
  if (cells.n === 0) return 'path';
  let area = 0;
  // A sample of cells is enough to tell small from large.
  const step = Math.max(1, Math.floor(cells.n / 256));
  let k = 0;
  for (let i = 0; i < cells.n; i += step, k++) {
    area += (cells.x1[i] - cells.x0[i]) * (cells.y1[i] - cells.y0[i]);
  }
  return area / k < IMAGE_CELL_AREA_PX_MAX ? 'image' : 'path';
}

/** Draws the cells clipped to `box`; returns the mode used. */
export function drawCells(ctx: CanvasRenderingContext2D, cells: Cells, box: Box, mode?: Mode): Mode {
  const m = mode ?? chooseMode(cells);
  if (m === 'image') drawImage(ctx, cells, box);
  else drawPaths(ctx, cells, box);
  return m;
}

function drawPaths(ctx: CanvasRenderingContext2D, cells: Cells, box: Box): void {
  const paths: Array<Path2D | null> = new Array(LEVELS).fill(null);
  for (let i = 0; i < cells.n; i++) {
    const l = cells.level[i];
    let p = paths[l];
    if (p === null) {
      p = new Path2D();
      paths[l] = p;
    }
    // Edges snapped to whole pixels: neighbouring cells then share an edge exactly, where
    // anti-aliased fractional edges would leave a light seam between them.
    const x0 = Math.round(cells.x0[i]);
    const y0 = Math.round(cells.y0[i]);
    const x1 = Math.max(x0 + 1, Math.round(cells.x1[i]));
    // At least one pixel, as in the ImageData path, so a thin bin alone in its slice shows.
    const y1 = Math.max(y0 + 1, Math.round(cells.y1[i]));
    p.rect(x0, y0, x1 - x0, y1 - y0);
  }
  ctx.save();
  ctx.beginPath();
  ctx.rect(box.left, box.top, box.width, box.height);
  ctx.clip();
  for (let l = 0; l < LEVELS; l++) {
    const p = paths[l];
    if (p === null) continue;
    ctx.fillStyle = CSS[l];
    ctx.fill(p);
  }
  ctx.restore();
}

const PACKED = PALETTE.map(([r, g, b]) => (255 << 24) | (b << 16) | (g << 8) | r);

let imageCache: ImageData | null = null;

function drawImage(ctx: CanvasRenderingContext2D, cells: Cells, box: Box): void {
  const w = Math.max(1, Math.round(box.width));
  const h = Math.max(1, Math.round(box.height));
  // One buffer reused across redraws (a 1600×800 canvas is 5 MB to allocate and zero).
  if (imageCache === null || imageCache.width !== w || imageCache.height !== h) {
    imageCache = ctx.createImageData(w, h);
  }
  const img = imageCache;
  const px = new Uint32Array(img.data.buffer);
  px.fill(0);
  for (let i = 0; i < cells.n; i++) {
    let a = Math.floor(cells.x0[i] - box.left);
    let b = Math.max(a + 1, Math.floor(cells.x1[i] - box.left));
    let c = Math.floor(cells.y0[i] - box.top);
    let d = Math.max(c + 1, Math.floor(cells.y1[i] - box.top));
    if (a < 0) a = 0;
    if (c < 0) c = 0;
    if (b > w) b = w;
    if (d > h) d = h;
    const colour = PACKED[cells.level[i]];
    // Cells are a few pixels wide: a plain loop beats a TypedArray.fill call per row.
    for (let y = c; y < d; y++) {
      const row = y * w;
      for (let x = row + a, e = row + b; x < e; x++) px[x] = colour;
    }
  }
  // Drawn first (uPlot's drawClear hook), so nothing beneath is lost by replacing pixels.
  ctx.putImageData(img, Math.round(box.left), Math.round(box.top));
}

/** The render benchmark: `slices × bins` synthetic cells into a canvas; median ms of `runs`. */
export function bench(slices: number, bins: number, runs: number, mode?: Mode): { ms: number[]; median: number; mode: Mode; cells: number } {
  const canvas = document.createElement('canvas');
  canvas.width = 1600;
  canvas.height = 800;
  const ctx = canvas.getContext('2d');
  if (ctx === null) throw new Error('no 2d context');
  const box = { left: 0, top: 0, width: canvas.width, height: canvas.height };
  const ms: number[] = [];
  let used: Mode = 'path';
  let sink = 0;
  for (let r = 0; r < runs; r++) {
    const t0 = performance.now();
    // Building the cells from bins is part of a redraw, so it is timed too.
    const cells = allocCells(slices * bins);
    const cw = box.width / slices;
    const ch = box.height / bins;
    for (let s = 0; s < slices; s++) {
      for (let k = 0; k < bins; k++) {
        const i = cells.n++;
        cells.x0[i] = s * cw;
        cells.x1[i] = (s + 1) * cw;
        cells.y0[i] = box.height - (k + 1) * ch;
        cells.y1[i] = box.height - k * ch;
        const count = 1 + ((s * 7919 + k * 104729 + r) % 1000);
        cells.level[i] = levelOf(count, 1000);
      }
    }
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    used = drawCells(ctx, cells, box, mode);
    // Reading one pixel forces the drawing to finish before the clock stops.
    sink += ctx.getImageData(0, 0, 1, 1).data[0];
    ms.push(performance.now() - t0);
  }
  const sorted = [...ms].sort((a, b) => a - b);
  void sink;
  return { ms, median: sorted[Math.floor(sorted.length / 2)], mode: used, cells: slices * bins };
}
