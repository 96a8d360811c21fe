// Independent check of structured-output results written by tests/test_structured_engine.cpp.
// Input: a JSONL file, one {"id", "check", "text", "finish_reason", and "schema" | "pattern" | "choices"}
// ("json_schema": ajv, strict, draft 7; "json_schema_any": any draft-7 or 2020-12 schema, with ajv-formats)
// per line. Only outputs that finished with "stop" must be valid; "length" outputs are counted.
// Prints one JSON summary line; exits 1 when any finished output is invalid.
import { readFileSync } from "node:fs";
import Ajv from "ajv";
import Ajv2020 from "ajv/dist/2020.js";
import addFormats from "ajv-formats";

const ajv = new Ajv({ strict: true, allErrors: true });
// Any schema, as the JSON Schema corpus has them: draft 2020-12 or 7, formats checked, unknown keywords allowed.
const ajvAny = { d07: addFormats(new Ajv({ strict: false, allErrors: true })), d20: addFormats(new Ajv2020({ strict: false, allErrors: true })) };
const compiled = new Map();
function compileAny(schema) {
  const key = JSON.stringify(schema);
  if (!compiled.has(key)) {
    const d20 = String(schema.$schema || "").includes("2020") || /"prefixItems"|"\$defs"|"dependentRequired"/.test(key);
    compiled.set(key, (d20 ? ajvAny.d20 : ajvAny.d07).compile(schema));
  }
  return compiled.get(key);
}

// expr := term (("+"|"-") term)*, term := factor (("*"|"/") factor)*, factor := number | "(" expr ")" | "-" factor
function isArithmetic(s) {
  let i = 0;
  const number = () => {
    const m = /^[0-9]+(\.[0-9]+)?/.exec(s.slice(i));
    if (!m) return false;
    i += m[0].length;
    return true;
  };
  const factor = () => {
    if (s[i] === "(") { i++; if (!expr() || s[i] !== ")") return false; i++; return true; }
    if (s[i] === "-") { i++; return factor(); }
    return number();
  };
  const term = () => { if (!factor()) return false; while (s[i] === "*" || s[i] === "/") { i++; if (!factor()) return false; } return true; };
  const expr = () => { if (!term()) return false; while (s[i] === "+" || s[i] === "-") { i++; if (!term()) return false; } return true; };
  return expr() && i === s.length;
}

function check(r) {
  switch (r.check) {
    case "json_schema": {
      const v = ajv.compile(r.schema);
      const value = JSON.parse(r.text);
      if (!v(value)) return ajv.errorsText(v.errors);
      return null;
    }
    case "json_schema_any": {
      const v = compileAny(r.schema);
      if (!v(JSON.parse(r.text))) return JSON.stringify(v.errors.slice(0, 3));
      return null;
    }
    case "json_object": {
      const value = JSON.parse(r.text);
      return value !== null && typeof value === "object" && !Array.isArray(value) ? null : "not an object";
    }
    case "json": JSON.parse(r.text); return null;
    case "regex": return new RegExp(`^(?:${r.pattern})$`, "u").test(r.text) ? null : `does not match /${r.pattern}/`;
    case "arithmetic": return isArithmetic(r.text) ? null : "not an arithmetic expression";
    case "choice": return r.choices.includes(r.text) ? null : "not one of the choices";
    default: return `unknown check ${r.check}`;
  }
}

const lines = readFileSync(process.argv[2], "utf8").split("\n").filter((l) => l.length > 0);
const summary = { total: 0, stop: 0, length: 0, other: 0, valid: 0, invalid: [] };
for (const line of lines) {
  const r = JSON.parse(line);
  summary.total++;
  if (r.finish_reason !== "stop") { r.finish_reason === "length" ? summary.length++ : summary.other++; continue; }
  summary.stop++;
  let err;
  try { err = check(r); } catch (e) { err = String(e); }
  if (err) summary.invalid.push({ id: r.id, error: err, text: r.text });
  else summary.valid++;
}
console.log(JSON.stringify(summary));
process.exit(summary.invalid.length ? 1 : 0);
