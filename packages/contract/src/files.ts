import { z } from 'zod';
import { BASE64_RULE_MESSAGE, isStandardBase64 } from './base64.js';
import { InstantSchema, SandboxPathSchema } from './common.js';

/** Largest body of one `POST .../files/batch` call (JSON, contents inline): 64 MiB. Bigger sets go as a tar. */
export const MAX_BATCH_WRITE_BYTES = 64 * 1024 * 1024;
/** Most files in one `POST .../files/batch` call. */
export const MAX_BATCH_WRITE_FILES = 1000;

export const FileTypeSchema = z.enum(['file', 'directory', 'symlink', 'other']);

/** Metadata of one path in a sandbox. */
export const FileInfoSchema = z
  .object({
    /** Absolute path inside the sandbox. */
    path: z.string(),
    name: z.string(),
    type: FileTypeSchema,
    sizeBytes: z.number().int(),
    /** Permission bits, for example 0o644 = 420. */
    mode: z.number().int(),
    modifiedAt: InstantSchema,
    /** Target of a symlink, as stored (not followed). */
    symlinkTarget: z.string().optional(),
  })
  .meta({ id: 'FileInfo' });
export type FileInfo = z.infer<typeof FileInfoSchema>;

/** Query naming one path. */
export const PathQuerySchema = z.object({ path: SandboxPathSchema });

/** Query of `PUT .../files/content`: the path, its permission bits, and whether to create missing parents. */
export const WriteFileQuerySchema = z.object({
  path: SandboxPathSchema,
  /** Permission bits as an octal string, for example `644` or `0755`. @default '644' */
  mode: z
    .string()
    .regex(/^0?[0-7]{3,4}$/, 'mode is octal, for example 644')
    .default('644'),
});

/** Query of `GET .../files`: list a directory, recursing `depth` levels (1 = direct children). */
export const ListFilesQuerySchema = z.object({
  path: SandboxPathSchema,
  depth: z.coerce.number().int().min(1).max(32).default(1),
});

export const FileListSchema = z.object({ items: z.array(FileInfoSchema) }).meta({ id: 'FileList' });

/** Query of `DELETE .../files`. */
export const RemoveFileQuerySchema = z.object({
  path: SandboxPathSchema,
  /** Remove directories with their contents. @default false */
  recursive: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
});

/** Body of `POST .../files/mkdir`: creates the directory and missing parents (`mkdir -p`). */
export const MkdirRequestSchema = z.object({ path: SandboxPathSchema }).strict().meta({ id: 'MkdirRequest' });

/** Body of `POST .../files/rename`. */
export const RenameRequestSchema = z
  .object({ from: SandboxPathSchema, to: SandboxPathSchema })
  .strict()
  .meta({ id: 'RenameRequest' });

/** Query of `GET .../files/exists`. */
export const ExistsResponseSchema = z.object({ exists: z.boolean() }).meta({ id: 'ExistsResponse' });

/** Permission bits as an octal string (`644`, `0755`, `4755`). */
const OctalModeSchema = z.string().regex(/^0?[0-7]{3,4}$/, 'mode is octal, for example 644');

/** Body of `POST .../files/chmod`. */
export const ChmodRequestSchema = z
  .object({ path: SandboxPathSchema, mode: OctalModeSchema })
  .strict()
  .meta({ id: 'ChmodRequest' });

/** One file of a `POST .../files/batch` call. */
export const BatchWriteFileSchema = z
  .object({
    path: SandboxPathSchema,
    /** The contents, as UTF-8 text or base64 ({@link isStandardBase64}) per `encoding`. */
    content: z.string(),
    /** @default 'utf8' */
    encoding: z.enum(['utf8', 'base64']).default('utf8'),
    /** Permission bits as an octal string. @default '644' */
    mode: OctalModeSchema.default('644'),
  })
  .strict()
  .refine((file) => file.encoding !== 'base64' || isStandardBase64(file.content), {
    message: BASE64_RULE_MESSAGE,
    path: ['content'],
  });

/** Body of `POST .../files/batch`: several files written in one call, in order, each atomically. */
export const BatchWriteRequestSchema = z
  .object({ files: z.array(BatchWriteFileSchema).min(1).max(MAX_BATCH_WRITE_FILES) })
  .strict()
  .meta({ id: 'BatchWriteRequest' });

export const BatchWriteResponseSchema = z.object({ items: z.array(FileInfoSchema) }).meta({ id: 'BatchWriteResponse' });

/** Query of `PUT .../files/archive` (extract a tar, gzip detected) and `GET .../files/archive` (download as tar). */
export const ArchiveQuerySchema = z.object({
  /** The directory extracted into (created with parents) or downloaded. */
  path: SandboxPathSchema,
  /** Download only: gzip the tar. Uploads detect gzip by its magic bytes. @default false */
  gzip: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
});

/** Why an archive entry was not extracted as it stood. */
export const ArchiveEntryIssueSchema = z.object({
  /** The entry's name as it stood in the archive. */
  path: z.string(),
  /** `skipped`: not extracted; `neutralised`: extracted after a change (for example setuid bits cleared). */
  action: z.enum(['skipped', 'neutralised']),
  reason: z.string(),
});
export type ArchiveEntryIssue = z.infer<typeof ArchiveEntryIssueSchema>;

/** Result of extracting an uploaded tar into a sandbox directory. */
export const ArchiveUploadResultSchema = z
  .object({
    path: z.string(),
    files: z.number().int(),
    directories: z.number().int(),
    symlinks: z.number().int(),
    hardLinks: z.number().int(),
    /** File bytes written. */
    bytes: z.number().int(),
    /** Entries refused or changed, with the reason (at most 1000 listed; `issueCount` has the total). */
    issues: z.array(ArchiveEntryIssueSchema),
    issueCount: z.number().int(),
  })
  .meta({ id: 'ArchiveUploadResult' });
export type ArchiveUploadResult = z.infer<typeof ArchiveUploadResultSchema>;

/** Query of `GET .../files/watch` (a `text/event-stream` of {@link FileWatchEvent}). */
export const WatchQuerySchema = z.object({
  path: SandboxPathSchema,
  /** Watch subdirectories too, including ones created later. @default false */
  recursive: z
    .enum(['true', 'false'])
    .default('false')
    .transform((v) => v === 'true'),
});

/**
 * One event of a watch stream. `ready` comes first, once the watch is in place; `rename` carries `oldPath` when both
 * names were inside the watched tree (otherwise a move shows as `delete` or `create`); `end` closes the stream
 * (the sandbox stopped, or the watched directory went away).
 */
export const FileWatchEventSchema = z
  .discriminatedUnion('type', [
    z.object({ type: z.literal('ready'), path: z.string() }),
    z.object({
      type: z.enum(['create', 'modify', 'delete']),
      path: z.string(),
      isDirectory: z.boolean(),
    }),
    z.object({ type: z.literal('rename'), path: z.string(), oldPath: z.string(), isDirectory: z.boolean() }),
    z.object({ type: z.literal('end'), reason: z.string() }),
  ])
  .meta({ id: 'FileWatchEvent' });
export type FileWatchEvent = z.infer<typeof FileWatchEventSchema>;
