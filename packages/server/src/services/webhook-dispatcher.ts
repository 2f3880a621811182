import { createHmac } from 'node:crypto';
import type { Logger } from 'pino';
import type { DueDelivery, EventStore } from '../store/event-store.js';
import { type Clock, isoNow } from '../util/clock.js';
import { toEvent } from './event-service.js';
import { postWebhook } from './webhook-address-policy.js';

/** Header carrying `t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`. */
export const SIGNATURE_HEADER = 'burrow-signature';

/**
 * The signature header value for `body` sent at `timestampSeconds`: HMAC-SHA256 with `secret` over
 * `"<timestampSeconds>.<body>"`, hex. A receiver recomputes it over the raw body and compares in constant time,
 * and refuses timestamps older than a few minutes (replays).
 * @example
 * signWebhook('whsec_…', '{"id":"1"}', 1764403200) // 't=1764403200,v1=5f…'
 */
export function signWebhook(secret: string, body: string, timestampSeconds: number): string {
  const mac = createHmac('sha256', secret).update(`${timestampSeconds}.${body}`).digest('hex');
  return `t=${timestampSeconds},v1=${mac}`;
}

/** Options of the {@link WebhookDispatcher}. */
export interface WebhookDispatcherOptions {
  events: EventStore;
  clock: Clock;
  logger: Logger;
  /** First retry delay; attempt n waits base × 2^(n-1), capped at 1 hour. @default 1000 (1 s) */
  retryBaseMs?: number;
  /** Attempts before a delivery is `failed`. @default 10 */
  maxAttempts?: number;
  /** Time a receiver gets to answer, ms. @default 10_000 (10 s) */
  requestTimeoutMs?: number;
  /** Time between looks for due retries, ms. @default 1000 (1 s) */
  pollIntervalMs?: number;
  /**
   * Send to loopback, private, link-local and reserved addresses too (BURROW_WEBHOOK_ALLOW_PRIVATE). Otherwise a
   * delivery whose host is or resolves to one fails (checked at each connection, so DNS rebinding cannot get
   * around it). @default false
   */
  allowInternalTargets?: boolean;
}

/**
 * Sends queued webhook deliveries: POST of the event JSON, signed ({@link signWebhook}), a 2xx answer is
 * `delivered`; anything else is retried with exponential backoff until `maxAttempts`, then `failed`. The state
 * of every delivery is in the store, so retries survive a restart.
 */
export class WebhookDispatcher {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> | null = null;
  private again = false;
  private stopped = true;

  constructor(private readonly options: WebhookDispatcherOptions) {}

  /** Start polling for due deliveries. */
  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    this.schedule(0);
  }

  /** Look for due deliveries now (after an event was appended). */
  kick(): void {
    if (this.stopped) return;
    if (this.running !== null) {
      this.again = true;
      return;
    }
    this.schedule(0);
  }

  /** Stop polling and wait for attempts in progress. */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = null;
    await this.running?.catch(() => undefined);
  }

  /** One pass over due deliveries. */
  async runOnce(): Promise<void> {
    const due = await this.options.events.dueDeliveries(isoNow(this.options.clock), 50);
    await Promise.all(due.map((d) => this.attempt(d)));
  }

  private schedule(delayMs: number): void {
    if (this.timer !== null) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.running = this.runOnce()
        .catch((error: unknown) => this.options.logger.error({ err: error }, 'webhook pass failed'))
        .finally(() => {
          this.running = null;
          if (this.stopped) return;
          const next = this.again ? 0 : (this.options.pollIntervalMs ?? 1000);
          this.again = false;
          this.schedule(next);
        });
    }, delayMs);
  }

  private async attempt(delivery: DueDelivery): Promise<void> {
    const { clock, logger } = this.options;
    const body = JSON.stringify(toEvent(delivery.event));
    const timestamp = Math.floor(clock.nowMs() / 1000);
    let status: number | null = null;
    let error: string | null = null;
    try {
      status = await postWebhook(
        delivery.webhook.url,
        {
          'content-type': 'application/json',
          'user-agent': 'burrow-webhooks/1',
          [SIGNATURE_HEADER]: signWebhook(delivery.webhook.secret, body, timestamp),
          'burrow-event-id': String(delivery.event.seq),
          'burrow-delivery-id': delivery.id,
        },
        body,
        {
          allowInternal: this.options.allowInternalTargets ?? false,
          timeoutMs: this.options.requestTimeoutMs ?? 10_000,
        },
      );
    } catch (e) {
      error = (e as Error).message;
    }
    const attempts = delivery.attempts + 1;
    const ok = status !== null && status >= 200 && status < 300;
    const maxAttempts = this.options.maxAttempts ?? 10;
    const delayMs = Math.min((this.options.retryBaseMs ?? 1000) * 2 ** (attempts - 1), 3_600_000);
    const state = ok ? 'delivered' : attempts >= maxAttempts ? 'failed' : 'pending';
    if (!ok) {
      logger.info(
        { webhookId: delivery.webhook.id, deliveryId: delivery.id, status, error, attempts, state },
        'webhook delivery failed',
      );
    }
    await this.options.events.recordAttempt(delivery.id, {
      state,
      attempts,
      nextAttemptAt: new Date(clock.nowMs() + (ok ? 0 : delayMs)).toISOString(),
      status,
      error: error ?? (ok ? null : `HTTP ${status}`),
      at: isoNow(clock),
    });
  }
}
