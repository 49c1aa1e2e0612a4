// SPDX-License-Identifier: MIT
// The reference tokenizer for test_tokenizer.py and bench/tokenize.sh:
// HF's JS library @huggingface/tokenizers on a tokenizer.json and its
// tokenizer_config.json.
//
//   node tokref.js JSLIB_PREFIX TOKENIZER_DIR < texts.jsonl
//     one line per text: {"ids": [...], "text": decode without special
//     tokens, "text_keep": decode with them} (no clean-up of spaces);
//   node tokref.js JSLIB_PREFIX TOKENIZER_DIR --bench N < texts.jsonl
//     encodes every text N times and prints the load and encode times.
"use strict";
const { createRequire } = require("module");
const fs = require("fs");
const path = require("path");

const [prefix, dir, mode, reps] = process.argv.slice(2);
const { Tokenizer } = createRequire(path.join(path.resolve(prefix), "package.json"))(
  "@huggingface/tokenizers");
const read = (name) => JSON.parse(fs.readFileSync(path.join(dir, name), "utf8"));
const texts = fs.readFileSync(0, "utf8").split("\n").filter((l) => l.length > 0)
  .map((l) => JSON.parse(l));

let t0 = process.hrtime.bigint();
const tok = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
const loadMs = Number(process.hrtime.bigint() - t0) / 1e6;

if (mode === "--bench") {
  let bytes = 0, tokens = 0;
  t0 = process.hrtime.bigint();
  for (let r = 0; r < Number(reps || 1); r++) {
    for (const s of texts) {
      tokens += tok.encode(s).ids.length;
      bytes += Buffer.byteLength(s, "utf8");
    }
  }
  const ms = Number(process.hrtime.bigint() - t0) / 1e6;
  process.stdout.write(JSON.stringify({ load_ms: loadMs, bytes, tokens, encode_ms: ms }) + "\n");
} else {
  const out = [];
  const opts = (keep) => ({ skip_special_tokens: !keep, clean_up_tokenization_spaces: false });
  for (const s of texts) {
    const ids = tok.encode(s).ids;
    // decode() refuses an empty list; its text is ""
    const text = ids.length ? tok.decode(ids, opts(false)) : "";
    const textKeep = ids.length ? tok.decode(ids, opts(true)) : "";
    out.push(JSON.stringify({ ids, text, text_keep: textKeep }));
  }
  process.stdout.write(out.join("\n") + "\n");
}
