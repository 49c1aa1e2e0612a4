/* SPDX-License-Identifier: MIT */
/*
 * The layout of the public structs as this library was built, for
 * bindings that mirror them (the Python binding checks its ctypes
 * structures against this table when it is imported). It describes the
 * public headers of every layer, so it is the top layer of the library
 * (src/api), above all of them. A field added to one of these
 * structs is added here too; tests/unit/api/test_layout.c checks that
 * every struct's fields are listed in order and cover it whole.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "muster/common.h"
#include "muster/etcd.h"
#include "muster/llm.h"
#include "muster/md.h"
#include "muster/model.h"
#include "muster/pipeline.h"
#include "muster/serve.h"
#include "muster/server.h"
#include "muster/store.h"
#include "muster/stream.h"
#include "muster/tracker.h"
#include "api/layout_int.h"

#define F(type, field) {#field, offsetof(type, field), sizeof(((type *)0)->field)}

static const mu__layout_field_t budget[] = {
	F(mu_budget_t, conn_bytes), F(mu_budget_t, total_bytes), F(mu_budget_t, grace), {0}};

static const mu__layout_field_t tracker_opts[] = {
	F(mu_tracker_opts_t, struct_size), F(mu_tracker_opts_t, host),
	F(mu_tracker_opts_t, port), F(mu_tracker_opts_t, port_end),
	F(mu_tracker_opts_t, silent), F(mu_tracker_opts_t, reuse_addr),
	F(mu_tracker_opts_t, timeout), F(mu_tracker_opts_t, max_frame),
	F(mu_tracker_opts_t, max_keys), F(mu_tracker_opts_t, max_per_conn),
	F(mu_tracker_opts_t, max_keys_per_conn), F(mu_tracker_opts_t, budget),
	F(mu_tracker_opts_t, metrics), F(mu_tracker_opts_t, allow), {0}};

static const mu__layout_field_t server_opts[] = {
	F(mu_server_opts_t, struct_size), F(mu_server_opts_t, host),
	F(mu_server_opts_t, port), F(mu_server_opts_t, port_end),
	F(mu_server_opts_t, tracker_host), F(mu_server_opts_t, tracker_port),
	F(mu_server_opts_t, key), F(mu_server_opts_t, custom_addr),
	F(mu_server_opts_t, silent), F(mu_server_opts_t, handshake_timeout),
	F(mu_server_opts_t, session_timeout), F(mu_server_opts_t, poll_period),
	F(mu_server_opts_t, retry_max), F(mu_server_opts_t, defer_register),
	F(mu_server_opts_t, on_session), F(mu_server_opts_t, ud),
	F(mu_server_opts_t, metrics), F(mu_server_opts_t, sec),
	F(mu_server_opts_t, budget), F(mu_server_opts_t, queue_timeout), {0}};

static const mu__layout_field_t store_server_opts[] = {
	F(mu_store_server_opts_t, struct_size), F(mu_store_server_opts_t, host),
	F(mu_store_server_opts_t, port), F(mu_store_server_opts_t, max_key_bytes),
	F(mu_store_server_opts_t, max_value_bytes), F(mu_store_server_opts_t, max_keys),
	F(mu_store_server_opts_t, request_timeout), F(mu_store_server_opts_t, silent),
	F(mu_store_server_opts_t, budget), F(mu_store_server_opts_t, max_watches),
	F(mu_store_server_opts_t, max_watches_total), F(mu_store_server_opts_t, metrics),
	F(mu_store_server_opts_t, allow), {0}};

static const mu__layout_field_t store_client_opts[] = {
	F(mu_store_client_opts_t, struct_size), F(mu_store_client_opts_t, host),
	F(mu_store_client_opts_t, port), F(mu_store_client_opts_t, dialect),
	F(mu_store_client_opts_t, timeout_ms), F(mu_store_client_opts_t, raw_keys),
	F(mu_store_client_opts_t, max_value_bytes),
	F(mu_store_client_opts_t, connect_timeout_ms), {0}};

static const mu__layout_field_t store_value[] = {
	F(mu_store_value_t, data), F(mu_store_value_t, len), {0}};

static const mu__layout_field_t md_opts[] = {
	F(mu_md_opts_t, struct_size), F(mu_md_opts_t, name), F(mu_md_opts_t, listen),
	F(mu_md_opts_t, listen_host), F(mu_md_opts_t, listen_port),
	F(mu_md_opts_t, etcd_endpoints), F(mu_md_opts_t, etcd_namespace),
	F(mu_md_opts_t, tcpstore_endpoint), F(mu_md_opts_t, no_env),
	F(mu_md_opts_t, etcd_watch_timeout), F(mu_md_opts_t, lease_ttl),
	F(mu_md_opts_t, store_timeout), F(mu_md_opts_t, op_timeout),
	F(mu_md_opts_t, listen_budget), F(mu_md_opts_t, on_event), F(mu_md_opts_t, ud),
	F(mu_md_opts_t, remote_cache_max), F(mu_md_opts_t, metrics), {0}};

static const mu__layout_field_t md_peer[] = {
	F(mu_md_peer_t, ip), F(mu_md_peer_t, port), {0}};

static const mu__layout_field_t md_event[] = {
	F(mu_md_event_t, op), F(mu_md_event_t, kind), F(mu_md_event_t, status),
	F(mu_md_event_t, name), F(mu_md_event_t, detail), {0}};

static const mu__layout_field_t etcd_opts[] = {
	F(mu_etcd_opts_t, struct_size), F(mu_etcd_opts_t, endpoints),
	F(mu_etcd_opts_t, timeout_ms), {0}};

static const mu__layout_field_t stage_server_opts[] = {
	F(mu_stage_server_opts_t, struct_size), F(mu_stage_server_opts_t, host),
	F(mu_stage_server_opts_t, port), F(mu_stage_server_opts_t, requests),
	F(mu_stage_server_opts_t, max_conns), F(mu_stage_server_opts_t, io_timeout_ms),
	F(mu_stage_server_opts_t, idle_timeout_ms), F(mu_stage_server_opts_t, silent_timeout_ms),
	F(mu_stage_server_opts_t, max_frame_bytes), F(mu_stage_server_opts_t, name),
	F(mu_stage_server_opts_t, budget), F(mu_stage_server_opts_t, metrics),
	F(mu_stage_server_opts_t, sec), F(mu_stage_server_opts_t, body_timeout_ms), {0}};

static const mu__layout_field_t device_opts[] = {
	F(mu_device_opts_t, struct_size), F(mu_device_opts_t, key),
	F(mu_device_opts_t, mem_budget), F(mu_device_opts_t, threads),
	F(mu_device_opts_t, models), F(mu_device_opts_t, nmodels),
	F(mu_device_opts_t, md_host), F(mu_device_opts_t, md_port),
	F(mu_device_opts_t, cache_dir), F(mu_device_opts_t, metrics), {0}};

static const mu__layout_field_t coord_opts[] = {
	F(mu_coord_opts_t, struct_size), F(mu_coord_opts_t, connect_timeout_ms),
	F(mu_coord_opts_t, io_timeout_ms), F(mu_coord_opts_t, max_frame_bytes),
	F(mu_coord_opts_t, sec), {0}};

static const mu__layout_field_t secure_opts[] = {
	F(mu_secure_opts_t, struct_size), F(mu_secure_opts_t, secret_file),
	F(mu_secure_opts_t, tls_cert), F(mu_secure_opts_t, tls_key),
	F(mu_secure_opts_t, tls_ca), F(mu_secure_opts_t, tls_no_verify), {0}};

static const mu__layout_field_t cluster_opts[] = {
	F(mu_cluster_opts_t, struct_size), F(mu_cluster_opts_t, tracker_host),
	F(mu_cluster_opts_t, tracker_port), F(mu_cluster_opts_t, key),
	F(mu_cluster_opts_t, devices), F(mu_cluster_opts_t, priority),
	F(mu_cluster_opts_t, request_timeout_ms), F(mu_cluster_opts_t, weights),
	F(mu_cluster_opts_t, max_replacements), F(mu_cluster_opts_t, coord),
	F(mu_cluster_opts_t, say), F(mu_cluster_opts_t, ud), {0}};

static const mu__layout_field_t llm_stage_opts[] = {
	F(mu_llm_stage_opts_t, struct_size), F(mu_llm_stage_opts_t, tokenizer),
	F(mu_llm_stage_opts_t, index), F(mu_llm_stage_opts_t, of),
	F(mu_llm_stage_opts_t, first), F(mu_llm_stage_opts_t, last),
	F(mu_llm_stage_opts_t, threads), F(mu_llm_stage_opts_t, max_seqs),
	F(mu_llm_stage_opts_t, kv_bytes), F(mu_llm_stage_opts_t, max_chunk),
	F(mu_llm_stage_opts_t, max_seqs_per_conn), F(mu_llm_stage_opts_t, seq_idle_ms),
	F(mu_llm_stage_opts_t, kv_type), {0}};

static const mu__layout_field_t llm_plan_opts[] = {
	F(mu_llm_plan_opts_t, struct_size), F(mu_llm_plan_opts_t, stages),
	F(mu_llm_plan_opts_t, budgets), F(mu_llm_plan_opts_t, nbudgets),
	F(mu_llm_plan_opts_t, ctx), F(mu_llm_plan_opts_t, max_seqs),
	F(mu_llm_plan_opts_t, kv_type), {0}};

static const mu__layout_field_t llm_plan_stage[] = {
	F(mu_llm_plan_stage_t, device), F(mu_llm_plan_stage_t, first),
	F(mu_llm_plan_stage_t, last), F(mu_llm_plan_stage_t, embeds),
	F(mu_llm_plan_stage_t, head), F(mu_llm_plan_stage_t, weight_bytes),
	F(mu_llm_plan_stage_t, kv_bytes), {0}};

static const mu__layout_field_t serve_opts[] = {
	F(mu_serve_opts_t, struct_size), F(mu_serve_opts_t, model),
	F(mu_serve_opts_t, tokenizer), F(mu_serve_opts_t, stages),
	F(mu_serve_opts_t, nstages), F(mu_serve_opts_t, coord),
	F(mu_serve_opts_t, cluster), F(mu_serve_opts_t, max_seqs),
	F(mu_serve_opts_t, replay_bytes), F(mu_serve_opts_t, threads),
	F(mu_serve_opts_t, ctx), F(mu_serve_opts_t, chunk),
	F(mu_serve_opts_t, parallel), F(mu_serve_opts_t, batch),
	F(mu_serve_opts_t, keepalive_ms), F(mu_serve_opts_t, host),
	F(mu_serve_opts_t, port), F(mu_serve_opts_t, model_name),
	F(mu_serve_opts_t, max_conns), F(mu_serve_opts_t, max_body),
	F(mu_serve_opts_t, io_timeout_ms), F(mu_serve_opts_t, api_key),
	F(mu_serve_opts_t, api_key_file), F(mu_serve_opts_t, metrics),
	F(mu_serve_opts_t, max_tokens), F(mu_serve_opts_t, temperature),
	F(mu_serve_opts_t, top_k), F(mu_serve_opts_t, top_p),
	F(mu_serve_opts_t, have_seed), F(mu_serve_opts_t, seed),
	F(mu_serve_opts_t, no_bos), F(mu_serve_opts_t, ignore_eos),
	F(mu_serve_opts_t, chat_template), F(mu_serve_opts_t, max_conns_per_addr),
	F(mu_serve_opts_t, kv_type), {0}};

static const mu__layout_field_t metrics_server_opts[] = {
	F(mu_metrics_server_opts_t, struct_size), F(mu_metrics_server_opts_t, host),
	F(mu_metrics_server_opts_t, port), F(mu_metrics_server_opts_t, serve), {0}};
static const mu__layout_field_t store_request[] = {
	F(mu_store_request_t, struct_size), F(mu_store_request_t, dialect),
	F(mu_store_request_t, op), F(mu_store_request_t, key), F(mu_store_request_t, key_len),
	F(mu_store_request_t, value), F(mu_store_request_t, value_len),
	F(mu_store_request_t, desired), F(mu_store_request_t, desired_len),
	F(mu_store_request_t, delta), F(mu_store_request_t, nonce), {0}};

static const mu__layout_field_t safetensors_desc[] = {
	F(mu_safetensors_desc_t, name), F(mu_safetensors_desc_t, dtype),
	F(mu_safetensors_desc_t, rank), F(mu_safetensors_desc_t, dims), {0}};

static const mu__layout_field_t llm_opts[] = {
	F(mu_llm_opts_t, struct_size), F(mu_llm_opts_t, tokenizer), F(mu_llm_opts_t, threads),
	F(mu_llm_opts_t, max_sequences), F(mu_llm_opts_t, ctx), F(mu_llm_opts_t, chunk),
	F(mu_llm_opts_t, batch), F(mu_llm_opts_t, io_timeout_ms), F(mu_llm_opts_t, keepalive_ms),
	F(mu_llm_opts_t, stages), F(mu_llm_opts_t, nstages), F(mu_llm_opts_t, coord),
	F(mu_llm_opts_t, cluster), F(mu_llm_opts_t, device_sequences),
	F(mu_llm_opts_t, replay_bytes), F(mu_llm_opts_t, kv_type), {0}};

static const mu__layout_field_t llm_info[] = {
	F(mu_llm_info_t, arch), F(mu_llm_info_t, format), F(mu_llm_info_t, layers),
	F(mu_llm_info_t, dim), F(mu_llm_info_t, vocab), F(mu_llm_info_t, trained_ctx),
	F(mu_llm_info_t, ctx), F(mu_llm_info_t, weight_bytes), F(mu_llm_info_t, stages),
	F(mu_llm_info_t, where), {0}};

static const mu__layout_field_t llm_stage_info[] = {
	F(mu_llm_stage_info_t, address), F(mu_llm_stage_info_t, first),
	F(mu_llm_stage_info_t, last), F(mu_llm_stage_info_t, batches),
	F(mu_llm_stage_info_t, rows), F(mu_llm_stage_info_t, busy_ms),
	F(mu_llm_stage_info_t, replaced), {0}};

static const mu__layout_field_t llm_recovery[] = {
	F(mu_llm_recovery_t, recoveries), F(mu_llm_recovery_t, recovery_ms),
	F(mu_llm_recovery_t, replayed), F(mu_llm_recovery_t, kept_bytes), {0}};

static const mu__layout_field_t llm_stats[] = {
	F(mu_llm_stats_t, prompt_tokens), F(mu_llm_stats_t, new_tokens),
	F(mu_llm_stats_t, decode_steps), F(mu_llm_stats_t, stop), F(mu_llm_stats_t, prefill_ms),
	F(mu_llm_stats_t, ttft_ms), F(mu_llm_stats_t, decode_ms), {0}};

static const mu__layout_field_t llm_gen_opts[] = {
	F(mu_llm_gen_opts_t, struct_size), F(mu_llm_gen_opts_t, max_tokens),
	F(mu_llm_gen_opts_t, temperature), F(mu_llm_gen_opts_t, top_k), F(mu_llm_gen_opts_t, top_p),
	F(mu_llm_gen_opts_t, seed), F(mu_llm_gen_opts_t, no_bos), F(mu_llm_gen_opts_t, ignore_eos),
	F(mu_llm_gen_opts_t, prompt_ids), F(mu_llm_gen_opts_t, nprompt_ids),
	F(mu_llm_gen_opts_t, ctx), F(mu_llm_gen_opts_t, on_token), F(mu_llm_gen_opts_t, on_logits),
	F(mu_llm_gen_opts_t, on_done), F(mu_llm_gen_opts_t, ud), {0}};

#define T(type, fields) {#type, sizeof(type), fields}

static const mu__layout_t types[] = {
	T(mu_budget_t, budget),
	T(mu_tracker_opts_t, tracker_opts),
	T(mu_server_opts_t, server_opts),
	T(mu_store_server_opts_t, store_server_opts),
	T(mu_store_client_opts_t, store_client_opts),
	T(mu_store_value_t, store_value),
	T(mu_md_opts_t, md_opts),
	T(mu_md_peer_t, md_peer),
	T(mu_md_event_t, md_event),
	T(mu_etcd_opts_t, etcd_opts),
	T(mu_stage_server_opts_t, stage_server_opts),
	T(mu_device_opts_t, device_opts),
	T(mu_coord_opts_t, coord_opts),
	T(mu_cluster_opts_t, cluster_opts),
	T(mu_secure_opts_t, secure_opts),
	T(mu_llm_stage_opts_t, llm_stage_opts),
	T(mu_llm_plan_opts_t, llm_plan_opts),
	T(mu_llm_plan_stage_t, llm_plan_stage),
	T(mu_serve_opts_t, serve_opts),
	T(mu_metrics_server_opts_t, metrics_server_opts),
	T(mu_store_request_t, store_request),
	T(mu_safetensors_desc_t, safetensors_desc),
	T(mu_llm_opts_t, llm_opts),
	T(mu_llm_info_t, llm_info),
	T(mu_llm_stage_info_t, llm_stage_info),
	T(mu_llm_recovery_t, llm_recovery),
	T(mu_llm_stats_t, llm_stats),
	T(mu_llm_gen_opts_t, llm_gen_opts),
	{NULL, 0, NULL}};

const mu__layout_t *mu__layouts(void)
{
	return types;
}

static const mu__layout_t *find(const char *type)
{
	for (const mu__layout_t *t = types; type != NULL && t->name != NULL; t++)
		if (strcmp(t->name, type) == 0)
			return t;
	return NULL;
}

size_t mu_layout_size(const char *type)
{
	const mu__layout_t *t = find(type);

	return t != NULL ? t->size : 0;
}

int mu_layout_field(const char *type, const char *field, size_t *offset, size_t *size)
{
	const mu__layout_t *t = find(type);

	for (const mu__layout_field_t *f = t ? t->fields : NULL; f && f->name && field; f++)
		if (strcmp(f->name, field) == 0) {
			*offset = f->offset;
			*size = f->size;
			return 0;
		}
	return -ENOENT;
}
