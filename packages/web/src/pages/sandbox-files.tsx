import type { FileInfo, Sandbox } from '@burrow/contract';
import { useEffect, useState } from 'preact/hooks';
import { ApiError, api, apiUrl, uploadFile } from '../api.js';
import { ErrorBox } from '../components/ui.js';
import { formatBytes, formatTime, useLoad } from '../util.js';

/** Largest text preview, bytes; longer files show their start. */
const PREVIEW_BYTES = 64 * 1024;
const IMAGE = /\.(png|jpe?g|gif|webp|svg)$/i;

const join = (dir: string, name: string) => `${dir.replace(/\/$/, '')}/${name}`;
const parent = (dir: string) => dir.replace(/\/[^/]+\/?$/, '') || '/';

/** Files: browse, preview, upload (drag and drop, with progress), download, a folder as tar. */
export function FilesPanel({ sandbox }: { sandbox: Sandbox }) {
  const [dir, setDir] = useState(sandbox.cwd);
  const [preview, setPreview] = useState<FileInfo | null>(null);
  const [uploads, setUploads] = useState<{ name: string; fraction: number }[]>([]);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  const [dragging, setDragging] = useState(false);
  const list = useLoad(
    () => api<{ items: FileInfo[] }>(`/sandboxes/${sandbox.id}/files`, { query: { path: dir } }),
    [sandbox.id, dir, sandbox.state],
  );
  const upload = async (files: FileList | null) => {
    if (files === null) return;
    for (const file of Array.from(files)) {
      setUploads((old) => [...old, { name: file.name, fraction: 0 }]);
      try {
        await uploadFile(sandbox.id, join(dir, file.name), file, (fraction) =>
          setUploads((old) => old.map((u) => (u.name === file.name ? { ...u, fraction } : u))),
        );
      } catch (caught) {
        if (caught instanceof ApiError) setError(caught);
      }
      setUploads((old) => old.filter((u) => u.name !== file.name));
      list.reload();
    }
  };
  const items = [...(list.data?.items ?? [])].sort(
    (a, b) => Number(b.type === 'directory') - Number(a.type === 'directory') || a.name.localeCompare(b.name),
  );
  return (
    <section
      aria-label="files"
      class={dragging ? 'files dragging' : 'files'}
      onDragOver={(e) => {
        e.preventDefault();
        setDragging(true);
      }}
      onDragLeave={() => setDragging(false)}
      onDrop={(e) => {
        e.preventDefault();
        setDragging(false);
        void upload(e.dataTransfer?.files ?? null);
      }}
    >
      <div class="toolbar">
        <button type="button" disabled={dir === '/'} onClick={() => setDir(parent(dir))} aria-label="parent folder">
          ↑
        </button>
        <code data-testid="files-dir">{dir}</code>
        <span class="spacer" />
        <a class="button" href={apiUrl(`/sandboxes/${sandbox.id}/files/archive`, { path: dir, gzip: 'true' })} download>
          Download folder (.tar.gz)
        </a>
        <label class="button">
          Upload…
          <input
            type="file"
            multiple
            class="sr-only"
            data-testid="upload-input"
            onChange={(e) => void upload(e.currentTarget.files)}
          />
        </label>
      </div>
      <p class="muted small">Drop files here to upload them into this folder.</p>
      {uploads.map((u) => (
        <div key={u.name} class="upload">
          <label>
            {u.name} <progress value={u.fraction} max={1} aria-label={`uploading ${u.name}`} />
          </label>
        </div>
      ))}
      <ErrorBox error={error ?? list.error} />
      <div class="grid2">
        <div class="table-wrap">
          <table>
            <thead>
              <tr>
                <th scope="col">Name</th>
                <th scope="col">Size</th>
                <th scope="col">Modified</th>
                <th scope="col">
                  <span class="sr-only">Actions</span>
                </th>
              </tr>
            </thead>
            <tbody data-testid="file-list">
              {items.map((f) => (
                <tr key={f.path}>
                  <td>
                    {f.type === 'directory' ? (
                      <button type="button" class="link" onClick={() => setDir(f.path)}>
                        {f.name}/
                      </button>
                    ) : (
                      <button type="button" class="link" onClick={() => setPreview(f)}>
                        {f.name}
                      </button>
                    )}
                  </td>
                  <td class="num">{f.type === 'directory' ? '' : formatBytes(f.sizeBytes)}</td>
                  <td class="small">{formatTime(f.modifiedAt)}</td>
                  <td>
                    {f.type === 'file' ? (
                      <a href={apiUrl(`/sandboxes/${sandbox.id}/files/content`, { path: f.path })} download={f.name}>
                        Download
                      </a>
                    ) : null}
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
        {preview === null ? null : <Preview sandboxId={sandbox.id} file={preview} />}
      </div>
    </section>
  );
}

function Preview({ sandboxId, file }: { sandboxId: string; file: FileInfo }) {
  const [text, setText] = useState<string | null>(null);
  const [image, setImage] = useState<string | null>(null);
  const [error, setError] = useState<ApiError | undefined>(undefined);
  useEffect(() => {
    let url: string | null = null;
    const abort = new AbortController();
    setText(null);
    setImage(null);
    setError(undefined);
    fetch(apiUrl(`/sandboxes/${sandboxId}/files/content`, { path: file.path }), { signal: abort.signal })
      .then(async (response) => {
        if (!response.ok)
          throw new ApiError(
            response.status,
            'preview_failed',
            `the file could not be read (${response.status})`,
            undefined,
            undefined,
          );
        const blob = await response.blob();
        if (IMAGE.test(file.name)) {
          url = URL.createObjectURL(blob);
          setImage(url);
        } else {
          const head = await blob.slice(0, PREVIEW_BYTES).text();
          setText(blob.size > PREVIEW_BYTES ? `${head}\n… (${formatBytes(blob.size)} in all)` : head);
        }
      })
      .catch((caught: unknown) => caught instanceof ApiError && setError(caught));
    return () => {
      abort.abort();
      if (url !== null) URL.revokeObjectURL(url);
    };
  }, [sandboxId, file.path]);
  return (
    <figure class="preview" aria-label={`preview of ${file.name}`}>
      <figcaption>
        <code>{file.path}</code>
      </figcaption>
      <ErrorBox error={error} />
      {image === null ? null : <img src={image} alt={file.name} />}
      {text === null ? null : <pre data-testid="file-preview">{text}</pre>}
    </figure>
  );
}
