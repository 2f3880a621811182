import { z } from 'zod';
import { ErrorCode } from './error-codes.js';

export { ERROR_HTTP_STATUS, ErrorCode } from './error-codes.js';

export const ErrorCodeSchema = z.enum(Object.values(ErrorCode) as [ErrorCode, ...ErrorCode[]]);

/** The one error envelope every non-2xx response carries: `{ error: { code, message, hint?, details?, requestId } }`. */
export const ErrorEnvelopeSchema = z
  .object({
    error: z.object({
      code: ErrorCodeSchema,
      message: z.string(),
      hint: z.string().optional(),
      details: z.unknown().optional(),
      requestId: z.string(),
    }),
  })
  .meta({ id: 'ErrorEnvelope' });

export type ErrorEnvelope = z.infer<typeof ErrorEnvelopeSchema>;
