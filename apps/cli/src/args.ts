// Commander argument parsers for the store commands: money, counts, ratios, nonces, digests, JSON params.
// They check form only (a usage error names the expectation); limits and meaning are the engine's to judge.
import { InvalidArgumentError } from "commander";

const DECIMAL = /^\d+(\.\d+)?$/;

/** A plain non-negative decimal kept as text, so `0.1` reaches the exact-money code unrounded. */
export function moneyText(text: string): string {
  const value = text.trim();
  if (!DECIMAL.test(value)) throw new InvalidArgumentError("expected an amount in USD such as 5 or 0.25");
  return value;
}

/** A plain non-negative decimal as a number, for the config fields and estimates the engine takes as numbers. */
export function moneyNumber(text: string): number {
  const value = Number(moneyText(text));
  if (!Number.isFinite(value)) throw new InvalidArgumentError("expected a finite amount in USD");
  return value;
}

export function nonNegativeNumber(text: string): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || value < 0) {
    throw new InvalidArgumentError("expected a non-negative number");
  }
  return value;
}

export function positiveNumber(text: string): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || value <= 0) {
    throw new InvalidArgumentError("expected a positive number");
  }
  return value;
}

export function nonNegativeInteger(text: string): number {
  const value = Number(text);
  if (!/^\s*\d+\s*$/.test(text) || !Number.isSafeInteger(value)) {
    throw new InvalidArgumentError("expected a whole number");
  }
  return value;
}

export function positiveInteger(text: string): number {
  const value = nonNegativeInteger(text);
  if (value < 1) throw new InvalidArgumentError("expected a whole number of at least 1");
  return value;
}

export function ratio(text: string): number {
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || value < 0 || value > 1) {
    throw new InvalidArgumentError("expected a number from 0 to 1");
  }
  return value;
}

/**
 * A replay token. Digits only become a number, anything else stays a string: the store keeps `7` and
 * `"7"` apart, so `evaluate --nonce` and `resume --successor-nonce` must read a token the same way.
 */
export function nonce(text: string): string | number {
  if (text === "") throw new InvalidArgumentError("expected a non-empty nonce");
  if (/^\d+$/.test(text) && Number.isSafeInteger(Number(text))) return Number(text);
  return text;
}

export function digest(text: string): string {
  if (!/^[0-9a-f]{64}$/.test(text)) {
    throw new InvalidArgumentError("expected a 64-digit lowercase hex SHA-256 digest (see `leash hash`)");
  }
  return text;
}

export function nonEmpty(text: string): string {
  if (text.trim() === "") throw new InvalidArgumentError("expected a non-empty value");
  return text;
}
