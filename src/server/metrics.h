#pragma once
// The body of GET /metrics: Prometheus text exposition format 0.0.4, names prefixed freetoken_.
#include <string>

#include "engine/service.h"
#include "server/context.h"

namespace ft::server {

/** The exposition of the server's figures `s` (EngineService::stats(): requests, tokens, latency, the
 *  scheduler's KV pool; plus ServerContext::requests_rejected), unlabelled, then each engine's own:
 *  its MoE counters (freetoken_moe_*, from ServedModel::moe_report; absent for fused and dense models)
 *  and its memory plan (freetoken_memory_*, from ServedModel::memory_rows; absent without rows). With a
 *  rank group (ServedModel::ranks non-empty) every rank's samples are there, labelled rank="R" (its
 *  other labels after it), taken from ServedModel::ranks; with one engine they carry no rank label.
 *  Every family has one HELP and one TYPE line, followed by all of its samples. Takes ctx.memory_mu
 *  while it copies the memory plans. */
std::string metrics_text(const ServerContext& ctx, const EngineStats& s);

}  // namespace ft::server
