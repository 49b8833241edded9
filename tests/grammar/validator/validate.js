// Validates generated JSON texts against their schemas with ajv (an independent JSON Schema implementation).
// Usage: node validate.js INPUT.json, where INPUT is {"cases": [{"name", "schema", "instances": [text, ...]}]}.
// Exits 1 if any text does not parse or does not validate, printing each failure.
'use strict';
const fs = require('fs');
const Ajv2020 = require('ajv/dist/2020');
const addFormats = require('ajv-formats');

const input = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: true });
addFormats(ajv);
let checked = 0;
let failures = 0;
for (const c of input.cases) {
  const validate = ajv.compile(c.schema);
  for (const text of c.instances) {
    checked++;
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
