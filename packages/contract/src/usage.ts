import { z } from 'zod';
import { InstantSchema, NameSchema } from './common.js';

/** Usage of one group. Seconds and GiB-seconds (GiB = 1024 MiB), summed over the window. */
export const UsageTotalsSchema = z.object({
  runningSeconds: z.number(),
  /** Running seconds × vCPUs. */
  vcpuSeconds: z.number(),
  /** Running seconds × GiB of memory. */
  memoryGiBSeconds: z.number(),
  pausedSeconds: z.number(),
  /** Seconds stopped or in error (disk kept). */
  stoppedSeconds: z.number(),
  /** Paused and stopped seconds × GiB of disk. */
  diskGiBSeconds: z.number(),
  /** Seconds × GiB of each snapshot kept. */
  snapshotGiBSeconds: z.number(),
});
export type UsageTotals = z.infer<typeof UsageTotalsSchema>;

/** Query of `GET /v1/usage`. */
export const UsageQuerySchema = z
  .object({
    /** Window start (inclusive). @default 24 hours before `to` */
    from: InstantSchema.optional(),
    /** Window end (exclusive). @default now */
    to: InstantSchema.optional(),
    /** `sandbox`, `day` (UTC) or `label:KEY` (sandboxes without the label group under ""). @default 'sandbox' */
    groupBy: z
      .string()
      .regex(/^(sandbox|day|label:[a-zA-Z0-9._/-]{1,63})$/, 'use sandbox, day or label:KEY')
      .default('sandbox'),
    /** Another tenant's usage (admin keys). @default the caller's tenant */
    tenant: NameSchema.optional(),
  })
  .refine((q) => q.from === undefined || q.to === undefined || Date.parse(q.from) <= Date.parse(q.to), {
    message: '`from` is after `to`',
    path: ['from'],
  });

/** Response of `GET /v1/usage`. */
export const UsageReportSchema = z
  .object({
    tenantId: z.string(),
    from: InstantSchema,
    to: InstantSchema,
    groupBy: z.string(),
    groups: z.array(UsageTotalsSchema.extend({ key: z.string() })),
    total: UsageTotalsSchema,
  })
  .meta({ id: 'UsageReport' });
export type UsageReport = z.infer<typeof UsageReportSchema>;
