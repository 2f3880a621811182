import { posix } from 'node:path';
import type { Readable } from 'node:stream';
import type { E2bFilesystemRequests, FileInfo, FileWatchEvent } from '@burrow/contract';
import { type DirectoryWatch, type SandboxFs, watchDirectory } from '@burrow/runtime';
import type { z } from 'zod';
import type { Services } from '../../services/services.js';
import { resolveUser } from '../../services/user-lookup.js';
import { ConnectError, type ServerStream } from './connect-protocol.js';
import { resolveE2bPath } from './envd-paths.js';
import type { EnvdContext } from './envd-process-adapter.js';

type Req<K extends keyof typeof E2bFilesystemRequests> = z.infer<(typeof E2bFilesystemRequests)[K]>;

/** Events a polling watcher keeps between two `GetWatcherEvents` calls; older ones are dropped. */
const MAX_POLLED_EVENTS = 10_000;

const FILE_TYPES = { file: 'FILE_TYPE_FILE', directory: 'FILE_TYPE_DIRECTORY', symlink: 'FILE_TYPE_SYMLINK' } as const;

/** Owner and group names of a file, as `ls -l` shows them. */
interface Ownership {
  owner: string;
  group: string;
}

/** `EntryInfo` (proto3 JSON) of a file. */
export function entryInfo(info: FileInfo, ownership?: Ownership): Record<string, unknown> {
  const type = info.type === 'other' ? 'FILE_TYPE_UNSPECIFIED' : FILE_TYPES[info.type];
  return {
    name: info.name,
    type,
    path: info.path,
    size: String(info.sizeBytes),
    mode: info.mode,
    permissions: permissions(info),
    ...(ownership ?? {}),
    modifiedTime: info.modifiedAt,
    // envd reports a link's target as an absolute path.
    ...(info.symlinkTarget === undefined
      ? {}
      : { symlinkTarget: posix.resolve(posix.dirname(info.path), info.symlinkTarget) }),
  };
}

/** `ls -l`-style permission string, as Go's `FileMode.String()` writes it. */
function permissions(info: FileInfo): string {
  const kind = info.type === 'directory' ? 'd' : info.type === 'symlink' ? 'L' : '-';
  let bits = '';
  for (let shift = 6; shift >= 0; shift -= 3) {
    const v = (info.mode >> shift) & 7;
    bits += `${v & 4 ? 'r' : '-'}${v & 2 ? 'w' : '-'}${v & 1 ? 'x' : '-'}`;
  }
  return kind + bits;
}

/** Names of uids and gids from the sandbox's `/etc/passwd` and `/etc/group` (numbers when not listed). */
async function ownershipOf(fs: SandboxFs): Promise<(path: string) => Promise<Ownership>> {
  const table = async (file: string) => {
    const names = new Map<number, string>();
    const text = await fs
      .openRead(file)
      .then(async ({ stream }) => {
        const chunks: Buffer[] = [];
        for await (const chunk of stream) chunks.push(chunk as Buffer);
        return Buffer.concat(chunks).toString('utf8');
      })
      .catch(() => '');
    for (const line of text.split('\n')) {
      const [name, , id] = line.split(':');
      if (name !== undefined && id !== undefined && /^\d+$/.test(id)) names.set(Number(id), name);
    }
    return names;
  };
  const [users, groups] = await Promise.all([table('/etc/passwd'), table('/etc/group')]);
  return async (path) => {
    const { uid, gid } = await fs.owner(path);
    return { owner: users.get(uid) ?? String(uid), group: groups.get(gid) ?? String(gid) };
  };
}

/** `EntryInfo` of each file, with its owner and group. */
async function entriesOf(fs: SandboxFs, infos: FileInfo[]): Promise<Record<string, unknown>[]> {
  const ownership = await ownershipOf(fs);
  return Promise.all(infos.map(async (info) => entryInfo(info, await ownership(info.path).catch(() => undefined))));
}

/** A watch kept between polls (`CreateWatcher` / `GetWatcherEvents` / `RemoveWatcher`). */
interface PolledWatcher {
  sandboxId: string;
  watch: DirectoryWatch;
  events: unknown[];
}

/** envd's `filesystem.Filesystem` service over Burrow's file calls (SandboxFs through FileService). */
export class EnvdFilesystem {
  private readonly watchers = new Map<string, PolledWatcher>();
  private nextWatcher = 1;

  constructor(private readonly services: Services) {}

  private path(ctx: EnvdContext, path: string): string {
    return resolveE2bPath(path, ctx.cwd);
  }

  async stat(ctx: EnvdContext, request: Req<'Stat'>): Promise<unknown> {
    const [entry] = await this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) =>
      entriesOf(fs, [await fs.stat(this.path(ctx, request.path))]),
    );
    return { entry };
  }

  async makeDir(ctx: EnvdContext, request: Req<'MakeDir'>): Promise<unknown> {
    const path = this.path(ctx, request.path);
    return this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) => {
      if (await fs.exists(path)) throw new ConnectError('already_exists', `${path} already exists`);
      const [entry] = await entriesOf(fs, [await this.owned(ctx, fs, path, () => fs.mkdir(path))]);
      return { entry };
    });
  }

  async move(ctx: EnvdContext, request: Req<'Move'>): Promise<unknown> {
    const from = this.path(ctx, request.source);
    const to = this.path(ctx, request.destination);
    return this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) => {
      await fs.rename(from, to);
      const [entry] = await entriesOf(fs, [await fs.stat(to)]);
      return { entry };
    });
  }

  async listDir(ctx: EnvdContext, request: Req<'ListDir'>): Promise<unknown> {
    const path = this.path(ctx, request.path);
    const depth = request.depth === undefined || request.depth === 0 ? 1 : request.depth;
    const entries = await this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) => {
      const dir = await fs.stat(path);
      if (dir.type === 'file') throw new ConnectError('invalid_argument', `${path} is not a directory`);
      return entriesOf(fs, await fs.list(path, { depth }));
    });
    return { entries };
  }

  async remove(ctx: EnvdContext, request: Req<'Remove'>): Promise<unknown> {
    const path = this.path(ctx, request.path);
    // As envd's RemoveAll: a path that does not exist is already removed.
    await this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) => {
      if (await fs.exists(path)) await fs.remove(path, { recursive: true });
    });
    return {};
  }

  /** A file's bytes for `GET /files`. @throws FsError, ApiError */
  async openRead(ctx: EnvdContext, path: string) {
    const resolved = this.path(ctx, path);
    return this.services.files.download(ctx.caller, ctx.sandboxId, async (fs) => (await fs.openRead(resolved)).stream);
  }

  /**
   * `POST /files`: write one file, creating parents. File metadata (`X-Metadata-*`) would need extended attributes,
   * which Burrow's file calls do not keep: it is refused rather than dropped.
   */
  async write(ctx: EnvdContext, path: string, body: Readable, metadata: Record<string, string>): Promise<unknown> {
    if (Object.keys(metadata).length > 0) {
      body.resume();
      throw new ConnectError('invalid_argument', 'file metadata (X-Metadata-* headers) is not supported by Burrow');
    }
    if (path === '') throw new ConnectError('invalid_argument', 'name the file with the path parameter');
    const resolved = this.path(ctx, path);
    const info = await this.services.files.upload(ctx.caller, ctx.sandboxId, body, (fs, source) =>
      this.owned(ctx, fs, resolved, () => fs.write(resolved, source)),
    );
    return { name: info.name, type: 'file', path: info.path };
  }

  /**
   * Run `create` (which makes `path` and any missing parents), then give what it made to the calling user, as
   * E2B's envd does by creating them as that user. Root's calls change nothing.
   */
  private async owned<T>(ctx: EnvdContext, fs: SandboxFs, path: string, create: () => Promise<T>): Promise<T> {
    if (ctx.user === undefined || ctx.user === 'root') return create();
    const user = await resolveUser(fs, ctx.user);
    const made = [path];
    for (let dir = posix.dirname(path); dir !== '/' && !(await fs.exists(dir)); dir = posix.dirname(dir))
      made.push(dir);
    const result = await create();
    for (const p of made.reverse()) await fs.chown(p, user.uid, user.gid);
    return result;
  }

  /** `WatchDir`: a start event, then one event per change until the client goes or the directory does. */
  async watchDir(ctx: EnvdContext, request: Req<'WatchDir'>, stream: ServerStream): Promise<void> {
    const root = this.path(ctx, request.path);
    const release = this.services.activity?.hold(ctx.sandboxId);
    let ended = false;
    const watch = await this.services.files.with(ctx.caller, ctx.sandboxId, async (fs) => {
      const dir = await fs.stat(root);
      if (dir.type !== 'directory') throw new ConnectError('invalid_argument', `${root} is not a directory`);
      return watchDirectory(
        fs,
        root,
        (event) => {
          if (event.type === 'end') {
            ended = true;
            stream.end();
            return;
          }
          for (const e of toE2bEvents(root, event)) {
            if (request.includeEntry === true && e.type !== 'EVENT_TYPE_REMOVE' && e.type !== 'EVENT_TYPE_RENAME') {
              // Best effort: the entry of a path that still exists when the event is sent.
              void fs
                .stat(`${root}/${e.name}`)
                .then((info) => stream.send({ filesystem: { ...e, entry: entryInfo(info) } }))
                .catch(() => stream.send({ filesystem: e }));
            } else void stream.send({ filesystem: e });
          }
        },
        { recursive: request.recursive === true },
      );
    });
    await stream.send({ start: {} });
    try {
      while (stream.isOpen && !ended) {
        await Promise.race([stream.closed, sleep(1000)]);
        if (stream.isOpen && !(await this.services.files.isRunning(ctx.caller, ctx.sandboxId).catch(() => false))) {
          stream.drop();
        }
      }
    } finally {
      release?.();
      await watch.close();
    }
  }

  async createWatcher(ctx: EnvdContext, request: Req<'CreateWatcher'>): Promise<unknown> {
    const root = this.path(ctx, request.path);
    const entry: PolledWatcher = {
      sandboxId: ctx.sandboxId,
      watch: undefined as unknown as DirectoryWatch,
      events: [],
    };
    entry.watch = await this.services.files.with(ctx.caller, ctx.sandboxId, (fs) =>
      watchDirectory(
        fs,
        root,
        (event) => {
          for (const e of toE2bEvents(root, event)) {
            entry.events.push(e);
            if (entry.events.length > MAX_POLLED_EVENTS) entry.events.shift();
          }
        },
        { recursive: request.recursive === true },
      ),
    );
    const watcherId = `w${this.nextWatcher++}`;
    this.watchers.set(watcherId, entry);
    return { watcherId };
  }

  async watcherEvents(ctx: EnvdContext, request: Req<'GetWatcherEvents'>): Promise<unknown> {
    const entry = this.watcher(ctx, request.watcherId);
    const events = entry.events;
    entry.events = [];
    return { events };
  }

  async removeWatcher(ctx: EnvdContext, request: Req<'RemoveWatcher'>): Promise<unknown> {
    const entry = this.watcher(ctx, request.watcherId);
    this.watchers.delete(request.watcherId);
    await entry.watch.close();
    return {};
  }

  private watcher(ctx: EnvdContext, id: string): PolledWatcher {
    const entry = this.watchers.get(id);
    if (entry === undefined || entry.sandboxId !== ctx.sandboxId)
      throw new ConnectError('not_found', `no watcher ${id}`);
    return entry;
  }
}

/** E2B events of one Burrow watch event; names are relative to the watched directory. */
function toE2bEvents(root: string, event: FileWatchEvent): Array<{ name: string; type: string }> {
  const rel = (path: string) => (path.startsWith(`${root}/`) ? path.slice(root.length + 1) : path.replace(/^\//, ''));
  switch (event.type) {
    case 'create':
      return [{ name: rel(event.path), type: 'EVENT_TYPE_CREATE' }];
    case 'modify':
      return [{ name: rel(event.path), type: 'EVENT_TYPE_WRITE' }];
    case 'delete':
      return [{ name: rel(event.path), type: 'EVENT_TYPE_REMOVE' }];
    case 'rename':
      return [
        { name: rel(event.oldPath), type: 'EVENT_TYPE_RENAME' },
        { name: rel(event.path), type: 'EVENT_TYPE_CREATE' },
      ];
    default:
      return [];
  }
}

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}
