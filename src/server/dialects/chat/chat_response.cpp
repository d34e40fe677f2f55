// server::chat_response: OpenAI response objects and the per-request output state.
#include "server/dialects/chat/chat_response.h"

#include <algorithm>

namespace lineage::server {

json usage_json(const scheduler::request_stats & s, int32_t prompt_tokens) {
    const int32_t prompt = s.prompt_tokens > 0 ? s.prompt_tokens : prompt_tokens;
    json details = json::object();
    details["cached_tokens"] = s.cached_tokens;
    json u = json::object();
    u["prompt_tokens"] = prompt;
    u["completion_tokens"] = s.completion_tokens;
    u["total_tokens"] = prompt + s.completion_tokens;
    u["prompt_tokens_details"] = std::move(details);
    return u;
}

json timings_json(const scheduler::request_stats & s, int32_t prompt_tokens) {
    const int32_t prompt = s.prompt_tokens > 0 ? s.prompt_tokens : prompt_tokens;
    json t = json::object();
    t["prompt_n"] = prompt - s.cached_tokens;
    t["cached_n"] = s.cached_tokens;
    t["prompt_ms"] = s.prefill_s * 1e3;
    t["ttft_ms"] = s.ttft_s * 1e3;
    t["predicted_n"] = s.completion_tokens;
    t["predicted_ms"] = s.decode_s * 1e3;
    // decode_s spans first to last sampled token: completion_tokens - 1 intervals.
    t["predicted_per_second"] =
        s.completion_tokens > 1 && s.decode_s > 0 ? (s.completion_tokens - 1) / s.decode_s : 0.0;
    t["prefill_passes"] = s.prefill_passes;
    t["prefill_splits"] = s.prefill_splits;
    t["cache_hit"] = s.hit_kind.empty() ? std::string("miss") : s.hit_kind;
    // Why a turn was slow, without server access (docs/prompt-cache.md "Per response"): where the
    // cached tokens came from, and the cause of a miss or a short hit (null for a full hit).
    t["cache_tier"] = string_or_null(s.restored_from);
    t["cache_miss_reason"] = string_or_null(s.miss_cause);
    return t;
}

json delta_json(const engine::chat_delta & d) {
    json delta = json::object();
    if (!d.reasoning_content.empty()) {
        delta["reasoning_content"] = d.reasoning_content;
    }
    if (!d.content.empty()) {
        delta["content"] = d.content;
    }
    if (d.tool_call_index != std::string::npos) {
        json tc = json::object();
        tc["index"] = d.tool_call_index;
        if (!d.tool_call_id.empty()) {
            tc["id"] = d.tool_call_id;
            tc["type"] = "function";
        }
        if (!d.tool_call_name.empty() || !d.tool_call_arguments.empty()) {
            json fn = json::object();
            if (!d.tool_call_name.empty()) {
                fn["name"] = d.tool_call_name;
            }
            fn["arguments"] = d.tool_call_arguments;
            tc["function"] = std::move(fn);
        }
        delta["tool_calls"] = json::array({std::move(tc)});
    }
    return delta;
}

json message_json(const engine::chat_parsed & m) {
    json msg = json::object();
    msg["role"] = "assistant";
    if (m.content.empty() && !m.tool_calls.empty()) {
        msg["content"] = nullptr;
    } else {
        msg["content"] = m.content;
    }
    if (!m.reasoning_content.empty()) {
        msg["reasoning_content"] = m.reasoning_content;
    }
    if (!m.tool_calls.empty()) {
        json calls = json::array();
        for (const auto & tc : m.tool_calls) {
            json fn = json::object();
            fn["name"] = tc.name;
            fn["arguments"] = tc.arguments;
            json c = json::object();
            c["id"] = tc.id;
            c["type"] = "function";
            c["function"] = std::move(fn);
            calls.push_back(std::move(c));
        }
        msg["tool_calls"] = std::move(calls);
    }
    return msg;
}

json chunk_json(const completion_meta & meta, json delta, const char * finish_reason) {
    json choice = json::object();
    choice["index"] = 0;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason ? json(finish_reason) : json(nullptr);
    json c = json::object();
    c["id"] = meta.id;
    c["object"] = "chat.completion.chunk";
    c["created"] = meta.created;
    c["model"] = meta.model;
    c["choices"] = json::array({std::move(choice)});
    return c;
}

namespace {

json bytes_json(std::string_view s) {
    json b = json::array();
    for (const char c : s) {
        b.push_back(static_cast<int>(static_cast<unsigned char>(c)));
    }
    return b;
}

}  // namespace

json logprob_entry_json(std::string_view piece, const scheduler::generation_event & ev, const token_text_fn & text_of) {
    json e = json::object();
    e["token"] = utf8_sanitize(piece);
    e["logprob"] = ev.logprob.value_or(0.0f);
    e["bytes"] = bytes_json(piece);
    json top = json::array();
    for (const auto & t : ev.top_logprobs) {
        const std::string text = t.tok == ev.tok ? std::string(piece) : (text_of ? text_of(t.tok) : std::string());
        json a = json::object();
        a["token"] = utf8_sanitize(text);
        a["logprob"] = t.logprob;
        a["bytes"] = bytes_json(text);
        top.push_back(std::move(a));
    }
    e["top_logprobs"] = std::move(top);
    return e;
}

chat_output::chat_output(completion_meta meta, engine::chat_parse_params parser, std::vector<std::string> stops,
                         bool include_usage, int32_t prompt_tokens, token_text_fn token_text)
    : meta_(std::move(meta)),
      pump_(std::move(stops), std::move(parser)),
      include_usage_(include_usage),
      prompt_tokens_(prompt_tokens),
      token_text_(std::move(token_text)) {}

bool chat_output::add(std::string_view piece, const scheduler::generation_event * ev) {
    const size_t start = pump_.text().text().size();
    const bool stopped_before = pump_.text().stopped();
    const bool stop = pump_.add(piece);
    if (token_text_ && ev != nullptr && ev->logprob && !stopped_before) {
        lp_entries_.push_back(logprob_entry_json(piece, *ev, token_text_));
        lp_starts_.push_back(start);
        lp_ends_.push_back(start + piece.size());
    }
    if (stop) {
        // Tokens whose text the stop string cut away entirely are not part of the reply.
        const size_t cut = pump_.text().text().size();
        while (lp_entries_.size() > lp_sent_ && lp_starts_.back() >= cut) {
            lp_entries_.pop_back();
            lp_starts_.pop_back();
            lp_ends_.pop_back();
        }
        for (auto & end : lp_ends_) {
            end = std::min(end, cut);
        }
    }
    return stop;
}

json chat_output::chunk(json delta, const char * finish_reason) const {
    json c = chunk_json(meta_, std::move(delta), finish_reason);
    if (include_usage_) {
        c["usage"] = nullptr;
    }
    return c;
}

void chat_output::attach_logprobs(std::vector<json> & out, size_t from, size_t upto, bool force) {
    if (!token_text_) {
        return;
    }
    json content = json::array();
    size_t n = lp_sent_;
    while (n < lp_entries_.size() && lp_ends_[n] <= upto) {
        content.push_back(lp_entries_[n]);
        n++;
    }
    if (content.empty()) {
        return;
    }
    json * target = from < out.size() ? &out[from] : (force && !out.empty() ? &out.back() : nullptr);
    if (target == nullptr || !target->contains("choices") || (*target)["choices"].empty()) {
        return;
    }
    json lp = json::object();
    lp["content"] = std::move(content);
    lp["refusal"] = nullptr;
    (*target)["choices"][0]["logprobs"] = std::move(lp);
    lp_sent_ = n;
}

void chat_output::push_deltas(std::vector<json> & out, const std::vector<engine::chat_delta> & deltas) {
    for (const auto & d : deltas) {
        json dj = delta_json(d);
        if (!dj.empty()) {
            out.push_back(chunk(std::move(dj), nullptr));
        }
    }
}

std::vector<json> chat_output::take_chunks() {
    std::vector<json> out;
    if (!role_sent_) {
        json role = json::object();
        role["role"] = "assistant";
        role["content"] = "";
        out.push_back(chunk(std::move(role), nullptr));
        role_sent_ = true;
    }
    const size_t before = pump_.parsed();
    const size_t first = out.size();
    push_deltas(out, pump_.take());
    if (pump_.parsed() > before) {
        attach_logprobs(out, first, pump_.parsed(), /*force=*/false);
    }
    return out;
}

std::string chat_output::finish_reason(const scheduler::generation_event & done) const {
    std::string r = "stop";
    if (!pump_.text().stopped() && done.finish == scheduler::finish_reason::length) {
        r = "length";
    }
    if (r == "stop" && !pump_.message().tool_calls.empty()) {
        r = "tool_calls";
    }
    return r;
}

std::vector<json> chat_output::final_chunks(const scheduler::generation_event & done) {
    std::vector<json> out;
    if (!role_sent_) {
        out = take_chunks();  // role chunk (and any stable text, parsed as partial)
    }
    const size_t first = out.size();
    push_deltas(out, pump_.finish());
    const std::string reason = finish_reason(done);
    json fin = chunk(json::object(), reason.c_str());
    fin["timings"] = timings_json(done.stats, prompt_tokens_);
    out.push_back(std::move(fin));
    attach_logprobs(out, first, std::string::npos, /*force=*/true);
    if (include_usage_) {
        json u = json::object();
        u["id"] = meta_.id;
        u["object"] = "chat.completion.chunk";
        u["created"] = meta_.created;
        u["model"] = meta_.model;
        u["choices"] = json::array();
        u["usage"] = usage_json(done.stats, prompt_tokens_);
        out.push_back(std::move(u));
    }
    return out;
}

json chat_output::final_response(const scheduler::generation_event & done) {
    (void) pump_.finish();
    json choice = json::object();
    choice["index"] = 0;
    choice["message"] = message_json(pump_.message());
    choice["logprobs"] = nullptr;
    if (token_text_) {
        json lp = json::object();
        lp["content"] = json(lp_entries_);
        lp["refusal"] = nullptr;
        choice["logprobs"] = std::move(lp);
    }
    choice["finish_reason"] = finish_reason(done);
    json r = json::object();
    r["id"] = meta_.id;
    r["object"] = "chat.completion";
    r["created"] = meta_.created;
    r["model"] = meta_.model;
    r["choices"] = json::array({std::move(choice)});
    r["usage"] = usage_json(done.stats, prompt_tokens_);
    r["timings"] = timings_json(done.stats, prompt_tokens_);
    return r;
}

}  // namespace lineage::server
