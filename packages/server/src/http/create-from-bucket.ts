import type { CreateSandboxRequestSchema, Sandbox } from '@burrow/contract';
import type { z } from 'zod';
import type { Principal } from '../services/key-service.js';
import type { Services } from '../services/services.js';

/**
 * Create a sandbox; with `fromBucket`, fill its directory from the bucket prefix (a one-way sync down) before the
 * create answers, so the first command sees the files. The bucket name is checked before the sandbox is made; a
 * fill that fails deletes the sandbox and answers the fill's error (no half-filled sandbox is left).
 * @throws ApiError what the create throws, and `bucket_*`, `invalid_path` from the fill
 */
export async function createFilled(
  services: Services,
  caller: Principal,
  body: z.output<typeof CreateSandboxRequestSchema>,
): Promise<Sandbox> {
  const { fromBucket, ...create } = body;
  if (fromBucket === undefined) return services.sandboxes.create(caller, create);
  const sync = services.sync as NonNullable<Services['sync']>;
  await (services.buckets as NonNullable<Services['buckets']>).require(caller.tenantId, fromBucket.bucket);
  const sandbox = await services.sandboxes.create(caller, create);
  try {
    await sync.sync(caller, sandbox.id, { ...fromBucket, direction: 'down', delete: false });
  } catch (error) {
    await services.sandboxes.remove(caller, sandbox.id).catch(() => undefined);
    throw error;
  }
  return sandbox;
}
