import { ErrorEnvelopeSchema } from '@burrow/contract';

/** Error responses every route may give, for the OpenAPI document and the serializer. */
export const ERROR_RESPONSES = {
  '4xx': ErrorEnvelopeSchema,
  '5xx': ErrorEnvelopeSchema,
} as const;
