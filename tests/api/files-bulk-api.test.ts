import { mkdir, readFile, stat, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import { ArchiveUploadResultSchema, type FileWatchEvent, FileWatchEventSchema } from '@burrow/contract';
import { Header } from 'tar';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { type Harness, startHarness } from './api-harness.js';

let h: Harness;
let id = '';
let root = '';
beforeAll(async () => {
  h = await startHarness();
  const res = await h.burrow.app.inject({ method: 'POST', url: '/v1/sandboxes', headers: h.admin, payload: {} });
  id = res.json().id;
  root = h.driver.rootDir(id);
});
afterAll(async () => {
  await h?.close();
});
const q = (path: string) => encodeURIComponent(path);

function tarOf(
  entries: { path: string; type: 'File' | 'SymbolicLink' | 'Directory'; body?: string; linkpath?: string }[],
) {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const body = Buffer.from(e.body ?? '');
    const block = Buffer.alloc(512);
    new Header({
      path: e.path,
      type: e.type,
      mode: 0o644,
      size: body.length,
      mtime: new Date(0),
      ...(e.linkpath ? { linkpath: e.linkpath } : {}),
    }).encode(block, 0);
    blocks.push(block, body, Buffer.alloc((512 - (body.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return Buffer.concat(blocks);
}

describe('files: batch, exists, chmod, archives, watch', () => {
  test('batch writes several files (utf8 and base64) in one call; exists and chmod', async () => {
    const batch = (files: Array<{ path: string; content: string; encoding?: string; mode?: string }>) =>
      h.burrow.app.inject({
        method: 'POST',
        url: `/v1/sandboxes/${id}/files/batch`,
        headers: h.admin,
        payload: { files },
      });
    const res = await batch([
      { path: '/root/b/one.txt', content: 'one' },
      {
        path: '/root/b/two.bin',
        content: Buffer.from([0, 255, 1]).toString('base64'),
        encoding: 'base64',
        mode: '600',
      },
    ]);
    expect(res.statusCode, res.body).toBe(200);
    expect(res.json().items.map((i: { path: string }) => i.path)).toEqual(['/root/b/one.txt', '/root/b/two.bin']);
    expect(await readFile(join(root, 'root/b/two.bin'))).toEqual(Buffer.from([0, 255, 1]));
    const exists = async (p: string) =>
      (
        await h.burrow.app.inject({
          method: 'GET',
          url: `/v1/sandboxes/${id}/files/exists?path=${q(p)}`,
          headers: h.admin,
        })
      ).json();
    expect(await exists('/root/b/one.txt')).toEqual({ exists: true });
    expect(await exists('/root/b/nope')).toEqual({ exists: false });
    // A batch stops at its first failing file: the error names it and the files written before it.
    const partial = await batch([
      { path: '/root/b/three.txt', content: '3' },
      { path: '/root/b/one.txt/under-a-file', content: 'x' },
      { path: '/root/b/four.txt', content: '4' },
    ]);
    expect(partial.statusCode, partial.body).toBe(400);
    expect(partial.json().error.code).toBe('not_a_directory');
    expect(partial.json().error.message).toContain('files[1] (/root/b/one.txt/under-a-file)');
    expect(partial.json().error.details).toEqual({
      failedIndex: 1,
      failedPath: '/root/b/one.txt/under-a-file',
      written: ['/root/b/three.txt'],
    });
    expect(await exists('/root/b/three.txt')).toEqual({ exists: true });
    expect(await exists('/root/b/four.txt')).toEqual({ exists: false });
    const notBase64 = await batch([{ path: '/root/b/garbled.bin', content: '!!!notb64', encoding: 'base64' }]);
    expect(notBase64.statusCode, notBase64.body).toBe(400);
    expect(notBase64.json().error.code).toBe('invalid_request');
    expect(notBase64.json().error.message).toContain('/files/0/content must be standard base64');
    expect(await exists('/root/b/garbled.bin')).toEqual({ exists: false });
    const ch = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/files/chmod`,
      headers: h.admin,
      payload: { path: '/root/b/one.txt', mode: '755' },
    });
    expect(ch.statusCode, ch.body).toBe(200);
    expect(ch.json().mode).toBe(0o755);
    expect((await stat(join(root, 'root/b/one.txt'))).mode & 0o777).toBe(0o755);
    const bad = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/files/chmod`,
      headers: h.admin,
      payload: { path: '/root/b/one.txt', mode: 'rwx' },
    });
    expect(bad.json().error.code).toBe('invalid_request');
    const missing = await h.burrow.app.inject({
      method: 'POST',
      url: `/v1/sandboxes/${id}/files/chmod`,
      headers: h.admin,
      payload: { path: '/root/b/missing', mode: '755' },
    });
    expect(missing.statusCode).toBe(404);
    expect(missing.json().error.code).toBe('file_not_found');
  });

  test('archive upload lists refused entries; download returns a tar of the tree', async () => {
    const up = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/archive?path=${q('/root/proj')}`,
      headers: { ...h.admin, 'content-type': 'application/x-tar' },
      payload: tarOf([
        { path: 'src/', type: 'Directory' },
        { path: 'src/main.py', type: 'File', body: 'print(1)\n' },
        { path: '../../evil', type: 'File', body: 'x' },
        { path: 'out', type: 'SymbolicLink', linkpath: '/etc' },
      ]),
    });
    expect(up.statusCode, up.body).toBe(200);
    const result = ArchiveUploadResultSchema.parse(up.json());
    expect(result).toMatchObject({ path: '/root/proj', files: 1, directories: 1, issueCount: 2 });
    expect(result.issues.map((i) => i.path).sort()).toEqual(['../../evil', 'out']);
    expect(await readFile(join(root, 'root/proj/src/main.py'), 'utf8')).toBe('print(1)\n');
    const down = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/archive?path=${q('/root/proj')}`,
      headers: h.admin,
    });
    expect(down.statusCode).toBe(200);
    expect(down.headers['content-type']).toBe('application/x-tar');
    expect(down.rawPayload.includes(Buffer.from('print(1)\n'))).toBe(true);
    expect(down.rawPayload.subarray(0, 4).toString()).toBe('src/');
    const notTar = await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/archive?path=${q('/root/proj2')}`,
      headers: { ...h.admin, 'content-type': 'application/x-tar' },
      payload: Buffer.alloc(1536, 65),
    });
    expect(notTar.statusCode).toBe(400);
    expect(notTar.json().error.code).toBe('invalid_request');
    expect(notTar.json().error.hint).toMatch(/tar -czf/); // says what to send
    const onFile = await h.burrow.app.inject({
      method: 'GET',
      url: `/v1/sandboxes/${id}/files/archive?path=${q('/root/proj/src/main.py')}`,
      headers: h.admin,
    });
    expect(onFile.json().error.code).toBe('not_a_directory');
  });

  test('watch streams events over server-sent events and never follows a planted symlink', async () => {
    await mkdir(join(root, 'root/w'), { recursive: true });
    await symlink('/', join(root, 'root/w-link'));
    const url = await h.burrow.app.listen({ port: 0, host: '127.0.0.1' });
    const abort = new AbortController();
    const res = await fetch(`${url}/v1/sandboxes/${id}/files/watch?path=${q('/root/w')}&recursive=true`, {
      headers: h.admin,
      signal: abort.signal,
    });
    expect(res.headers.get('content-type')).toContain('text/event-stream');
    const events: FileWatchEvent[] = [];
    const reader = res.body?.getReader();
    const decoder = new TextDecoder();
    let buffer = '';
    const pump = (async () => {
      for (;;) {
        const { value, done } = (await reader?.read()) ?? { done: true, value: undefined };
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        let cut = buffer.indexOf('\n\n');
        while (cut !== -1) {
          const line = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          if (line.startsWith('data: ')) events.push(FileWatchEventSchema.parse(JSON.parse(line.slice(6))));
          cut = buffer.indexOf('\n\n');
        }
      }
    })().catch(() => undefined);
    const until = async (pred: (e: FileWatchEvent) => boolean) => {
      for (let i = 0; i < 500 && !events.some(pred); i++) await new Promise((r) => setTimeout(r, 10));
      expect(events.some(pred), JSON.stringify(events)).toBe(true);
    };
    await until((e) => e.type === 'ready');
    await h.burrow.app.inject({
      method: 'PUT',
      url: `/v1/sandboxes/${id}/files/content?path=${q('/root/w/new.txt')}`,
      headers: { ...h.admin, 'content-type': 'application/octet-stream' },
      payload: Buffer.from('hi'),
    });
    // The API writes atomically (temporary name, then rename): the final name shows up.
    await until((e) => (e.type === 'create' || e.type === 'rename') && e.path === '/root/w/new.txt');
    abort.abort();
    await pump;
    const abortLink = new AbortController();
    const viaLink = await fetch(`${url}/v1/sandboxes/${id}/files/watch?path=${q('/root/w-link/root/w')}`, {
      headers: h.admin,
      signal: abortLink.signal,
    });
    // Resolved inside the sandbox: /root/w-link → / of the sandbox.
    expect(viaLink.status).toBe(200);
    abortLink.abort();
    const missing = await fetch(`${url}/v1/sandboxes/${id}/files/watch?path=${q('/root/nope')}`, { headers: h.admin });
    expect(missing.status).toBe(404);
    expect(((await missing.json()) as { error: { code: string } }).error.code).toBe('file_not_found');
  });
});
