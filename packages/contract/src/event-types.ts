/** Kinds of lifecycle event, as `EventTypeSchema` accepts them. */
export const EVENT_TYPES = [
  'created',
  'paused',
  'pause_failed',
  'resumed',
  'forked',
  'stopped',
  'started',
  'deleted',
  'expired',
  'error',
  'quota_denied',
  'warning',
  'snapshot_created',
  'snapshot_deleted',
] as const;
