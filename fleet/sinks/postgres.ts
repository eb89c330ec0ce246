/**
 * The PostgreSQL side of the fleet (docs/fleet.md): the `telemetry_events` table, created if
 * missing, and batches inserted in one transaction with `on conflict do nothing`, so a batch sent
 * twice (after a crash between the commit and the cursor) stores each event once. Also the
 * claims of units (docs/fleet.md, "Units"), in the table `telemetry_units`.
 *
 * Client: the npm package `postgres` (porsager/postgres), pure JavaScript, no native parts,
 * pipelining and typed arrays; loaded only through the `./forward` entry point.
 *
 * @module
 */
import postgres from "npm:postgres@^3.4.9";
import { type EventRow, type ForwardItem, toRow } from "../item.ts";
import {
  type FleetSendOptions,
  type FleetSink,
  type FleetSinkConnector,
  type UnitClaim,
  type UnitClaimOptions,
  UnitHeldError,
} from "./sink.ts";

/** The table every forwarder and archiver writes (docs/fleet.md). */
export const EVENTS_TABLE = "telemetry_events";

/** The table of the units' claims (docs/fleet.md, "Units"): one row per unit, naming its site. */
export const UNITS_TABLE = "telemetry_units";

const UNITS_SCHEMA = `create table if not exists ${UNITS_TABLE} (
  unit text primary key,
  site_id text not null,
  claimed_at timestamptz not null default now()
)`;

const SCHEMA = [
  `create table if not exists ${EVENTS_TABLE} (
    unit text not null,
    stream text not null,
    run_id text not null,
    seq bigint not null,
    ts timestamptz not null,
    type text not null,
    data jsonb not null,
    meta jsonb not null,
    received_at timestamptz not null default now(),
    primary key (unit, stream, run_id, seq)
  )`,
  `create index if not exists ${EVENTS_TABLE}_type_ts on ${EVENTS_TABLE} (type, ts)`,
];

/** The columns every insert writes, and the primary key `on conflict do nothing` relies on. */
const COLUMNS = ["unit", "stream", "run_id", "seq", "ts", "type", "data", "meta"];
const PRIMARY_KEY = ["unit", "stream", "run_id", "seq"];

/**
 * The table exists with another shape (docs/fleet.md): retrying cannot help, so the forwarder and
 * the archiver stop with this message instead of reporting the destination unavailable forever.
 */
export class TableShapeError extends Error {
  /**
   * Creates the error.
   *
   * @param message What is wrong and what to do.
   */
  constructor(message: string) {
    super(message);
    this.name = "TableShapeError";
  }
}

/** Rows per `insert` statement: eight array parameters, whatever the batch size. */
const ROWS_PER_STATEMENT = 5000;

/** PostgreSQL's type oid of `text`. */
const TEXT_OID = 25;

/**
 * One column of a batch as a `text[]` parameter; the statement casts it to the column's type, so
 * JSON is parsed by the server from the stored text, never re-encoded on the way.
 */
function texts(
  sql: postgres.TransactionSql,
  rows: readonly EventRow[],
  pick: (row: EventRow) => string,
): postgres.ArrayParameter {
  return sql.array(rows.map(pick), TEXT_OID);
}

/** Throws {@linkcode TableShapeError} unless the table has the columns and key inserts need. */
async function checkShape(tx: postgres.TransactionSql): Promise<void> {
  const where = await tx<{ db: string; schema: string }[]>`
    select current_database() as db, current_schema() as schema`;
  const { db, schema } = where[0]!;
  const columns = new Set(
    (await tx<{ name: string }[]>`
      select column_name as name from information_schema.columns
      where table_schema = ${schema} and table_name = ${EVENTS_TABLE}`).map((r) => r.name),
  );
  const key = (await tx<{ name: string }[]>`
    select a.attname as name
    from pg_index i
    join lateral unnest(i.indkey) with ordinality as k(attnum, n) on true
    join pg_attribute a on a.attrelid = i.indrelid and a.attnum = k.attnum
    where i.indrelid = ${`${schema}.${EVENTS_TABLE}`}::regclass and i.indisprimary
    order by k.n`).map((r) => r.name);
  const missing = COLUMNS.filter((c) => !columns.has(c));
  const problems = [
    ...(missing.length > 0 ? [`it lacks the columns ${missing.join(", ")}`] : []),
    ...(key.join() !== PRIMARY_KEY.join()
      ? [
        `its primary key is ${key.length ? `(${key.join(", ")})` : "missing"}, not (${
          PRIMARY_KEY.join(", ")
        })`,
      ]
      : []),
  ];
  if (problems.length === 0) return;
  throw new TableShapeError(
    `The table ${schema}.${EVENTS_TABLE} in database ${db} has another shape: ${
      problems.join("; ")
    }. ` +
      `Rename or drop it (it is created as docs/fleet.md says when missing), or point --to at ` +
      `another database`,
  );
}

/**
 * An error PostgreSQL raised for a value, which no retry can mend (docs/fleet.md): a data
 * exception (SQLSTATE class 22: `\u0000` in `jsonb`, a number out of range, a bad time) or a
 * limit the value exceeds (class 54: `jsonb` nested deeper than the server's stack allows).
 */
function isDataError(err: unknown): boolean {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === "string" && (code.startsWith("22") || code.startsWith("54"));
}

/** A connection to the fleet's PostgreSQL, writing `telemetry_events`. */
export class PostgresSink implements FleetSink<EventRow> {
  readonly #sql: postgres.Sql;
  readonly url: string;

  private constructor(url: string, sql: postgres.Sql) {
    this.url = url;
    this.#sql = sql;
  }

  /**
   * Connects and creates the table and its index if missing (under an advisory lock, so several
   * forwarders and archivers starting together do not race on the DDL).
   */
  static async open(url: string): Promise<PostgresSink> {
    const params = new URL(url).searchParams;
    // Every setting the client would otherwise look up as a PG<NAME> variable is given, so the
    // forwarder's --allow-env stays the documented libpq list (PGHOST, PGPASSWORD...). Two of
    // them (max_pipeline, sslnegotiation) are missing from the package's types.
    const settings: Record<string, unknown> = {
      max: 1,
      ssl: params.get("sslmode") ?? params.get("ssl") ?? false,
      sslnegotiation: null,
      idle_timeout: 0,
      connect_timeout: 10,
      max_lifetime: null,
      max_pipeline: 100,
      backoff: (attempt: number) => Math.min(0.1 * 2 ** attempt, 5),
      keep_alive: 60,
      prepare: true,
      debug: false,
      fetch_types: true,
      publications: "alltables",
      target_session_attrs: null,
      onnotice: () => {},
    };
    const sql = postgres(url, settings as postgres.Options<Record<string, never>>);
    const sink = new PostgresSink(url, sql);
    try {
      await sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(hashtext(${EVENTS_TABLE}))`;
        await tx.unsafe(SCHEMA[0]!);
        await checkShape(tx);
        for (const ddl of SCHEMA.slice(1)) await tx.unsafe(ddl);
      });
    } catch (err) {
      await sql.end({ timeout: 1 }).catch(() => {});
      throw err;
    }
    return sink;
  }

  /**
   * Inserts the rows in one transaction; resolves after the commit. Rows already present (same
   * unit, stream, run_id, seq) are left as they are.
   *
   * @returns How many rows were new.
   */
  async insert(
    rows: readonly EventRow[],
    onRejected?: (row: EventRow, index: number, reason: string) => void,
  ): Promise<number> {
    if (rows.length === 0) return 0;
    try {
      return await this.#insert(rows);
    } catch (err) {
      // A value PostgreSQL refuses (a data exception, SQLSTATE class 22) fails its batch on every
      // retry: find it row by row, hand it to onRejected, and store the others.
      if (onRejected === undefined || !isDataError(err)) throw err;
    }
    return await this.#isolate(rows, 0, onRejected);
  }

  /**
   * Inserts `rows` (starting at `first` in the batch) in halves until the rows PostgreSQL refuses
   * stand alone: a few refused rows cost a few transactions each, not one per row of the batch.
   */
  async #isolate(
    rows: readonly EventRow[],
    first: number,
    onRejected: (row: EventRow, index: number, reason: string) => void,
  ): Promise<number> {
    if (rows.length > 1) {
      const half = Math.ceil(rows.length / 2);
      let inserted = 0;
      for (
        const [part, at] of [[rows.slice(0, half), first], [
          rows.slice(half),
          first + half,
        ]] as const
      ) {
        try {
          inserted += await this.#insert(part);
        } catch (err) {
          if (!isDataError(err)) throw err;
          inserted += await this.#isolate(part, at, onRejected);
        }
      }
      return inserted;
    }
    try {
      return await this.#insert(rows);
    } catch (err) {
      if (!isDataError(err)) throw err;
      onRejected(rows[0]!, first, `PostgreSQL refused it: ${(err as Error).message}`);
      return 0;
    }
  }

  /** PostgreSQL takes rows of any size; a value it refuses is reported by {@linkcode send}. */
  refuses(_row: EventRow): string | undefined {
    return undefined;
  }

  /**
   * {@linkcode insert} as a fleet sink sends: one transaction, resolved after the commit; a row
   * with a value PostgreSQL refuses goes to `options.onRejected`. A commit is not interrupted, so
   * `options.signal` is not consulted.
   *
   * @returns How many rows were new.
   */
  async send(rows: readonly EventRow[], options?: FleetSendOptions): Promise<number> {
    const onRejected = options?.onRejected;
    return await this.insert(
      rows,
      onRejected && ((_row, index, reason) => onRejected(index, reason)),
    );
  }

  async #insert(rows: readonly EventRow[]): Promise<number> {
    return await this.#sql.begin(async (tx) => {
      let inserted = 0;
      for (let i = 0; i < rows.length; i += ROWS_PER_STATEMENT) {
        const part = rows.slice(i, i + ROWS_PER_STATEMENT);
        const result = await tx`
          insert into telemetry_events (unit, stream, run_id, seq, ts, type, data, meta)
          select * from unnest(
            ${texts(tx, part, (r) => r.unit)}::text[],
            ${texts(tx, part, (r) => r.stream)}::text[],
            ${texts(tx, part, (r) => r.run_id)}::text[],
            ${texts(tx, part, (r) => String(r.seq))}::bigint[],
            ${texts(tx, part, (r) => r.ts)}::timestamptz[],
            ${texts(tx, part, (r) => r.type)}::text[],
            ${texts(tx, part, (r) => r.data)}::jsonb[],
            ${texts(tx, part, (r) => r.meta)}::jsonb[]
          )
          on conflict do nothing`;
        inserted += result.count;
      }
      return inserted;
    });
  }

  /** Closes the connection, waiting up to `timeoutS` seconds for queries in flight. */
  async close(timeoutS = 5): Promise<void> {
    await this.#sql.end({ timeout: timeoutS });
  }

  /**
   * Claims `unit` for `siteId` in {@linkcode UNITS_TABLE} (created if missing): the insert that
   * finds the unit free claims it; a row naming another site is that site's unless `reclaim`,
   * which overwrites it (only if it still names that site).
   */
  async claimUnit(
    unit: string,
    siteId: string,
    options: UnitClaimOptions = {},
  ): Promise<UnitClaim> {
    try {
      return await this.#sql.begin(async (tx) => {
        await tx`select pg_advisory_xact_lock(hashtext(${UNITS_TABLE}))`;
        await tx.unsafe(UNITS_SCHEMA);
        const claimed = await tx`
          insert into telemetry_units (unit, site_id) values (${unit}, ${siteId})
          on conflict do nothing`;
        if (claimed.count === 1) return { unit, siteId, outcome: "claimed" as const };
        const [row] = await tx<{ site_id: string }[]>`
          select site_id from telemetry_units where unit = ${unit}`;
        const holder = row!.site_id;
        if (holder === siteId) return { unit, siteId, outcome: "kept" as const };
        if (!options.reclaim) throw new UnitHeldError(unit, holder, siteId);
        await tx`
          update telemetry_units set site_id = ${siteId}, claimed_at = now()
          where unit = ${unit} and site_id = ${holder}`;
        return { unit, siteId, outcome: "reclaimed" as const, previousSiteId: holder };
      });
    } catch (err) {
      // A table of that name without these columns (SQLSTATE class 42): retrying cannot help.
      const code = (err as { code?: unknown } | null)?.code;
      if (typeof code === "string" && code.startsWith("42")) {
        throw new TableShapeError(
          `The table ${UNITS_TABLE} has another shape (${(err as Error).message}); rename or ` +
            `drop it (it is created as docs/fleet.md says when missing), or point --to at ` +
            `another database`,
        );
      }
      throw err;
    }
  }
}

/** Connects, claims `unit` for `siteId`, and closes again. */
async function claimUnitAt(
  url: string,
  unit: string,
  siteId: string,
  options?: UnitClaimOptions,
): Promise<UnitClaim> {
  const sink = await PostgresSink.open(url);
  try {
    return await sink.claimUnit(unit, siteId, options);
  } finally {
    await sink.close().catch(() => {});
  }
}

/** The forwarder's view of PostgreSQL: the stored lines of one unit, inserted as their rows. */
class PostgresItemSink implements FleetSink<ForwardItem> {
  readonly #rows: PostgresSink;
  readonly #unit: string;

  constructor(rows: PostgresSink, unit: string) {
    this.#rows = rows;
    this.#unit = unit;
  }

  refuses(_item: ForwardItem): string | undefined {
    return undefined;
  }

  async send(items: readonly ForwardItem[], options?: FleetSendOptions): Promise<number> {
    // A line that cannot become a row (a value too deep to re-serialise) is refused like a row
    // PostgreSQL refuses; indexes handed to onRejected stay those of `items`.
    const rows: EventRow[] = [];
    const at: number[] = [];
    for (let i = 0; i < items.length; i++) {
      try {
        rows.push(toRow(this.#unit, items[i]!));
        at.push(i);
      } catch (err) {
        if (options?.onRejected === undefined) throw err;
        options.onRejected(i, `it cannot be made a row: ${(err as Error).message}`);
      }
    }
    const onRejected = options?.onRejected;
    return await this.#rows.send(rows, {
      signal: options?.signal,
      ...(onRejected &&
        { onRejected: (index: number, why: string) => onRejected(at[index]!, why) }),
    });
  }

  async close(timeoutS?: number): Promise<void> {
    await this.#rows.close(timeoutS);
  }
}

/** A table of another shape, or a unit another site holds, cannot be mended by retrying. */
function isPermanent(err: unknown): boolean {
  return err instanceof TableShapeError || err instanceof UnitHeldError;
}

/**
 * The archiver's PostgreSQL sink: rows, whatever unit they come from.
 *
 * @example
 * ```ts ignore
 * const sink = await postgresRowConnector("postgres://fleet@db/telemetry").connect();
 * await sink.send(rows, { onRejected: (i, why) => console.warn(`row ${i}: ${why}`) });
 * await sink.close();
 * ```
 */
export function postgresRowConnector(url: string): FleetSinkConnector<EventRow> {
  return {
    connect: () => PostgresSink.open(url),
    claimUnit: (unit, siteId, options) => claimUnitAt(url, unit, siteId, options),
    isPermanent,
  };
}

/**
 * The forwarder's PostgreSQL sink: the stored lines of `unit`, each inserted as its row.
 *
 * @example
 * ```ts ignore
 * const sink = await postgresItemConnector("postgres://fleet@db/telemetry", "pan012").connect();
 * await sink.send([{ stream: "site", runId: "", seq: 1, line }]);
 * await sink.close();
 * ```
 */
export function postgresItemConnector(url: string, unit: string): FleetSinkConnector<ForwardItem> {
  return {
    connect: async () => new PostgresItemSink(await PostgresSink.open(url), unit),
    claimUnit: (unit, siteId, options) => claimUnitAt(url, unit, siteId, options),
    isPermanent,
  };
}
