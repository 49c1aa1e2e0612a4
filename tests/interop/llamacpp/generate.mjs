// SPDX-License-Identifier: MIT
//
// llama.cpp as a peer: greedy generation, timings and last-position
// log-probabilities from a GGUF file, through the npm package
// node-llama-cpp (pinned to 3.21.1 by tests/interop/llamacppfix.py, which
// installs it). CPU only, prebuilt binaries only, a fixed thread count.
//
//   node generate.mjs --modules DIR --model FILE.gguf [--threads T]
//        [--max-tokens N] [--prompt TEXT | --tokens ID,ID,...] [--no-bos]
//        [--ignore-eos] [--warmup] [--ctx N] [--batch N] [--logits]
//
// --modules DIR is the node_modules directory that holds node-llama-cpp
// (else $MUSTER_LLAMACPP_MODULES). With neither --prompt nor --tokens the
// prompt is the BOS token alone (an "empty prompt"). A --prompt text gets
// the BOS token in front unless --no-bos; --tokens are fed exactly as given.
// Generation is greedy (temperature 0, no penalties) and stops at an
// end-of-generation token unless --ignore-eos.
//
// Prints one JSON object on the last line of stdout:
//   prompt_tokens, tokens (generated ids), text, stopped_at_eos,
//   prefill_tok_s  = prompt length / time to first token,
//   decode_tok_s   = (generated - 1) / time from the first token to the last
//                    (each of those steps evaluates one position),
//   ttft_ms        = from handing over the prompt to the first sampled token,
//   prefill_cpu_ms, decode_cpu_ms = CPU time the process got in those two
//                    phases (all threads): on a shared machine, compare with
//                    the wall time x threads to see how much it really had,
//   load_ms, peak_rss_kib (this process's ru_maxrss: node itself included;
//   base_rss_kib is the RSS before the model was loaded), threads, ctx, batch.
// --warmup evaluates the BOS token once and clears the sequence before the
// timed run, so the timings do not include first-touch page faults of the
// mmapped weights (llama.cpp's own llama-bench warms up the same way).
//
// --logits evaluates the prompt and prints, instead of generating,
// `logprobs`: the natural log of the softmax of the last position's logits,
// one per vocabulary id (null where the float32 probability underflowed to
// 0). node-llama-cpp exposes no raw logits, only the probabilities its
// sampler computes from them (AddonContext.cpp's SampleToken: a float32
// softmax over the whole vocabulary when the sampler is greedy). The logits
// are therefore known up to one additive constant per position, which is
// what a softmax-invariant comparison needs: compare log-softmaxes.

import fs from "node:fs";
import path from "node:path";
import {pathToFileURL} from "node:url";

function usage(msg) {
    process.stderr.write(`generate.mjs: ${msg}\n`);
    process.exit(2);
}

function parseArgs(argv) {
    const opts = {threads: 1, maxTokens: 200, bos: true, ignoreEos: false, warmup: false,
        logits: false, modules: process.env.MUSTER_LLAMACPP_MODULES};
    const valued = {"--modules": "modules", "--model": "model", "--threads": "threads",
        "--max-tokens": "maxTokens", "--prompt": "prompt", "--tokens": "tokens",
        "--ctx": "ctx", "--batch": "batch"};
    const flags = {"--no-bos": ["bos", false], "--ignore-eos": ["ignoreEos", true],
        "--warmup": ["warmup", true], "--logits": ["logits", true]};
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a in valued) {
            if (i + 1 >= argv.length)
                usage(`${a} needs a value`);
            opts[valued[a]] = argv[++i];
        } else if (a in flags) {
            opts[flags[a][0]] = flags[a][1];
        } else {
            usage(`unknown argument ${a}`);
        }
    }
    for (const k of ["threads", "maxTokens", "ctx", "batch"]) {
        if (opts[k] === undefined)
            continue;
        const n = Number(opts[k]);
        if (!Number.isInteger(n) || n < (k === "maxTokens" ? 0 : 1))
            usage(`bad value for ${k}: ${opts[k]}`);
        opts[k] = n;
    }
    if (!opts.model)
        usage("--model FILE.gguf is required");
    if (!opts.modules)
        usage("--modules DIR (or $MUSTER_LLAMACPP_MODULES) is required");
    if (opts.prompt !== undefined && opts.tokens !== undefined)
        usage("give --prompt or --tokens, not both");
    if (opts.tokens !== undefined) {
        opts.tokens = opts.tokens.split(",").filter((s) => s !== "").map((s) => {
            const n = Number(s);
            if (!Number.isInteger(n) || n < 0)
                usage(`bad token id ${s}`);
            return n;
        });
        if (opts.tokens.length === 0)
            usage("--tokens needs at least one id");
    }
    return opts;
}

async function importLlama(modules) {
    // The package is ESM with an "exports" map; import its entry point by
    // path, since this script does not live beside the node_modules it uses.
    const pkgDir = path.join(modules, "node-llama-cpp");
    const pkg = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8"));
    const entry = pkg.exports?.["."]?.import ?? pkg.main;
    const mod = await import(pathToFileURL(path.join(pkgDir, entry)).href);
    return {mod, version: pkg.version};
}

function ms(t0, t1) {
    return Number(t1 - t0) / 1e6;
}

// CPU time of the whole process (every thread), user + system, in ms.
function cpuMs() {
    const u = process.cpuUsage();
    return (u.user + u.system) / 1e3;
}

function rssKib() {
    const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync("/proc/self/status", "utf8"));
    return m ? Number(m[1]) : null;
}

function promptTokens(opts, model) {
    if (opts.tokens !== undefined)
        return opts.tokens;
    const bos = model.tokens.bos;
    if (opts.bos && bos == null)
        usage("the model has no BOS token: give --no-bos with a --prompt");
    const text = opts.prompt === undefined ? [] : model.tokenize(opts.prompt, false);
    const toks = opts.bos ? [bos, ...text] : text;
    if (toks.length === 0)
        usage("empty prompt with --no-bos");
    return toks;
}

// Greedy generation of up to opts.maxTokens tokens after `prompt`, timed.
async function generate(seq, prompt, opts) {
    const out = [];
    let stoppedAtEos = false;
    const t0 = process.hrtime.bigint();
    const c0 = cpuMs();
    let tFirst = null;
    let tLast = null;
    let cFirst = null;
    let cLast = null;
    if (opts.maxTokens > 0) {
        const it = seq.evaluate(prompt, {temperature: 0, yieldEogToken: true});
        for await (const token of it) {
            tLast = process.hrtime.bigint();
            cLast = cpuMs();
            if (tFirst === null) {
                tFirst = tLast;
                cFirst = cLast;
            }
            if (!opts.ignoreEos && seq.model.isEogToken(token)) {
                stoppedAtEos = true;
                break;
            }
            out.push(token);
            if (out.length >= opts.maxTokens)
                break;
        }
    }
    const ttft = tFirst === null ? null : ms(t0, tFirst);
    const decodeSteps = out.length - 1;
    return {
        tokens: out, stoppedAtEos, ttft,
        prefill: ttft ? prompt.length / (ttft / 1e3) : null,
        decode: decodeSteps > 0 && tLast > tFirst ? decodeSteps / (ms(tFirst, tLast) / 1e3) : null,
        prefillCpu: cFirst === null ? null : cFirst - c0,
        decodeCpu: decodeSteps > 0 ? cLast - cFirst : null,
    };
}

// log-softmax of the logits after the last prompt token (see the header).
async function lastLogprobs(seq, prompt, nVocab) {
    const it = seq.evaluateWithMetadata(prompt, {probabilities: true}, {temperature: 0});
    const first = await it.next();
    await it.return();
    if (first.done)
        throw new Error("no output for the prompt");
    const logprobs = new Array(nVocab).fill(null);
    for (const [token, p] of first.value.probabilities)
        logprobs[token] = p > 0 ? Math.log(p) : null;
    return {argmax: first.value.token, logprobs};
}

async function main() {
    const opts = parseArgs(process.argv.slice(2));
    const baseRss = rssKib();
    const {mod, version} = await importLlama(opts.modules);
    const llama = await mod.getLlama({gpu: false, build: "never", maxThreads: opts.threads,
        logLevel: mod.LlamaLogLevel.error, progressLogs: false});
    const tLoad = process.hrtime.bigint();
    const model = await llama.loadModel({modelPath: path.resolve(opts.model), gpuLayers: 0,
        useMmap: true});
    const prompt = promptTokens(opts, model);
    const ctx = opts.ctx ?? Math.max(prompt.length + opts.maxTokens + 1, 64);
    if (prompt.length + (opts.logits ? 0 : opts.maxTokens) > ctx)
        usage(`prompt (${prompt.length}) + max tokens (${opts.maxTokens}) exceed --ctx ${ctx}`);
    const batch = opts.batch ?? Math.min(ctx, 512);
    const context = await model.createContext({contextSize: ctx, batchSize: batch, sequences: 1,
        threads: {ideal: opts.threads, min: opts.threads}});
    const loadMs = ms(tLoad, process.hrtime.bigint());
    const seq = context.getSequence();
    const result = {
        peer: `node-llama-cpp ${version}`,
        llama_cpp: llama.llamaCppRelease.release,
        model: opts.model, threads: opts.threads, ctx: context.contextSize, batch: context.batchSize,
        flash_attention: context.flashAttention, prompt_tokens: prompt.length, load_ms: loadMs,
    };
    if (opts.warmup && model.tokens.bos != null) {
        const it = seq.evaluate([model.tokens.bos], {temperature: 0, yieldEogToken: true});
        await it.next();
        await it.return();
        await seq.clearHistory();
    }
    if (opts.logits) {
        const nVocab = Number(model.fileInfo.metadata.tokenizer.ggml.tokens.length);
        Object.assign(result, await lastLogprobs(seq, prompt, nVocab));
    } else {
        const g = await generate(seq, prompt, opts);
        Object.assign(result, {
            tokens: g.tokens,
            text: model.detokenize(g.tokens, false, prompt),
            n_generated: g.tokens.length, stopped_at_eos: g.stoppedAtEos,
            prefill_tok_s: g.prefill, decode_tok_s: g.decode, ttft_ms: g.ttft,
            prefill_cpu_ms: g.prefillCpu, decode_cpu_ms: g.decodeCpu,
        });
    }
    result.base_rss_kib = baseRss;
    result.peak_rss_kib = process.resourceUsage().maxRSS;
    await context.dispose();
    await model.dispose();
    await llama.dispose();
    process.stdout.write(JSON.stringify(result) + "\n");
}

main().catch((err) => {
    process.stderr.write(`generate.mjs: ${err?.stack ?? err}\n`);
    process.exit(1);
});
