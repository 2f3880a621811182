import { existsSync } from 'node:fs';
import { readdir, symlink, writeFile } from 'node:fs/promises';
import { get, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { ErrorEnvelopeSchema, FileInfoSchema } from '@burrow/contract';
import type { LightMyRequestResponse } from 'fastify';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
let id = '';
beforeAll(async () => {
  h = await startHarness();
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
  id = res.json().id;
});
afterAll(async () => {
  await h?.close();
});

function expectError(res: LightMyRequestResponse, status: number, code: string) {
  expect(res.statusCode, res.body).toBe(status);
  expect(ErrorEnvelopeSchema.parse(res.json()).error.code).toBe(code);
}
const q = (path: string) => encodeURIComponent(path);

describe('files', () => {
  test('write, stat, read, list, mkdir, rename, remove round trip', async () => {
    const bytes = Buffer.from([0, 1, 2, 255, 10, 13]);
    const put = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/dir/a.bin')}&mode=600`,
      headers: { ...h.admin, 'content-type': 'application/octet-stream' },
      payload: bytes,
    });
    expect(put.statusCode, put.body).toBe(200);
    expect(FileInfoSchema.parse(put.json())).toMatchObject({
      path: '/root/dir/a.bin',
      sizeBytes: 6,
      type: 'file',
      mode: 0o600,
    });
    const got = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/dir/a.bin')}`,
      headers: h.admin,
    });
    expect(got.headers['content-type']).toBe('application/octet-stream');
    expect(got.rawPayload.equals(bytes)).toBe(true);
    const stat = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/stat?path=${q('/root/dir')}`,
      headers: h.admin,
    });
    expect(stat.json().type).toBe('directory');
    const mk = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/files/mkdir`,
      headers: h.admin,
      payload: { path: '/root/dir/sub/deeper' },
    });
    expect(mk.statusCode).toBe(200);
    const list = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files?path=${q('/root/dir')}&depth=2`,
      headers: h.admin,
    });
    expect(
      list
        .json()
        .items.map((f: { path: string }) => f.path)
        .sort(),
    ).toEqual(['/root/dir/a.bin', '/root/dir/sub', '/root/dir/sub/deeper']);
    const mv = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/files/rename`,
      headers: h.admin,
      payload: { from: '/root/dir/a.bin', to: '/root/b.bin' },
    });
    expect(mv.statusCode).toBe(204);
    expectError(
      await h.burrow.app.inject({
        method: 'GET',
        url: `/v1/sandboxes/${id}/files/stat?path=${q('/root/dir/a.bin')}`,
        headers: h.admin,
      }),
      404,
      'file_not_found',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'DELETE',
        url: `/v1/sandboxes/${id}/files?path=${q('/root/dir')}`,
        headers: h.admin,
      }),
      409,
      'directory_not_empty',
    );
    expect(
      (
        await h.burrow.app.inject({
          method: 'DELETE',
          url: `/v1/sandboxes/${id}/files?path=${q('/root/dir')}&recursive=true`,
          headers: h.admin,
        })
      ).statusCode,
    ).toBe(204);
    expectError(
      await h.burrow.app.inject({
        method: 'GET',
        url: `/v1/sandboxes/${id}/files/content?path=${q('/root')}`,
        headers: h.admin,
      }),
      400,
      'is_a_directory',
    );
  });

  test('paths with NUL, relative paths and escapes stay inside the root', async () => {
    expectError(
      await h.burrow.app.inject({
        method: 'GET',
        url: `/v1/sandboxes/${id}/files/stat?path=${q('/root/a\0b')}`,
        headers: h.admin,
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'GET',
        url: `/v1/sandboxes/${id}/files/stat?path=${q('etc/passwd')}`,
        headers: h.admin,
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}/files/stat`, headers: h.admin }),
      400,
      'invalid_request',
    );
    // `..` stops at the sandbox root: the host's /etc/passwd is never reached.
    const escaped = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/../../etc/passwd')}`,
      headers: h.admin,
    });
    expectError(escaped, 404, 'file_not_found');
    // A symlink planted inside the sandbox pointing at / resolves to the sandbox root, not the host root.
    await symlink('/', join(h.driver.rootDir(id), 'root', 'escape'));
    const viaLink = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/escape/etc/passwd')}`,
      headers: h.admin,
    });
    expectError(viaLink, 404, 'file_not_found');
    await writeFile(join(h.driver.rootDir(id), 'inside.txt'), 'inside');
    const inside = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/escape/inside.txt')}`,
      headers: h.admin,
    });
    expect(inside.body).toBe('inside');
    const write = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/escape/planted')}`,
      headers: { ...h.admin, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('x'),
    });
    expect(write.statusCode, write.body).toBe(200);
    expect(write.json().path).toBe('/planted');
    // /tmp is the sandbox's tmpfs, out of the files API's reach: refused with a hint, never written to the disk's /tmp.
    const toTmp = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/escape/tmp/planted')}`,
      headers: { ...h.admin, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('x'),
    });
    expectError(toTmp, 400, 'invalid_path');
    expect(toTmp.json().error.message).toContain('/root or /var/tmp');
  });

  test('uploads need octet-stream; modes are validated; other tenants and unknown ids get 404', async () => {
    expectError(
      await h.burrow.app.inject({
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files/content?path=${q('/root/x')}`,
        headers: h.admin,
        payload: { not: 'bytes' },
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'PUT',
        url: `/v1/sandboxes/${id}/files/content?path=${q('/root/x')}&mode=999`,
        headers: { ...h.admin, 'content-type': 'application/octet-stream' },
        payload: Buffer.from('x'),
      }),
      400,
      'invalid_request',
    );
    expectError(
      await h.burrow.app.inject({
        method: 'GET',
        url: `/v1/sandboxes/sbx_00000000000000000000/files?path=/`,
        headers: h.admin,
      }),
      404,
      'sandbox_not_found',
    );
    const other = await h.burrow.services.keys.create(
      { keyId: 'key_x', tenantId: 'default', role: 'admin' },
      { name: 'other', tenantId: 'other', role: 'member' },
    );
    const otherHeaders = { authorization: `Bearer ${other.secret}` };
    expectError(
      await h.burrow.app.inject({ method: 'GET', url: `/v1/sandboxes/${id}/files?path=/`, headers: otherHeaders }),
      404,
      'sandbox_not_found',
    );
  });
});

/** The harness app's URL, listening on 127.0.0.1 (once for the whole file). */
async function listening(): Promise<string> {
  const server = h.burrow.app.server;
  if (server.listening) return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return h.burrow.app.listen({ host: '127.0.0.1', port: 0 });
}

describe('file transfers in flight', () => {
  test('a pause ends an upload (409, nothing written, no temporary file) and a download (body cut short)', async () => {
    const created = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
    const sid = String(created.json().id);
    const root = h.driver.rootDir(sid);
    const url = new URL(await listening());
    const pause = async () => {
      const res = await h.burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${sid}/pause`, headers: h.admin });
      expect(res.statusCode, res.body).toBe(200);
    };
    const staged = async () => (await readdir(join(root, '.burrow-tmp')).catch(() => [] as string[])).length;
    try {
      // An upload that sent 1 MiB and waits for more when the pause comes.
      const upload = request(`${url.origin}/v1/sandboxes/${sid}/files/content?path=${q('/root/big.bin')}`, {
        method: 'PUT',
        headers: { ...h.admin, 'content-type': 'application/octet-stream' },
      });
      const answered = new Promise<{ status: number; body: string }>((resolve, reject) => {
        upload.on('response', (res) => {
          let body = '';
          res.on('data', (c: Buffer) => {
            body += c.toString();
          });
          res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
        });
        upload.on('error', reject);
      });
      upload.write(Buffer.alloc(1024 * 1024, 1));
      for (let i = 0; i < 400 && (await staged()) === 0; i++) await new Promise((r) => setTimeout(r, 25));
      expect(await staged()).toBe(1);
      await pause();
      const refused = await answered;
      upload.destroy();
      expect(refused.status, refused.body).toBe(409);
      expect(JSON.parse(refused.body).error.code).toBe('conflict');
      expect(await staged()).toBe(0);
      expect(existsSync(join(root, 'root/big.bin'))).toBe(false);

      // A download whose client stopped reading after its first bytes when the pause comes.
      const resumed = await h.burrow.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${sid}/resume`,
        headers: h.admin,
      });
      expect(resumed.statusCode, resumed.body).toBe(200);
      const sizeBytes = 32 * 1024 * 1024;
      await writeFile(join(root, 'root/large.bin'), Buffer.alloc(sizeBytes, 2));
      const received = await new Promise<{ bytes: number; complete: boolean }>((resolve, reject) => {
        get(
          `${url.origin}/v1/sandboxes/${sid}/files/content?path=${q('/root/large.bin')}`,
          { headers: h.admin },
          (res) => {
            expect(res.statusCode).toBe(200);
            let bytes = 0;
            res.once('data', (c: Buffer) => {
              bytes += c.length;
              res.pause();
              void pause().then(() => {
                res.on('data', (more: Buffer) => {
                  bytes += more.length;
                });
                res.resume();
              }, reject);
            });
            res.on('error', () => undefined);
            res.on('close', () => resolve({ bytes, complete: res.complete }));
          },
        ).on('error', reject);
      });
      expect(received.complete).toBe(false);
      expect(received.bytes).toBeLessThan(sizeBytes);
    } finally {
      await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${sid}`, headers: h.admin });
    }
  });
});

describe('an open watch', () => {
  /** Open a watch over HTTP and read its events until `end` (or 20 s). */
  async function openWatch(url: string): Promise<{ events: Promise<string> }> {
    const res = await fetch(`${url}/v1/sandboxes/${id}/files/watch?path=${q('/root')}&recursive=true`, {
      headers: h.admin,
      signal: AbortSignal.timeout(20_000),
    });
    expect(res.status).toBe(200);
    const reader = res.body?.getReader();
    let text = '';
    while (!text.includes('"ready"')) {
      const chunk = await reader?.read();
      if (chunk === undefined || chunk.done) break;
      text += Buffer.from(chunk.value).toString();
    }
    const events = (async () => {
      while (!text.includes('"end"')) {
        const chunk = await reader?.read().catch(() => undefined);
        if (chunk === undefined || chunk.done) break;
        text += Buffer.from(chunk.value).toString();
      }
      return text;
    })();
    return { events };
  }

  test('is ended by a pause and a delete instead of failing them (its handles kept the overlay busy)', async () => {
    const url = await listening();
    const first = await openWatch(url);
    // The pause used to fail after its checkpoint ("cannot unmount …: busy"), leaving a dead sandbox marked running.
    const paused = await h.burrow.app.inject({ method: 'POST', url: `/v1/sandboxes/${id}/pause`, headers: h.admin });
    expect(paused.statusCode, paused.body).toBe(200);
    expect(paused.json().state).toBe('paused');
    expect(await first.events).toMatch(/"type":"end","reason":"[^"]*pausing, stopping or being deleted/);
    const second = await openWatch(url); // resumes it (auto-resume)
    // The delete used to answer 500 "was not fully removed" until the watch noticed on its own.
    const deleted = await h.burrow.app.inject({ method: 'DELETE', url: `/v1/sandboxes/${id}`, headers: h.admin });
    expect(deleted.statusCode, deleted.body).toBe(204);
    expect(await second.events).toContain('"type":"end"');
  });
});
