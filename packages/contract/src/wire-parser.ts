/**
 * Precompiled parsers of wire schemas: plain functions generated from the zod schemas by zod's own compiler
 * (`npm run wire-parsers -w @burrow/contract` writes `generated/wire-parsers.ts`). They let a client check a
 * response without loading zod and building every schema (about 0.2 s of CPU at start).
 *
 * A parser answers exactly as the schema's `safeParse` does on every input: the parsed value (unknown keys
 * stripped, defaults filled) or {@link INVALID} where the schema rejects. Only generated parsers with that
 * guarantee (zod's `definite`) are written. For the error message of a rejection, load the schema named by
 * {@link WireParser.schemaName} from `@burrow/contract`.
 */

/** What a {@link WireParser} returns for input its schema rejects. */
export const INVALID: unique symbol = Symbol('burrow.wire.invalid');

/** A precompiled parser of one wire schema. */
export interface WireParser<T> {
  /** The name of the schema in `@burrow/contract` it was generated from (for the error message of a rejection). */
  readonly schemaName: string;
  /** The parsed value, or {@link INVALID} where the schema rejects the input. */
  readonly parse: (input: unknown) => T | typeof INVALID;
}

/**
 * A parser built on its first call: a client that parses a few kinds of response pays for those only.
 * @param build - returns the parser (generated code: its constants, then the function).
 */
export function lazyParser<T>(
  build: () => (input: unknown) => T | typeof INVALID,
): (input: unknown) => T | typeof INVALID {
  let parse: ((input: unknown) => T | typeof INVALID) | undefined;
  return (input) => {
    parse ??= build();
    return parse(input);
  };
}
