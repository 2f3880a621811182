import {
  BuildTemplateRequestSchema,
  type TemplateBuildEvent,
  TemplateListSchema,
  TemplateParamsSchema,
  TemplateSchema,
} from '@burrow/contract';
import { z } from 'zod';
import type { Services } from '../services/services.js';
import { mapError } from './error-mapping.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

/** `/v1/templates`: list, get, build (admin; optionally streamed as server-sent events), delete (admin). */
export function registerTemplateRoutes(app: ZodApp, services: Services): void {
  const tags = ['templates'];
  app.get(
    '/templates',
    {
      schema: {
        tags,
        summary: 'List the templates you can use (public ones and your tenant’s)',
        response: { 200: TemplateListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ items: await services.templates.list(principalOf(request)) }),
  );
  app.get(
    '/templates/:name',
    {
      schema: {
        tags,
        summary: 'Get a template',
        params: TemplateParamsSchema,
        response: { 200: TemplateSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.templates.get(principalOf(request), request.params.name),
  );
  app.post(
    '/templates',
    {
      schema: {
        tags,
        summary:
          'Build a template (admin). With `Accept: text/event-stream` the answer is a stream of TemplateBuildEvent ' +
          'JSON objects (`data:` lines): log lines, then done or error',
        body: BuildTemplateRequestSchema,
        response: { 201: TemplateSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const caller = principalOf(request);
      const pending = await services.templates.begin(caller, request.body);
      const wantsEvents = (request.headers.accept ?? '').includes('text/event-stream');
      if (!wantsEvents) return reply.code(201).send(await pending.run());
      const abort = new AbortController();
      request.raw.on('close', () => {
        if (!reply.raw.writableFinished) abort.abort();
      });
      reply.hijack();
      reply.raw.writeHead(200, {
        'content-type': 'text/event-stream; charset=utf-8',
        'cache-control': 'no-cache',
        'x-accel-buffering': 'no',
        'x-request-id': request.id,
      });
      const send = (event: TemplateBuildEvent) => reply.raw.write(`data: ${JSON.stringify(event)}\n\n`);
      try {
        const template = await pending.run({ onLog: (line) => send({ type: 'log', line }), signal: abort.signal });
        send({ type: 'done', template });
      } catch (error) {
        const mapped = mapError(error, request.id);
        send({ type: 'error', code: mapped.envelope.error.code, message: mapped.envelope.error.message });
      }
      reply.raw.end();
      return reply;
    },
  );
  app.delete(
    '/templates/:name',
    {
      schema: {
        tags,
        summary: 'Delete a template (admin); refused for base and for templates in use',
        params: TemplateParamsSchema,
        response: { 204: z.null().describe('Deleted'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      await services.templates.remove(principalOf(request), request.params.name);
      return reply.code(204).send(null);
    },
  );
}
