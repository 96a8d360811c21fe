// Writes schema_corpus.json: 1000 JSON Schemas shaped like real MCP servers' tool schemas and zod's output
// (zod-to-json-schema for zod 3, z.toJSONSchema for zod 4), each with sample instances: `valid` ones that ajv (with
// ajv-formats) accepts, written as clients write JSON (JSON.stringify, properties in the schema's order), and
// `invalid` ones, single mutations of a valid one that ajv rejects, each with the keywords ajv names.
// Deterministic (seeded). Usage: node make_schema_corpus.mjs [OUT.json]   (npm ci first; tests/test_json_schema.cpp
// reads the result).
import { writeFileSync } from "node:fs";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";
import { z } from "zod";
import { z as z4 } from "zod/v4";
import { zodToJsonSchema } from "zod-to-json-schema";

// ---- deterministic randomness ----
let seed = 0x2545f491;
const rnd = () => {
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const int = (a, b) => a + Math.floor(rnd() * (b - a + 1));
const pick = (xs) => xs[Math.floor(rnd() * xs.length)];
const chance = (p) => rnd() < p;

const ajv07 = new Ajv({ strict: false, allErrors: true, validateFormats: true });
const ajv20 = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv07);
addFormats(ajv20);
export const validatorFor = (schema) => (String(schema.$schema || "").includes("2020") || JSON.stringify(schema).match(/"prefixItems"|"\$defs"|"dependentRequired"/) ? ajv20 : ajv07).compile(schema);

// ---- names and words ----
const WORDS = ["path", "file", "query", "limit", "offset", "name", "id", "url", "branch", "message", "timeout", "mode",
  "content", "pattern", "depth", "recursive", "encoding", "tags", "owner", "repo", "title", "body", "table", "sql",
  "params", "headers", "method", "user", "email", "start", "end", "count", "format", "lang", "cwd", "env", "force"];
const word = () => pick(WORDS) + (chance(0.3) ? "_" + pick(WORDS) : "");
const camel = (s) => s.replace(/_(\w)/g, (_, c) => c.toUpperCase());
const desc = () => pick(["The path of the file", "Maximum number of results", "Optional filter", "Repository owner",
  "ISO date", "Command to run", "Zero-based line offset", "Whether to recurse", "Request headers", "SQL text"]);

// ---- zod building blocks (the same shape for zod 3 and zod 4) ----
function zodScalar(Z, v4, depth) {
  switch (int(0, 17)) {
    case 0: return Z.string().describe(desc());
    case 1: return Z.string().min(1).max(int(8, 4096));
    case 2: return Z.number().int().nonnegative().optional();
    case 3: return Z.number().int().positive().max(int(10, 100000));
    case 4: return Z.number().min(0).max(1);
    case 5: return Z.boolean().default(false);
    case 6: return Z.enum(["asc", "desc", "none"].slice(0, int(2, 3)));
    case 7: return v4 ? Z.email() : Z.string().email();
    case 8: return v4 ? Z.url() : Z.string().url();
    case 9: return v4 ? Z.uuid() : Z.string().uuid();
    case 10: return v4 ? Z.iso.datetime() : Z.string().datetime();
    case 11: return Z.string().regex(pick([/^[a-z][a-z0-9_-]*$/, /^[A-Za-z0-9._\/-]+$/, /^v\d+\.\d+\.\d+$/, /^#[0-9a-fA-F]{6}$/])).max(int(10, 64));
    case 12: return Z.number().int();
    case 13: return Z.union([Z.string(), Z.number()]);
    case 14: return Z.string().nullable();
    case 15: return Z.literal(pick(["read", "write", 1, true]));
    case 16: return Z.array(Z.string()).min(int(0, 2)).max(int(3, 10));
    default: return depth < 2 ? zodObject(Z, v4, depth + 1) : Z.number().gt(-5.5).lt(99.75);
  }
}

function zodObject(Z, v4, depth) {
  const shape = {};
  const n = int(1, depth === 0 ? 7 : 4);
  for (let i = 0; i < n; i++) {
    let s = zodScalar(Z, v4, depth);
    if (chance(0.3)) s = s.optional();
    shape[camel(word())] = s;
  }
  let o = Z.object(shape);
  if (depth > 0 && chance(0.2)) o = o.passthrough ? o.passthrough() : o;
  return o;
}

function zodTool(v4) {
  const Z = v4 ? z4 : z;
  const kind = int(0, 19);
  let s;
  if (kind === 0) s = Z.object({ path: Z.string().min(1).describe(desc()), offset: Z.number().int().nonnegative().optional(), limit: Z.number().int().positive().max(int(100, 5000)).optional() });
  else if (kind === 1) s = Z.object({ edits: Z.array(Z.object({ oldText: Z.string(), newText: Z.string() })).min(1), dryRun: Z.boolean().optional() });
  else if (kind === 2) s = Z.object({ command: Z.string().describe(desc()), timeout: Z.number().int().min(1).max(int(1000, 600000)).optional(), env: Z.record(Z.string(), Z.string()).optional() });
  else if (kind === 3) s = Z.object({ url: v4 ? Z.url() : Z.string().url(), max_length: Z.number().int().positive().max(1000000).default(5000), raw: Z.boolean().optional() });
  else if (kind === 4) s = Z.object({ point: Z.tuple([Z.number(), Z.number()]), zoom: Z.number().int().min(0).max(int(5, 22)), [camel(word())]: zodScalar(Z, v4, 1) });
  else if (kind === 5) s = Z.discriminatedUnion("type", [Z.object({ type: Z.literal("file"), path: Z.string() }), Z.object({ type: Z.literal("url"), url: Z.string() })]);
  else if (kind === 6) {
    const Node = v4 ? Z.object({ name: Z.string(), get children() { return Z.array(Node).optional(); } })
      : Z.lazy(() => Z.object({ name: Z.string(), children: Z.array(Node).optional() }));
    s = Z.object({ root: Node });
  } else if (kind === 7) {
    const shared = Z.object({ city: Z.string(), zip: Z.string().regex(/^\d{5}$/) });
    s = Z.object({ home: shared, work: shared.optional() });
  } else if (kind === 8) s = Z.object({ query: Z.string(), params: Z.array(Z.union([Z.string(), Z.number(), Z.boolean(), Z.null()])).optional(), database: Z.enum(["main", "analytics"]) });
  else if (kind === 9) s = Z.object({ tags: Z.record(Z.string(), Z.number().int()), kind: Z.enum(["a", "b", "c"]).nullable(), [camel(word())]: zodScalar(Z, v4, 1) });
  else s = zodObject(Z, v4, 0);
  return v4 ? z4.toJSONSchema(s) : zodToJsonSchema(s);
}

// ---- hand-written MCP-style schemas (keywords zod does not emit) ----
const BIG = ["9007199254740991", "9223372036854775807", "4294967295", "2147483647", "18446744073709551615"];
function mcpProperty(depth) {
  switch (int(0, 27)) {
    case 0: return { type: "string", description: desc() };
    case 1: return { type: "integer", minimum: 0, maximum: Number(pick(BIG)) };
    case 2: return { type: "integer", minimum: -Number(pick(BIG)), maximum: -1 };
    case 3: return { type: "integer", exclusiveMinimum: int(-50, 0), exclusiveMaximum: int(1, 5000) };
    case 4: return { type: "number", minimum: pick([0.5, -2.25, 0.001, 10]), maximum: pick([0.75, 100.5, 3]) };
    case 5: return { type: "string", format: pick(["date", "time", "date-time", "duration", "uuid", "email", "hostname", "ipv4", "ipv6", "uri"]) };
    case 6: return { type: "string", pattern: pick(["^[a-z0-9-]+$", "^\\d{4}-\\d{2}$", "^(GET|POST|PUT)$", "^/", "\\.json$", "^[A-Z]{2,3}$"]), minLength: int(0, 2), maxLength: int(5, 40) };
    case 7: return { type: "object", properties: { x: { type: "number" } }, patternProperties: { "^meta_": { type: "string" } }, additionalProperties: false };
    case 8: return { type: "object", propertyNames: { pattern: "^[a-z_]+$" }, additionalProperties: { type: "integer" }, minProperties: 1, maxProperties: 3 };
    case 9: return { type: "array", items: [{ type: "string" }, { type: "integer" }], additionalItems: false, minItems: 1 };
    case 10: return { type: "array", prefixItems: [{ type: "number" }, { type: "number" }], items: { type: "string" }, maxItems: 4 };
    case 11: return { type: ["string", "null"], maxLength: 20 };
    case 12: return { type: "string", nullable: true, enum: ["on", "off", null] };
    case 13: return { enum: [1, "two", { three: [3] }, null, 4.5] };
    case 14: return { const: { kind: "fixed", n: [1, 2] } };
    case 15: return { type: "integer", multipleOf: 5, minimum: 0, maximum: 100 };
    case 16: return { type: "array", items: { type: "string" }, uniqueItems: true, maxItems: 5 };
    case 17: return { type: "object", properties: { a: { type: "string" }, b: { type: "string" }, c: { type: "string" } }, dependentRequired: { c: ["a"] }, additionalProperties: false };
    case 18: return { allOf: [{ type: "object", properties: { id: { type: "integer" } }, required: ["id"] }, { type: "object", properties: { label: { type: "string", maxLength: 10 } } }] };
    case 19: return { type: "object", properties: { mode: { type: "string" } }, required: ["mode"], anyOf: [{ properties: { mode: { const: "fast" } } }, { properties: { mode: { const: "safe" }, level: { type: "integer", minimum: 1, maximum: 3 } }, required: ["level"] }] };
    case 20: return { type: "string", not: { const: "" } };
    case 21: return { type: "object", properties: { unit: { enum: ["c", "f"] }, value: { type: "number" } }, if: { properties: { unit: { const: "c" } } }, then: { properties: { value: { minimum: -273.15 } } } };
    case 22: return { type: "string", contentMediaType: "application/json", contentEncoding: "base64", maxLength: 100 };
    case 23: return { oneOf: [{ type: "string", format: "date" }, { type: "integer", minimum: 0 }] };
    case 24: return { type: "number", exclusiveMinimum: 0 };
    case 25: return { $ref: "#/$defs/address" };
    case 26: return depth < 2 ? mcpObject(depth + 1) : { type: "boolean" };
    default: return { type: "array", items: depth < 2 ? mcpObject(depth + 1) : { type: "string" }, minItems: int(0, 1), maxItems: int(2, 6) };
  }
}

function mcpObject(depth) {
  const properties = {};
  const required = [];
  for (let i = 0, n = int(1, depth === 0 ? 8 : 4); i < n; i++) {
    const k = word();
    if (properties[k]) continue;
    properties[k] = mcpProperty(depth);
    if (chance(0.5)) required.push(k);
  }
  const o = { type: "object", properties };
  if (required.length) o.required = required;
  if (chance(0.6)) o.additionalProperties = false;
  return o;
}

function mcpTool() {
  const root = mcpObject(0);
  root.$defs = { address: { type: "object", properties: { street: { type: "string" }, city: { type: "string" }, country: { type: "string", pattern: "^[A-Z]{2}$" } }, required: ["city"], additionalProperties: false } };
  if (chance(0.15)) root.$defs.tree = { type: "object", properties: { value: { type: "integer" }, children: { type: "array", items: { $ref: "#/$defs/tree" }, maxItems: 3 } }, required: ["value"], additionalProperties: false };
  if (root.$defs.tree) root.properties.tree = { $ref: "#/$defs/tree" };
  if (chance(0.3)) root.$schema = "https://json-schema.org/draft/2020-12/schema";
  return root;
}

// ---- a JSON Schema sampler: instances in the schema's property order, as the compiler expects them ----
function resolve(root, ref) {
  if (ref === "#") return root;
  let cur = root;
  for (const t of ref.replace(/^#\//, "").split("/")) cur = cur?.[decodeURIComponent(t).replace(/~1/g, "/").replace(/~0/g, "~")];
  return cur;
}

function merge(a, b) {  // the compiler's allOf merge (json_schema_merge.h), for the keys the corpus uses
  if (a === true) return b;
  if (b === true) return a;
  const out = { ...a };
  for (const [k, v] of Object.entries(b)) {
    if (!(k in out)) out[k] = v;
    else if (k === "properties") {
      out.properties = { ...out.properties };
      for (const [p, ps] of Object.entries(v)) out.properties[p] = p in out.properties ? { allOf: [out.properties[p], ps] } : ps;
    } else if (k === "required") out.required = [...new Set([...out.required, ...v])];
    else if (["minimum", "minLength", "minItems", "minProperties"].includes(k)) out[k] = Math.max(out[k], v);
    else if (["maximum", "maxLength", "maxItems", "maxProperties"].includes(k)) out[k] = Math.min(out[k], v);
    else if (k === "allOf") out.allOf = [...out.allOf, ...v];
  }
  if ("const" in b && "const" in a) out.const = a.const;
  return out;
}

function flatten(root, s, depth = 0) {
  if (typeof s !== "object" || s === null || depth > 8) return s;
  if (s.$ref) {
    const { $ref, ...rest } = s;
    return flatten(root, merge(resolve(root, $ref), rest), depth + 1);
  }
  if (s.allOf) {
    const { allOf, ...rest } = s;
    return flatten(root, allOf.reduce((m, x) => merge(m, flatten(root, x, depth + 1)), rest), depth + 1);
  }
  return s;
}

const ASCII = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 _-./";
const randStr = (lo, hi) => { let s = ""; for (let i = 0, n = int(lo, hi); i < n; i++) s += chance(0.05) ? pick(["é", "中", "\n", "\"", "😀"]) : pick(ASCII); return s; };

function sampleRegex(re) {  // a string matching a simple regex, or null for constructs it does not know
  let i = 0;
  const cls = () => {
    let neg = false, set = [];
    if (re[i] === "^") { neg = true; i++; }
    while (i < re.length && re[i] !== "]") {
      let c = re[i++];
      if (c === "\\") { const e = re[i++]; set.push(...(e === "d" ? "0123456789" : e === "w" ? "abcxyzABC019_" : e === "s" ? " " : e)); continue; }
      if (re[i] === "-" && re[i + 1] !== "]") { const to = re[i + 1]; i += 2; for (let x = c.charCodeAt(0); x <= to.charCodeAt(0); x++) set.push(String.fromCharCode(x)); }
      else set.push(c);
    }
    i++;
    if (neg) set = [...ASCII].filter((c) => !set.includes(c));
    return () => pick(set);
  };
  const atom = () => {
    const c = re[i++];
    if (c === "[") return cls();
    if (c === "(") {
      if (re[i] === "?") { if (re[i + 1] !== ":") throw 0; i += 2; }
      const alts = [[]];
      while (re[i] !== ")") { if (i >= re.length) throw 0; if (re[i] === "|") { i++; alts.push([]); continue; } alts[alts.length - 1].push(quantified()); }
      i++;
      return () => pick(alts).map((f) => f()).join("");
    }
    if (c === "\\") { const e = re[i++]; if (e === "d") return () => pick([..."0123456789"]); if (e === "w") return () => pick([..."abcXYZ09_"]); if (e === "s") return () => " "; if (/[a-zA-Z]/.test(e)) throw 0; return () => e; }
    if (c === ".") return () => pick([..."abcxyz"]);
    return () => c;
  };
  const quantified = () => {
    const a = atom();
    let lo = 1, hi = 1;
    if (re[i] === "*") { lo = 0; hi = 3; i++; } else if (re[i] === "+") { lo = 1; hi = 4; i++; } else if (re[i] === "?") { lo = 0; hi = 1; i++; }
    else if (re[i] === "{") { const m = /^\{(\d+)(,(\d*))?\}/.exec(re.slice(i)); if (!m) throw 0; lo = +m[1]; hi = m[2] ? (m[3] ? +m[3] : lo + 3) : lo; i += m[0].length; }
    return () => { let s = ""; for (let k = 0, n = int(lo, hi); k < n; k++) s += a(); return s; };
  };
  try {
    const branches = [[]];
    const starts = re[0] === "^";
    if (starts) i = 1;
    let ends = false;
    while (i < re.length) {
      if (re[i] === "$" && i === re.length - 1) { ends = true; i++; break; }
      if (re[i] === "|") { i++; branches.push([]); continue; }
      branches[branches.length - 1].push(quantified());
    }
    return (starts ? "" : pick(["", "x"])) + pick(branches).map((f) => f()).join("") + (ends ? "" : pick(["", "y"]));
  } catch { return null; }
}

const FORMATS = {
  date: () => `${int(1990, 2030)}-${String(int(1, 12)).padStart(2, "0")}-${String(int(1, 28)).padStart(2, "0")}`,
  time: () => `${String(int(0, 23)).padStart(2, "0")}:${String(int(0, 59)).padStart(2, "0")}:${String(int(0, 59)).padStart(2, "0")}${pick(["Z", "+02:00", ".250Z"])}`,
  "date-time": () => `${FORMATS.date()}T${String(int(0, 23)).padStart(2, "0")}:${String(int(0, 59)).padStart(2, "0")}:${String(int(0, 59)).padStart(2, "0")}Z`,
  duration: () => pick(["P1D", "PT1H30M", "P2Y3M", "P4W", "PT45S"]),
  uuid: () => [8, 4, 4, 4, 12].map((n, k) => Array.from({ length: n }, (_, j) => k === 2 && j === 0 ? "4" : k === 3 && j === 0 ? "a" : pick([..."0123456789abcdef"])).join("")).join("-"),
  email: () => `${pick(["alice", "bob.smith", "ops+alerts"])}@${pick(["example.com", "mail.example.org"])}`,
  hostname: () => pick(["localhost", "api.example.com", "db-1.internal"]),
  ipv4: () => `${int(0, 255)}.${int(0, 255)}.${int(0, 255)}.${int(1, 254)}`,
  ipv6: () => pick(["::1", "2001:db8::1", "fe80::1:2:3:4"]),
  uri: () => pick(["https://example.com/a?b=c", "http://localhost:8080/x", "mailto:a@b.co", "urn:isbn:0451450523"]),
};

function sample(root, s0, depth, where) {
  const s = flatten(root, s0);
  if (s === true || s === undefined || (typeof s === "object" && Object.keys(s).length === 0)) return pick([1, "x", true, null]);
  if ("const" in s) return s.const;
  if (s.enum) return pick(s.enum.filter((v) => !s.type || s.type !== "string" || typeof v === "string" || (v === null && s.nullable)));
  if (s.anyOf || s.oneOf) {
    const key = s.anyOf ? "anyOf" : "oneOf";
    const { [key]: alts, ...base } = s;
    return sample(root, merge(base, pick(alts)), depth, where);
  }
  let type = s.type ?? (s.properties || s.additionalProperties || s.propertyNames ? "object" : s.items || s.prefixItems ? "array" : s.pattern || s.format || s.minLength !== undefined ? "string" : s.minimum !== undefined || s.exclusiveMinimum !== undefined ? "number" : pick(["string", "integer"]));
  if (Array.isArray(type)) type = pick(type);
  if (s.nullable && chance(0.2)) return null;
  where.push(s);
  switch (type) {
    case "null": return null;
    case "boolean": return chance(0.5);
    case "integer": case "number": {
      const lo = s.minimum ?? (s.exclusiveMinimum !== undefined ? s.exclusiveMinimum + (type === "integer" ? 1 : 0.5) : -1000);
      const hi = s.maximum ?? (s.exclusiveMaximum !== undefined ? s.exclusiveMaximum - (type === "integer" ? 1 : 0.5) : lo + 2000);
      if (hi - lo > 2 ** 52) return { big: (BigInt(Math.floor(lo)) + BigInt(Math.floor(rnd() * 2 ** 40))).toString() };
      if (type === "integer" || s.multipleOf === 1) { const v = Math.ceil(lo) + Math.floor(rnd() * (Math.floor(hi) - Math.ceil(lo) + 1)); return s.multipleOf ? Math.round(v / s.multipleOf) * s.multipleOf : v; }
      return Math.round((lo + rnd() * (hi - lo)) * 1000) / 1000;
    }
    case "string": {
      if (s.pattern) { const r = sampleRegex(s.pattern); if (r !== null && (!s.format || !FORMATS[s.format])) return r; }
      if (s.format && FORMATS[s.format]) return FORMATS[s.format]();
      return randStr(s.minLength ?? 0, Math.min(s.maxLength ?? 12, (s.minLength ?? 0) + 12));
    }
    case "array": {
      const prefix = s.prefixItems ?? (Array.isArray(s.items) ? s.items : []);
      const rest = s.prefixItems ? s.items : Array.isArray(s.items) ? s.additionalItems : s.items;
      const lo = s.minItems ?? 0, hi = Math.min(s.maxItems ?? lo + 3, lo + 3, depth > 2 ? lo : 99);
      const n = rest === false ? Math.min(prefix.length, int(lo, Math.max(lo, prefix.length))) : int(Math.max(lo, depth > 2 ? 0 : Math.min(prefix.length, hi)), Math.max(hi, lo));
      return Array.from({ length: n }, (_, k) => sample(root, k < prefix.length ? prefix[k] : rest ?? true, depth + 1, where));
    }
    default: {
      const out = {};
      const props = { ...(s.properties ?? {}) };
      for (const r of s.required ?? []) if (!(r in props)) props[r] = s.additionalProperties ?? true;
      for (const [k, ps] of Object.entries(props)) {
        if ((s.required ?? []).includes(k) || (chance(depth > 2 ? 0.1 : 0.6) && ps !== false)) out[k] = sample(root, ps, depth + 1, where);
      }
      const extraSchema = s.additionalProperties ?? (s.properties || s.patternProperties ? false : true);
      if (s.patternProperties && chance(0.5)) for (const [p, ps] of Object.entries(s.patternProperties)) { const k = sampleRegex(p); if (k && !(k in out)) out[k] = sample(root, ps, depth + 1, where); }
      if (extraSchema !== false && chance(0.5)) {
        for (let k = 0, n = int(s.minProperties ?? 1, Math.min(s.maxProperties ?? 3, 3)); k < n; k++) {
          const key = s.propertyNames?.pattern ? sampleRegex(s.propertyNames.pattern) : s.propertyNames?.enum ? pick(s.propertyNames.enum) : "extra_" + word();
          if (key !== null && !(key in out) && !(key in props)) out[key] = sample(root, extraSchema, depth + 1, where);
        }
      }
      return out;
    }
  }
}

// JSON text with {big: "digits"} written as a bare number.
const text = (v) => JSON.stringify(v, (k, x) => (x && typeof x === "object" && "big" in x ? `@@${x.big}@@` : x)).replace(/"@@(-?\d+)@@"/g, "$1");

// ---- mutations that break one enforced keyword ----
function mutate(value, root, schema) {
  const v = structuredClone(value);
  const nodes = [];
  const walk = (x, set) => { if (x && typeof x === "object" && !("big" in x)) for (const k of Object.keys(x)) { nodes.push([x, k]); walk(x[k], set); } };
  walk(v);
  const kind = int(0, 5);
  if (kind === 0 || nodes.length === 0) return pick([42, "text", [], null, { extra: 1 }]);
  const [parent, key] = pick(nodes);
  const x = parent[key];
  if (kind === 1) parent[key] = typeof x === "string" ? 12345 : typeof x === "number" ? "12345" : typeof x === "boolean" ? "true" : x === null ? 0 : typeof x === "object" ? "obj" : null;
  else if (kind === 2 && !Array.isArray(parent)) delete parent[key];
  else if (kind === 3 && typeof x === "string") parent[key] = pick([x + "!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!", "", "not a " + x, "2024-13-45"]);
  else if (kind === 4 && typeof x === "number") parent[key] = pick([x + 1e7, x - 1e7, x + 0.5, -x - 1]);
  else if (kind === 5 && x && typeof x === "object" && !Array.isArray(x)) x["zz_undeclared_" + int(0, 9)] = 1;
  else if (Array.isArray(x)) x.push(...x, 1, "a");
  else return null;
  return v;
}

// ---- the corpus ----
const corpus = [];
const seen = new Set();
let attempts = 0;
while (corpus.length < 1000 && attempts < 20000) {
  attempts++;
  const source = pick(["mcp", "zod3", "zod4"]);
  const schema = source === "mcp" ? mcpTool() : zodTool(source === "zod4");
  const key = JSON.stringify(schema);
  if (seen.has(key)) continue;
  let validate;
  try { validate = validatorFor(schema); } catch { continue; }
  const valid = new Map();
  const invalid = new Map();
  for (let t = 0; t < 40 && valid.size < 4; t++) {
    const where = [];
    const v = sample(schema, schema, 0, where);
    const s = text(v);
    if (!valid.has(s) && validate(JSON.parse(s))) valid.set(s, v);
  }
  if (valid.size === 0) continue;
  for (let t = 0; t < 60 && invalid.size < 4; t++) {
    const m = mutate(pick([...valid.values()]), schema, schema);
    if (m === null) continue;
    const s = text(m);
    if (valid.has(s) || invalid.has(s) || validate(JSON.parse(s))) continue;
    invalid.set(s, [...new Set(validate.errors.map((e) => e.keyword))]);
  }
  seen.add(key);
  corpus.push({ name: `${source}-${corpus.length}`, schema, valid: [...valid.keys()], invalid: [...invalid].map(([t, k]) => ({ text: t, keywords: k })) });
}
const out = process.argv[2] ?? new URL("schema_corpus.json", import.meta.url).pathname;
writeFileSync(out, JSON.stringify(corpus, null, 0).replace(/\},\{"name"/g, '},\n{"name"') + "\n");
console.log(`${corpus.length} schemas (${attempts} drawn), ${corpus.reduce((n, c) => n + c.valid.length, 0)} valid and ${corpus.reduce((n, c) => n + c.invalid.length, 0)} invalid instances -> ${out}`);
