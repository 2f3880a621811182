import Database from 'better-sqlite3';
import { Kysely, SqliteDialect, sql } from 'kysely';
import { afterEach, describe, expect, test } from 'vitest';
import { reusingStatements } from './database.js';

describe('reusingStatements (SQLite prepared-statement reuse)', () => {
  const opened: Database.Database[] = [];
  const open = (): Database.Database => {
    const sqlite = new Database(':memory:');
    opened.push(sqlite);
    sqlite.exec('create table t (id integer primary key, v text)');
    sqlite.exec("insert into t (v) values ('a'), ('b'), ('c')");
    return sqlite;
  };
  afterEach(() => {
    for (const sqlite of opened.splice(0)) if (sqlite.open) sqlite.close();
  });

  test('the same SQL gets the same statement; the least recently used one is dropped past the bound', () => {
    const db = reusingStatements(open(), 2);
    const a = db.prepare('select 1');
    expect(db.prepare('select 1')).toBe(a);
    const b = db.prepare('select 2');
    db.prepare('select 1'); // a is now the most recently used
    db.prepare('select 3'); // drops b
    expect(db.prepare('select 1')).toBe(a);
    expect(db.prepare('select 2')).not.toBe(b);
  });

  test('a statement still iterating is not handed out again', () => {
    const db = reusingStatements(open());
    const first = db.prepare('select v from t order by id');
    const iterator = first.iterate([]);
    expect(iterator.next().value).toEqual({ v: 'a' });
    const second = db.prepare('select v from t order by id');
    expect(second).not.toBe(first);
    expect(second.all([])).toEqual([{ v: 'a' }, { v: 'b' }, { v: 'c' }]);
    expect([...iterator]).toEqual([{ v: 'b' }, { v: 'c' }]);
    expect(db.prepare('select v from t order by id')).toBe(first);
  });

  test('through kysely: reads see writes made through a reused statement; streamed selects work', async () => {
    const kysely = new Kysely<{ t: { id: number; v: string } }>({
      dialect: new SqliteDialect({ database: reusingStatements(open()) }),
    });
    try {
      const read = () => kysely.selectFrom('t').select('v').where('id', '=', 2).executeTakeFirst();
      expect(await read()).toEqual({ v: 'b' });
      await kysely.updateTable('t').set({ v: 'x' }).where('id', '=', 2).execute();
      expect(await read()).toEqual({ v: 'x' });
      const seen: string[] = [];
      for await (const row of kysely.selectFrom('t').select('v').orderBy('id').stream()) seen.push(row.v);
      expect(seen).toEqual(['a', 'x', 'c']);
      expect((await sql<{ n: number }>`select count(*) as n from t`.execute(kysely)).rows[0]?.n).toBe(3);
    } finally {
      await kysely.destroy();
    }
  });
});
