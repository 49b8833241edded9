// Draws the fixed sample in schemas.jsonl from a checkout of guidance-ai/jsonschemabench:
//   node sample.mjs /path/to/jsonschemabench [PER_DATASET|all] > schemas.jsonl
// The same kPerDataset schemas of each of the paper's eight datasets are picked every time: the files of a dataset
// ordered by the SHA-256 of their names. Each line keeps what the test needs: the schema verbatim and its test
// instances (valid or not, without the validators' messages).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

const kDatasets = ['Glaiveai2K', 'Github_easy', 'Snowplow', 'Github_medium', 'Kubernetes', 'WashingtonPost',
                   'Github_hard', 'JsonSchemaStore'];
const kPerDataset = process.argv[3] === 'all' ? Infinity : Number(process.argv[3] ?? 40);

const dataDir = join(process.argv[2], 'maskbench', 'data');
const files = readdirSync(dataDir);
const sha256 = (text) => createHash('sha256').update(text).digest('hex');
for (const dataset of kDatasets) {
  const picked = files.filter((name) => name.startsWith(`${dataset}---`))
                      .sort((a, b) => sha256(a).localeCompare(sha256(b)))
                      .slice(0, Math.min(kPerDataset, files.length));
  for (const name of picked) {
    const entry = JSON.parse(readFileSync(join(dataDir, name), 'utf8'));
    const tests = (entry.tests ?? []).map((t) => ({ valid: t.valid, data: t.data }));
    const id = name.slice(dataset.length + 3).replace(/\.json$/, '');
    console.log(JSON.stringify({ dataset, id, schema: entry.schema, tests }));
  }
}
