import { randomBytes } from 'node:crypto';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

/** A database made for one test file, and how to throw it away. */
export interface TestDatabase {
  /** What `openStore` takes: a SQLite file path or a `postgres://` URL. */
  url: string;
  cleanup: () => Promise<void>;
}

/**
 * The stores a store test runs against, as `describe.each` rows: SQLite in a temporary directory always, and
 * PostgreSQL when `BURROW_TEST_PG_URL` is set (CI sets it). Each PostgreSQL row gets a database of its own,
 * created from the URL's role (which needs CREATEDB) and dropped afterwards, so test files and concurrent runs on
 * one server never see each other's tables or migrations.
 */
export function testDatabases(label: string): Array<[string, () => Promise<TestDatabase>]> {
  const rows: Array<[string, () => Promise<TestDatabase>]> = [
    [
      'sqlite',
      async () => {
        const dir = await mkdtemp(join(tmpdir(), `burrow-${label}-`));
        return { url: join(dir, 'test.db'), cleanup: () => rm(dir, { recursive: true, force: true }) };
      },
    ],
  ];
  const pgUrl = process.env.BURROW_TEST_PG_URL;
  if (pgUrl) rows.push(['postgres', () => freshPostgresDatabase(pgUrl, label)]);
  return rows;
}

async function freshPostgresDatabase(baseUrl: string, label: string): Promise<TestDatabase> {
  const name = `burrow_t_${label.replace(/[^a-z0-9]/gi, '_').toLowerCase()}_${randomBytes(4).toString('hex')}`;
  const admin = async (statement: string) => {
    const client = new pg.Client({ connectionString: baseUrl });
    await client.connect();
    try {
      await client.query(statement);
    } finally {
      await client.end();
    }
  };
  await admin(`CREATE DATABASE "${name}"`);
  const url = new URL(baseUrl);
  url.pathname = `/${name}`;
  return { url: url.toString(), cleanup: () => dropWhenUnused(baseUrl, name) };
}

/**
 * Drop the test database `name` once no session uses it (waits up to 2 s), forcing only what is left then. A
 * closed store's pool resolves `end()` before its connections have closed on the server; a `WITH (FORCE)` drop in
 * that moment terminated them, and pg raised the FATAL 57P01 on clients nobody listened to any more (six
 * "unhandled errors" failed a CI run of pool-store.test.ts whose tests had all passed).
 */
async function dropWhenUnused(baseUrl: string, name: string): Promise<void> {
  const client = new pg.Client({ connectionString: baseUrl });
  await client.connect();
  try {
    for (let i = 0; i < 100; i++) {
      const { rows } = await client.query<{ n: number }>(
        'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = $1',
        [name],
      );
      if ((rows[0]?.n ?? 0) === 0) break;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
    await client.query(`DROP DATABASE IF EXISTS "${name}" WITH (FORCE)`);
  } finally {
    await client.end();
  }
}
