// The services' retry schedule (services/common/retry.py) in the browser: delays start at
// `initial`, double after each failure up to `maximum`, and are drawn uniformly from [½, 1½) of
// the nominal delay (jitter from crypto.getRandomValues), so that many pages reloaded at once do
// not retry in lockstep.

export interface RetrySchedule {
  initial: number; // seconds
  maximum: number; // seconds
}

/** A uniform float in [0, 1) from the browser's CSPRNG (53 random bits). */
export function uniform(): number {
  const w = crypto.getRandomValues(new Uint32Array(2));
  return (w[0]! * 2 ** 21 + (w[1]! >>> 11)) / 2 ** 53;
}

export class Backoff {
  private nominal: number;

  constructor(readonly schedule: RetrySchedule) {
    if (!(schedule.initial > 0 && schedule.initial <= schedule.maximum)) {
      throw new RangeError("need 0 < initial <= maximum");
    }
    this.nominal = schedule.initial;
  }

  /** The next delay in seconds, at least `atLeast` (a server's Retry-After, capped at
   * `maximum`). */
  delay(atLeast = 0): number {
    const d = this.nominal * (0.5 + uniform());
    this.nominal = Math.min(this.nominal * 2, this.schedule.maximum);
    return Math.max(d, Math.min(atLeast, this.schedule.maximum));
  }

  reset(): void {
    this.nominal = this.schedule.initial;
  }
}

/** A response's Retry-After in seconds (0 when absent or an HTTP date). */
export function retryAfter(headers: Headers): number {
  const v = Number(headers.get("retry-after") ?? 0);
  return Number.isFinite(v) && v > 0 ? v : 0;
}

export function sleep(seconds: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const t = setTimeout(resolve, seconds * 1000);
    signal?.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });
}
