import {
  Base64Schema,
  CommandInfoSchema,
  CommandListSchema,
  CommandParamsSchema,
  KillCommandRequestSchema,
  SandboxParamsSchema,
  StartCommandRequestSchema,
  WaitCommandQuerySchema,
} from '@burrow/contract';
import { z } from 'zod';
import { ControlKind } from '../services/command-service.js';
import type { Services } from '../services/services.js';
import { ERROR_RESPONSES } from './error-responses.js';
import { principalOf } from './principal.js';
import type { ZodApp } from './zod-app.js';

const StdinRequestSchema = z
  .object({
    /** Bytes for the command's stdin (PTY: its input), base64 ({@link Base64Schema}). */
    data: Base64Schema.max(14_000_000).optional(),
    /** Close stdin after `data` (on a PTY: send end-of-file, ^D). @default false */
    close: z.boolean().default(false),
  })
  .strict()
  .meta({ id: 'CommandStdinRequest' });

const ResizeRequestSchema = z
  .object({ cols: z.number().int().min(1).max(1000), rows: z.number().int().min(1).max(1000) })
  .strict()
  .meta({ id: 'PtyResizeRequest' });

/** `/v1/sandboxes/{id}/commands`: background commands and PTYs (start, list, get, wait, kill, stdin, resize). */
export function registerCommandRoutes(app: ZodApp, services: Services): void {
  const tags = ['commands'];
  app.post(
    '/sandboxes/:id/commands',
    {
      schema: {
        tags,
        summary: 'Start a background command (optionally on a PTY); answers once it runs, with its commandId and pid',
        params: SandboxParamsSchema,
        body: StartCommandRequestSchema,
        response: { 201: CommandInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const info = await services.commands.start(principalOf(request), request.params.id, request.body);
      return reply.code(201).send(info);
    },
  );
  app.get(
    '/sandboxes/:id/commands',
    {
      schema: {
        tags,
        summary: 'List background commands, running and recently exited (kept across pause/resume and restarts)',
        params: SandboxParamsSchema,
        response: { 200: CommandListSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => ({ commands: await services.commands.list(principalOf(request), request.params.id) }),
  );
  app.get(
    '/sandboxes/:id/commands/:commandId',
    {
      schema: {
        tags,
        summary: 'Get one background command',
        params: CommandParamsSchema,
        response: { 200: CommandInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => services.commands.get(principalOf(request), request.params.id, request.params.commandId),
  );
  app.get(
    '/sandboxes/:id/commands/:commandId/wait',
    {
      schema: {
        tags,
        summary: 'Wait up to timeoutMs for the command to end; answers with its info (status tells whether it ended)',
        params: CommandParamsSchema,
        querystring: WaitCommandQuerySchema,
        response: { 200: CommandInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) => {
      const abort = new AbortController();
      request.raw.on('close', () => abort.abort());
      return services.commands.wait(
        principalOf(request),
        request.params.id,
        request.params.commandId,
        request.query.timeoutMs,
        abort.signal,
      );
    },
  );
  app.post(
    '/sandboxes/:id/commands/:commandId/kill',
    {
      schema: {
        tags,
        summary: "Send a signal (default SIGKILL) to the command's whole process group",
        params: CommandParamsSchema,
        body: KillCommandRequestSchema,
        response: { 200: CommandInfoSchema, ...ERROR_RESPONSES },
      },
    },
    async (request) =>
      services.commands.kill(principalOf(request), request.params.id, request.params.commandId, request.body.signal),
  );
  app.post(
    '/sandboxes/:id/commands/:commandId/stdin',
    {
      schema: {
        tags,
        summary: 'Write bytes to the command stdin (or PTY input), optionally closing it',
        params: CommandParamsSchema,
        body: StdinRequestSchema,
        response: { 204: z.null().describe('Written'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { id, commandId } = request.params;
      const caller = principalOf(request);
      if (request.body.data !== undefined) {
        await services.commands.control(
          caller,
          id,
          commandId,
          ControlKind.stdin,
          Buffer.from(request.body.data, 'base64'),
        );
      }
      if (request.body.close)
        await services.commands.control(caller, id, commandId, ControlKind.stdinClose, Buffer.alloc(0));
      return reply.code(204).send(null);
    },
  );
  app.post(
    '/sandboxes/:id/commands/:commandId/resize',
    {
      schema: {
        tags,
        summary: 'Resize the command PTY; the program gets SIGWINCH and sees the new size',
        params: CommandParamsSchema,
        body: ResizeRequestSchema,
        response: { 204: z.null().describe('Resized'), ...ERROR_RESPONSES },
      },
    },
    async (request, reply) => {
      const { id, commandId } = request.params;
      await services.commands.control(
        principalOf(request),
        id,
        commandId,
        ControlKind.resize,
        resizePayload(request.body),
      );
      return reply.code(204).send(null);
    },
  );
}

/** The resize control record's payload: columns and rows, u16 big-endian each. */
export function resizePayload(size: { cols: number; rows: number }): Buffer {
  const payload = Buffer.alloc(4);
  payload.writeUInt16BE(size.cols, 0);
  payload.writeUInt16BE(size.rows, 2);
  return payload;
}
