// Validates generated JSON texts against their schemas with ajv (an independent JSON Schema implementation).
// Usage: node validate.js INPUT.json, where INPUT is {"cases": [{"name", "schema", "instances": [text, ...]}]}.
// Each schema is compiled for the draft its "$schema" names (2020-12 when it names none); a schema written for an
// older draft without saying so (array-form "items", boolean "exclusiveMinimum") is retried with draft 7, then 4, and
// one whose subschemas share an id is retried without those ids.
// Exits 1 if any text does not parse or does not validate, printing each failure; a schema that no draft compiles
// (a remote $ref, say) is a failure too, printed as UNCHECKED.
'use strict';
const fs = require('fs');
const Ajv07 = require('ajv');
const Ajv2019 = require('ajv/dist/2019');
const Ajv2020 = require('ajv/dist/2020');
const AjvDraft04 = require('ajv-draft-04');
const addFormats = require('ajv-formats');

function makeAjv(Class) {
  const ajv = new Class({ strict: false, allErrors: true, validateFormats: true });
  addFormats(ajv);
  return ajv;
}
const validators = {
  'draft-04': makeAjv(AjvDraft04),
  'draft-07': makeAjv(Ajv07),
  '2019-09': makeAjv(Ajv2019),
  '2020-12': makeAjv(Ajv2020),
};
validators['draft-07'].addMetaSchema(require('ajv/dist/refs/json-schema-draft-06.json'));

function draftsFor(schema) {
  const declared = typeof schema === 'object' && schema !== null && typeof schema.$schema === 'string'
      ? schema.$schema : '';
  const named = ['draft-04', 'draft-07', '2019-09', '2020-12'].find((d) => declared.includes(d)) ??
                (declared.includes('draft-06') ? 'draft-07' : (declared.includes('draft-03') ? 'draft-04' : '2020-12'));
  return [named, ...['draft-07', 'draft-04'].filter((d) => d !== named)];
}

// The schema without the ids of its subschemas ("id"/"$id" with a string value below the root): some real schemas
// give two subschemas one id, which ajv refuses, though no $ref uses it.
function withoutNestedIds(value, isRoot = true) {
  if (Array.isArray(value)) return value.map((item) => withoutNestedIds(item, false));
  if (typeof value !== 'object' || value === null) return value;
  const out = {};
  for (const [key, item] of Object.entries(value)) {
    if (!isRoot && (key === 'id' || key === '$id') && typeof item === 'string') continue;
    out[key] = withoutNestedIds(item, false);
  }
  return out;
}

function compile(schema) {
  const errors = [];
  for (const candidate of [schema, withoutNestedIds(schema)]) {
    for (const draft of draftsFor(candidate)) {
      const ajv = validators[draft];
      try {
        // A schema's own $id is registered once per validator; compiling the same one again must not clash.
        ajv.removeSchema(candidate);
        return { ajv, validate: ajv.compile(candidate) };
      } catch (e) {
        errors.push(`${draft}: ${e.message}`);
      }
    }
  }
  return { error: errors.join('; ') };
}

const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
let checked = 0;
let failures = 0;
for (const c of input.cases) {
  const { ajv, validate, error } = compile(c.schema);
  for (const text of c.instances) {
    checked++;
    if (error) {
      failures++;
      console.log(`UNCHECKED ${c.name}: no draft of ajv compiles the schema (${error})`);
      continue;
    }
    let value;
    try {
      value = JSON.parse(text);
    } catch (e) {
      failures++;
      console.log(`FAIL ${c.name}: not JSON (${e.message}): ${text}`);
      continue;
    }
    if (!validate(value)) {
      failures++;
      console.log(`FAIL ${c.name}: ${ajv.errorsText(validate.errors)}: ${text}`);
    }
  }
}
console.log(`ajv: ${checked} instances checked, ${failures} failures`);
process.exit(failures ? 1 : 0);
