// Log-linear histogram bins as the API returns them: [val, exp, count], val a signed two-digit
// mantissa (0 = the zero bin), the bin [val/10·10^exp, (val+1)/10·10^exp) for positive val.

export type RawBin = [number, number, number];

export interface Bin {
  lo: number;
  hi: number;
  count: number;
  zero: boolean;
}

/** 10^e parsed from text, so it is the nearest double (Math.pow may be off by an ulp). */
function pow10(e: number): number {
  return Number(`1e${e}`);
}

export function binOf([val, exp, count]: RawBin): Bin {
  if (val === 0) return { lo: 0, hi: 0, count, zero: true };
  const edge = (val / 10) * pow10(exp);
  const width = pow10(exp - 1);
  return edge < 0
    ? { lo: edge - width, hi: edge, count, zero: false }
    : { lo: edge, hi: edge + width, count, zero: false };
}

export function bins(raw: RawBin[] | undefined | null): Bin[] {
  if (!raw) return [];
  return raw.map(binOf).sort((a, b) => a.lo - b.lo || a.hi - b.hi);
}

export function total(bs: Bin[]): number {
  let n = 0;
  for (const b of bs) n += b.count;
  return n;
}

/** Merges several histograms bin by bin (the whole-range histogram). */
export function merge(all: RawBin[][]): RawBin[] {
  const m = new Map<string, RawBin>();
  for (const hs of all) {
    for (const [v, e, c] of hs) {
      const k = `${v},${e}`;
      const have = m.get(k);
      if (have) have[2] += c;
      else m.set(k, [v, e, c]);
    }
  }
  return [...m.values()];
}

/** The share of samples ≤ t, interpolating linearly inside the bin holding t (as the server). */
export function inverseQuantile(bs: Bin[], t: number): number {
  const n = total(bs);
  if (n === 0) return NaN;
  let below = 0;
  for (const b of bs) {
    const lo = b.zero ? -1e-128 : b.lo;
    const hi = b.zero ? 1e-128 : b.hi;
    if (t < lo) return below / n;
    if (t < hi) return b.zero ? below / n : (below + ((t - lo) / (hi - lo)) * b.count) / n;
    below += b.count;
  }
  return 1;
}

/** Value at quantile q (type 7-like, linear inside the bin); for the breakout statistics. */
export function quantile(bs: Bin[], q: number): number {
  const n = total(bs);
  if (n === 0) return NaN;
  const target = q * n;
  let seen = 0;
  for (const b of bs) {
    if (seen + b.count >= target) {
      if (b.zero) return 0;
      const f = b.count === 0 ? 0 : (target - seen) / b.count;
      return b.lo + (b.hi - b.lo) * Math.max(0, Math.min(1, f));
    }
    seen += b.count;
  }
  const last = bs[bs.length - 1];
  return last.hi;
}

export function mean(bs: Bin[]): number {
  const n = total(bs);
  if (n === 0) return NaN;
  let s = 0;
  for (const b of bs) s += b.count * (b.zero ? 0 : (b.lo + b.hi) / 2);
  return s / n;
}

/** Short number for labels: 1.23k, 4.5ms-like precision without units. */
export function fmt(x: number): string {
  if (!Number.isFinite(x)) return '–';
  const a = Math.abs(x);
  if (a !== 0 && (a < 1e-3 || a >= 1e6)) return x.toExponential(2);
  return Number(x.toPrecision(4)).toString();
}
