import { z } from 'zod';
import { InstantSchema, SandboxPathSchema } from './common.js';

/** Largest single-file upload through `PUT .../files/content`: 512 MiB. */
export const MAX_FILE_UPLOAD_BYTES = 512 * 1024 * 1024;

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
