/* SPDX-License-Identifier: MIT */
/*
 * The pipeline's internals of before the split into focused headers, in
 * one include, for the command's files that still use it (the CLI moves
 * to the public headers; nothing in the library includes this). New code
 * includes what it uses:
 *
 *   pipeline/msg_int.h      messages and channels
 *   pipeline/stage_int.h    a stage, its kind's table, replies
 *   pipeline/serve_int.h    serving a stage (handler, blocking loop)
 *   pipeline/device_int.h   a device's sessions
 *   pipeline/devices_int.h  devices from the tracker (coordinator side)
 *   pipeline/llm/...        LLM stages, coordinator, engine
 */
#ifndef MU_PIPELINE_PIPELINE_INT_H
#define MU_PIPELINE_PIPELINE_INT_H

#include "pipeline/device_int.h"
#include "pipeline/devices_int.h"
#include "pipeline/msg_int.h"
#include "pipeline/serve_int.h"
#include "pipeline/stage_int.h"

#endif
