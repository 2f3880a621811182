import { createHash } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { dirname } from 'node:path';
import { type Readable, Transform } from 'node:stream';
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  type S3Client,
} from '@aws-sdk/client-s3';
import { Upload } from '@aws-sdk/lib-storage';
import { ErrorCode, type FileInfo, type SyncResult } from '@burrow/contract';
import type { SandboxFs } from '@burrow/runtime';
import { ApiError } from '../util/api-error.js';
import { bucketError } from './bucket-service.js';

/** Object metadata key holding the sha256 (hex) of an object's bytes, written by every upload of a sync. */
export const SHA256_META = 'burrow-sha256';
/** Multipart part size of uploads, bytes: files up to this size go in one `PutObject`. */
const PART_BYTES = 16 * 1024 * 1024;

/** One side's view of a file at the last sync (the state file's entries, keyed by relative path). */
interface SyncedEntry {
  sizeBytes: number;
  /** The sandbox file's mtime, ms. */
  mtimeMs: number;
  /** The object's ETag. */
  etag: string;
}

/** A file in the sandbox directory. */
interface LocalFile {
  sizeBytes: number;
  mtimeMs: number;
  mode: number;
}

/** An object under the prefix. */
interface RemoteObject {
  key: string;
  sizeBytes: number;
  etag: string;
  modifiedMs: number;
}

/** What a sync works on. */
export interface SyncJob {
  fs: SandboxFs;
  client: S3Client;
  bucket: string;
  /** Key prefix without trailing slash; '' for the root. */
  prefix: string;
  /** Absolute directory in the sandbox. */
  path: string;
  direction: 'up' | 'down' | 'both';
  delete: boolean;
  /** Host file holding what the last sync of this (sandbox, path, bucket, prefix) saw. */
  stateFile: string;
  /** Aborted when the sandbox pauses, stops or is deleted. */
  signal: AbortSignal;
  /** `NAME.conflict-<time>`'s time. */
  nowMs: number;
}

/**
 * Copy a sandbox directory to, from, or both ways with a bucket prefix. Files are read and written through
 * {@link SandboxFs} (paths resolved inside the root, symlinks never followed out of it; symlinks and special files
 * are skipped and listed), every write lands whole or not at all (a staged file renamed into place in the sandbox,
 * a single or multipart object in the bucket), and each download is checked against the object's sha256 (our
 * metadata) or its MD5 ETag before it is renamed into place. The state file records what both sides held after
 * the last sync, so the next one moves only what changed since.
 *
 * Two-way rule: a file changed on one side goes to the other; changed on both sides, the newer (sandbox mtime vs
 * object LastModified) wins and the older is kept on both sides as `NAME.conflict-<YYYYMMDDTHHMMSSZ>`. A file
 * gone from one side since the last sync is removed from the other with `delete`, and copied back without it.
 * @throws ApiError `bucket_*` codes from S3, file errors from the sandbox
 */
export async function runSync(job: SyncJob): Promise<SyncResult> {
  const result: SyncResult = {
    uploaded: [],
    downloaded: [],
    deletedRemote: [],
    deletedLocal: [],
    conflicts: [],
    skipped: [],
    bytesUp: 0,
    bytesDown: 0,
  };
  if (job.direction !== 'up') await job.fs.mkdir(job.path);
  const state = await readState(job.stateFile);
  const local = await listLocal(job, result.skipped);
  const remote = await listRemote(job, result.skipped);
  const next: Record<string, SyncedEntry> = {};
  const names = [...new Set([...local.keys(), ...remote.keys()])].sort();
  const stamp = new Date(job.nowMs)
    .toISOString()
    .replace(/[-:]/g, '')
    .replace(/\.\d+Z$/, 'Z');
  for (const rel of names) {
    job.signal.throwIfAborted();
    const l = local.get(rel);
    const r = remote.get(rel);
    const s = state[rel];
    const localChanged = l !== undefined && (s === undefined || l.sizeBytes !== s.sizeBytes || l.mtimeMs !== s.mtimeMs);
    const remoteChanged = r !== undefined && (s === undefined || r.etag !== s.etag);
    const up = async () => {
      next[rel] = await upload(job, rel, l as LocalFile, result);
    };
    const down = async () => {
      next[rel] = await download(job, rel, r as RemoteObject, result);
    };
    if (job.direction === 'up') {
      if (l !== undefined && (localChanged || r === undefined || r.etag !== s?.etag)) await up();
      else if (l !== undefined && r !== undefined) next[rel] = entry(l, r);
      else if (r !== undefined && job.delete) await deleteRemote(job, rel, r, result);
      else if (r !== undefined && s !== undefined) next[rel] = s;
    } else if (job.direction === 'down') {
      if (r !== undefined && (remoteChanged || l === undefined || localChanged)) await down();
      else if (l !== undefined && r !== undefined) next[rel] = entry(l, r);
      else if (l !== undefined && job.delete) await deleteLocal(job, rel, result);
    } else if (l !== undefined && r !== undefined) {
      if (localChanged && remoteChanged && !(await sameBytes(job, rel, l, r))) {
        await conflict(job, rel, l, r, stamp, result, next);
      } else if (localChanged && s !== undefined) await up();
      else if (remoteChanged && s !== undefined) await down();
      else next[rel] = entry(l, r);
    } else if (l !== undefined) {
      if (s !== undefined && !localChanged && job.delete) await deleteLocal(job, rel, result);
      else await up();
    } else if (r !== undefined) {
      if (s !== undefined && !remoteChanged && job.delete) await deleteRemote(job, rel, r, result);
      else await down();
    }
  }
  await writeState(job.stateFile, next);
  return result;
}

function entry(l: LocalFile, r: RemoteObject): SyncedEntry {
  return { sizeBytes: l.sizeBytes, mtimeMs: l.mtimeMs, etag: r.etag };
}

function keyOf(job: SyncJob, rel: string): string {
  return job.prefix === '' ? rel : `${job.prefix}/${rel}`;
}

function localPath(job: SyncJob, rel: string): string {
  return job.path === '/' ? `/${rel}` : `${job.path}/${rel}`;
}

/** Regular files under the directory (relative paths); symlinks and special files go to `skipped`. */
async function listLocal(job: SyncJob, skipped: string[]): Promise<Map<string, LocalFile>> {
  const out = new Map<string, LocalFile>();
  let items: FileInfo[];
  try {
    items = await job.fs.list(job.path, { depth: 32 });
  } catch (error) {
    if ((error as { code?: string }).code === 'file_not_found' && job.direction !== 'up') return out;
    throw error;
  }
  const base = job.path === '/' ? '/' : `${job.path}/`;
  for (const item of items) {
    const rel = item.path.slice(base.length);
    if (item.type === 'directory') continue;
    if (item.type !== 'file') skipped.push(rel);
    else out.set(rel, { sizeBytes: item.sizeBytes, mtimeMs: Date.parse(item.modifiedAt), mode: item.mode });
  }
  return out;
}

/** Objects under the prefix (relative keys); keys that are no path inside a directory go to `skipped`. */
async function listRemote(job: SyncJob, skipped: string[]): Promise<Map<string, RemoteObject>> {
  const out = new Map<string, RemoteObject>();
  const prefix = job.prefix === '' ? '' : `${job.prefix}/`;
  let token: string | undefined;
  do {
    const page = await job.client
      .send(
        new ListObjectsV2Command({
          Bucket: job.bucket,
          Prefix: prefix,
          ...(token === undefined ? {} : { ContinuationToken: token }),
        }),
      )
      .catch((error: unknown) => {
        throw bucketError(`listing s3://${job.bucket}/${prefix}`, error);
      });
    for (const o of page.Contents ?? []) {
      const key = o.Key ?? '';
      const rel = key.slice(prefix.length);
      if (rel.endsWith('/') && (o.Size ?? 0) === 0) continue;
      if (rel === '' || rel.split('/').some((p) => p === '' || p === '.' || p === '..' || p.length > 255)) {
        skipped.push(key);
        continue;
      }
      out.set(rel, {
        key,
        sizeBytes: o.Size ?? 0,
        etag: o.ETag ?? '',
        modifiedMs: o.LastModified?.getTime() ?? 0,
      });
    }
    token = page.IsTruncated ? page.NextContinuationToken : undefined;
  } while (token !== undefined);
  return out;
}

/** sha256 (hex) of a sandbox file's bytes. */
async function hashLocal(job: SyncJob, rel: string): Promise<string> {
  const { stream } = await job.fs.openRead(localPath(job, rel));
  const hash = createHash('sha256');
  for await (const chunk of stream) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** Whether both sides hold the same bytes (an object of ours carries its sha256; others count as different). */
async function sameBytes(job: SyncJob, rel: string, l: LocalFile, r: RemoteObject): Promise<boolean> {
  if (l.sizeBytes !== r.sizeBytes) return false;
  const head = await job.client.send(new HeadObjectCommand({ Bucket: job.bucket, Key: r.key })).catch((e: unknown) => {
    throw bucketError(`reading s3://${job.bucket}/${r.key}`, e);
  });
  const sha = head.Metadata?.[SHA256_META];
  return sha !== undefined && sha === (await hashLocal(job, rel));
}

/**
 * Upload one file: its sha256 first (it goes into the object's metadata), then its bytes (multipart above
 * {@link PART_BYTES}); the bytes are hashed again on the way and the object is removed when they differ (the file
 * changed during the upload).
 */
async function upload(
  job: SyncJob,
  rel: string,
  l: LocalFile,
  result: SyncResult,
  asRel: string = rel,
): Promise<SyncedEntry> {
  const sha = await hashLocal(job, rel);
  const { stream, sizeBytes } = await job.fs.openRead(localPath(job, rel));
  const hash = createHash('sha256');
  const body = stream.pipe(
    new Transform({
      transform(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        cb(null, chunk);
      },
    }),
  );
  const key = keyOf(job, asRel);
  const send = new Upload({
    client: job.client,
    params: { Bucket: job.bucket, Key: key, Body: body, ContentLength: sizeBytes, Metadata: { [SHA256_META]: sha } },
    partSize: PART_BYTES,
    queueSize: 2,
    leavePartsOnError: false,
  });
  const onAbort = () => void send.abort();
  job.signal.addEventListener('abort', onAbort);
  let etag: string;
  try {
    const done = await send.done();
    etag = done.ETag ?? '';
  } catch (error) {
    stream.destroy();
    throw bucketError(`uploading ${localPath(job, rel)} to s3://${job.bucket}/${key}`, error);
  } finally {
    job.signal.removeEventListener('abort', onAbort);
  }
  if (hash.digest('hex') !== sha) {
    await job.client.send(new DeleteObjectCommand({ Bucket: job.bucket, Key: key })).catch(() => undefined);
    throw new ApiError(ErrorCode.bucketChecksumMismatch, `${localPath(job, rel)} changed during its upload`, {
      hint: 'retry the sync once the file is no longer being written',
    });
  }
  const head = await job.client.send(new HeadObjectCommand({ Bucket: job.bucket, Key: key })).catch((e: unknown) => {
    throw bucketError(`checking s3://${job.bucket}/${key}`, e);
  });
  if (head.ContentLength !== sizeBytes || head.Metadata?.[SHA256_META] !== sha) {
    throw new ApiError(ErrorCode.bucketChecksumMismatch, `s3://${job.bucket}/${key} does not hold what was sent`, {
      hint: 'retry the sync',
    });
  }
  result.uploaded.push(asRel);
  result.bytesUp += sizeBytes;
  return { sizeBytes: l.sizeBytes, mtimeMs: l.mtimeMs, etag: head.ETag ?? etag };
}

/**
 * Download one object into the sandbox file `asRel` (staged, renamed into place only when whole and when its
 * sha256 metadata, else its single-part MD5 ETag, matches).
 */
async function download(
  job: SyncJob,
  rel: string,
  r: RemoteObject,
  result: SyncResult,
  asRel: string = rel,
): Promise<SyncedEntry> {
  const got = await job.client
    .send(new GetObjectCommand({ Bucket: job.bucket, Key: r.key }), { abortSignal: job.signal })
    .catch((e: unknown) => {
      throw bucketError(`downloading s3://${job.bucket}/${r.key}`, e);
    });
  const wantSha = got.Metadata?.[SHA256_META];
  const etag = (got.ETag ?? r.etag).replace(/"/g, '');
  const wantMd5 = wantSha === undefined && /^[0-9a-f]{32}$/.test(etag) ? etag : undefined;
  const sha = createHash('sha256');
  const md5 = createHash('md5');
  let bytes = 0;
  const where = `s3://${job.bucket}/${r.key}`;
  const check = new Transform({
    transform(chunk: Buffer, _enc, cb) {
      sha.update(chunk);
      md5.update(chunk);
      bytes += chunk.length;
      cb(null, chunk);
    },
    flush(cb) {
      const bad =
        (got.ContentLength !== undefined && bytes !== got.ContentLength) ||
        (wantSha !== undefined && sha.digest('hex') !== wantSha) ||
        (wantMd5 !== undefined && md5.digest('hex') !== wantMd5);
      cb(
        bad
          ? new ApiError(ErrorCode.bucketChecksumMismatch, `${where}: the bytes do not match the object's checksum`, {
              hint: 'nothing was written; retry the sync',
            })
          : null,
      );
    },
  });
  const source = got.Body as Readable;
  const body = source.pipe(check);
  source.once('error', (e) => check.destroy(bucketError(`downloading ${where}`, e)));
  // The write sees the stream's failure and removes its staged file; this listener keeps the cause for the answer.
  let failure: unknown;
  check.once('error', (e) => {
    failure = e;
  });
  let info: FileInfo;
  try {
    info = await job.fs.write(localPath(job, asRel), body);
  } catch (error) {
    source.destroy();
    throw findApiError(failure) ?? findApiError(error) ?? error;
  }
  result.downloaded.push(asRel);
  result.bytesDown += bytes;
  return { sizeBytes: info.sizeBytes, mtimeMs: Date.parse(info.modifiedAt), etag: r.etag };
}

/** The {@link ApiError} somewhere in an error's cause chain (a stream error wrapped by the file layer). */
function findApiError(error: unknown): ApiError | undefined {
  for (let e = error, i = 0; e !== undefined && e !== null && i < 5; i++) {
    if (e instanceof ApiError) return e;
    e = (e as { cause?: unknown }).cause;
  }
  return undefined;
}

/** Newest wins; the loser is kept on both sides as `NAME.conflict-<stamp>`. */
async function conflict(
  job: SyncJob,
  rel: string,
  l: LocalFile,
  r: RemoteObject,
  stamp: string,
  result: SyncResult,
  next: Record<string, SyncedEntry>,
): Promise<void> {
  const keptAs = `${rel}.conflict-${stamp}`;
  if (l.mtimeMs >= r.modifiedMs) {
    await job.client
      .send(
        new CopyObjectCommand({
          Bucket: job.bucket,
          Key: keyOf(job, keptAs),
          CopySource: `${job.bucket}/${encodeURIComponent(r.key).replace(/%2F/g, '/')}`,
        }),
      )
      .catch((e: unknown) => {
        throw bucketError(`keeping s3://${job.bucket}/${r.key} as ${keptAs}`, e);
      });
    const kept = await job.client.send(new HeadObjectCommand({ Bucket: job.bucket, Key: keyOf(job, keptAs) }));
    next[keptAs] = await download(job, keptAs, { ...r, key: keyOf(job, keptAs), etag: kept.ETag ?? '' }, result);
    next[rel] = await upload(job, rel, l, result);
    result.conflicts.push({ path: rel, keptAs, winner: 'sandbox' });
  } else {
    await job.fs.rename(localPath(job, rel), localPath(job, keptAs));
    const moved = await job.fs.stat(localPath(job, keptAs));
    const movedFile = { ...l, mtimeMs: Date.parse(moved.modifiedAt) };
    next[keptAs] = await upload(job, keptAs, movedFile, result);
    next[rel] = await download(job, rel, r, result);
    result.conflicts.push({ path: rel, keptAs, winner: 'bucket' });
  }
}

async function deleteRemote(job: SyncJob, rel: string, r: RemoteObject, result: SyncResult): Promise<void> {
  await job.client.send(new DeleteObjectCommand({ Bucket: job.bucket, Key: r.key })).catch((e: unknown) => {
    throw bucketError(`removing s3://${job.bucket}/${r.key}`, e);
  });
  result.deletedRemote.push(rel);
}

async function deleteLocal(job: SyncJob, rel: string, result: SyncResult): Promise<void> {
  await job.fs.remove(localPath(job, rel));
  result.deletedLocal.push(rel);
}

async function readState(file: string): Promise<Record<string, SyncedEntry>> {
  try {
    return JSON.parse(await readFile(file, 'utf8')) as Record<string, SyncedEntry>;
  } catch {
    return {};
  }
}

/** Write the state whole (a temporary file renamed over the old one). */
async function writeState(file: string, state: Record<string, SyncedEntry>): Promise<void> {
  await mkdir(dirname(file), { recursive: true, mode: 0o700 });
  const tmp = `${file}.tmp`;
  await writeFile(tmp, JSON.stringify(state), { mode: 0o600 });
  await rename(tmp, file);
}
