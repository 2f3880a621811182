import { createHash } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { crc32 } from 'node:zlib';

/** A wheel written by {@link buildTestWheel}. */
export interface TestWheel {
  /** Distribution name as PEP 503 normalizes it, for example `burrow-probe`. */
  name: string;
  version: string;
  /** Importable module, for example `burrow_probe`. */
  module: string;
  /** `VALUE` the module defines (`python3 -c 'import burrow_probe; print(burrow_probe.VALUE)'`). */
  value: string;
  /** The wheel's file name (`burrow_probe-1.0.0-py3-none-any.whl`). */
  fileName: string;
  /** Where it was written. */
  path: string;
  /** sha256 hex of the file (PEP 503 links carry it as `#sha256=`). */
  sha256: string;
}

/** Options of {@link buildTestWheel}. */
export interface BuildTestWheelOptions {
  /** Directory the wheel is written to. */
  dir: string;
  /** Distribution name: lower-case letters, digits and `-`. @default 'burrow-probe' */
  name?: string;
  /** @default '1.0.0' */
  version?: string;
}

/**
 * Write a tiny pure-Python wheel (one module defining `VALUE`) by hand: a stored zip with the module, `METADATA`,
 * `WHEEL` and `RECORD` (PEP 427, PEP 376 hashes). Needs neither Python nor the network, so any test can make one.
 * @returns the wheel's name, file and hash
 * @example
 * const wheel = await buildTestWheel({ dir: '/tmp/wheels' }); // pip install /tmp/wheels/burrow_probe-1.0.0-py3-none-any.whl
 */
export async function buildTestWheel(options: BuildTestWheelOptions): Promise<TestWheel> {
  const name = options.name ?? 'burrow-probe';
  const version = options.version ?? '1.0.0';
  if (!/^[a-z0-9]+(-[a-z0-9]+)*$/.test(name)) throw new RangeError(`not a simple distribution name: ${name}`);
  const module = name.replaceAll('-', '_');
  const value = `${name}-${version}-ok`;
  const distInfo = `${module}-${version}.dist-info`;
  const files: Array<[string, Buffer]> = [
    [`${module}/__init__.py`, Buffer.from(`VALUE = ${JSON.stringify(value)}\n`)],
    [`${distInfo}/METADATA`, Buffer.from(`Metadata-Version: 2.1\nName: ${name}\nVersion: ${version}\n`)],
    [
      `${distInfo}/WHEEL`,
      Buffer.from('Wheel-Version: 1.0\nGenerator: burrow-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n'),
    ],
  ];
  const record = files.map(([path, data]) => {
    const digest = createHash('sha256').update(data).digest('base64url');
    return `${path},sha256=${digest},${data.length}\n`;
  });
  files.push([`${distInfo}/RECORD`, Buffer.from(`${record.join('')}${distInfo}/RECORD,,\n`)]);
  const zip = storedZip(files);
  const fileName = `${module}-${version}-py3-none-any.whl`;
  const path = join(options.dir, fileName);
  await writeFile(path, zip);
  return { name, version, module, value, fileName, path, sha256: createHash('sha256').update(zip).digest('hex') };
}

/** A zip archive of `files`, uncompressed (method 0), as APPNOTE 6.3 lays it out. */
function storedZip(files: Array<[string, Buffer]>): Buffer {
  const parts: Buffer[] = [];
  const central: Buffer[] = [];
  let offset = 0;
  for (const [path, data] of files) {
    const nameBytes = Buffer.from(path, 'utf8');
    const crc = crc32(data);
    const local = Buffer.alloc(30);
    local.writeUInt32LE(0x04034b50, 0);
    local.writeUInt16LE(20, 4); // version needed
    local.writeUInt16LE(0x0800, 6); // UTF-8 names
    local.writeUInt16LE(0, 8); // stored
    local.writeUInt32LE(0x00210000, 10); // 1980-01-01 00:00
    local.writeUInt32LE(crc, 14);
    local.writeUInt32LE(data.length, 18);
    local.writeUInt32LE(data.length, 22);
    local.writeUInt16LE(nameBytes.length, 26);
    local.writeUInt16LE(0, 28);
    parts.push(local, nameBytes, data);
    const entry = Buffer.alloc(46);
    entry.writeUInt32LE(0x02014b50, 0);
    entry.writeUInt16LE(0x031e, 4); // made by: Unix, 3.0
    entry.writeUInt16LE(20, 6);
    entry.writeUInt16LE(0x0800, 8);
    entry.writeUInt16LE(0, 10);
    entry.writeUInt32LE(0x00210000, 12);
    entry.writeUInt32LE(crc, 16);
    entry.writeUInt32LE(data.length, 20);
    entry.writeUInt32LE(data.length, 24);
    entry.writeUInt16LE(nameBytes.length, 28);
    entry.writeUInt32LE((0o100644 << 16) >>> 0, 38); // external attributes: a regular file, rw-r--r--
    entry.writeUInt32LE(offset, 42);
    central.push(entry, nameBytes);
    offset += local.length + nameBytes.length + data.length;
  }
  const centralBytes = Buffer.concat(central);
  const end = Buffer.alloc(22);
  end.writeUInt32LE(0x06054b50, 0);
  end.writeUInt16LE(files.length, 8);
  end.writeUInt16LE(files.length, 10);
  end.writeUInt32LE(centralBytes.length, 12);
  end.writeUInt32LE(offset, 16);
  return Buffer.concat([...parts, centralBytes, end]);
}
