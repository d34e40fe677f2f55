// server::lora_registry: adapter digests, the request's selection and POST /lora-adapters.
#include "server/prepare/lora_registry.h"

#include "server/http/json_fields.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <stdexcept>

namespace lineage::server {

std::string lora_id_of(const std::vector<std::string> & digests, const std::vector<float> & scales,
                       cache::hash_algo algo) {
    cache::hasher h(algo);
    h.field("lineage:lora:v1");
    bool any = false;
    for (size_t i = 0; i < scales.size() && i < digests.size(); ++i) {
        if (scales[i] == 0.0f) {
            continue;
        }
        uint32_t bits = 0;
        std::memcpy(&bits, &scales[i], sizeof(bits));
        h.field(digests[i]);
        h.u64(bits);
        any = true;
    }
    return any ? h.hex() : std::string();
}

std::optional<std::string> file_digest(const std::string & path, cache::hash_algo algo) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
        return std::nullopt;
    }
    cache::hasher h(algo);
    h.field("lineage:lora-file:v1");
    std::vector<char> buf(1 << 20);
    while (in) {
        in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        h.raw(std::string_view(buf.data(), static_cast<size_t>(in.gcount())));
    }
    if (in.bad()) {
        return std::nullopt;
    }
    return h.bytes();
}

namespace {

std::optional<float> to_scale(const std::string & s) {
    if (s.empty()) {
        return std::nullopt;
    }
    try {
        size_t used = 0;
        const float v = std::stof(s, &used);
        if (used != s.size() || !std::isfinite(v)) {
            return std::nullopt;
        }
        return v;
    } catch (const std::exception &) {
        return std::nullopt;
    }
}

}  // namespace

util::status parse_lora_specs(const std::string & value, bool with_scale, std::vector<lora_spec> & out) {
    std::vector<std::string> items;
    size_t start = 0;
    while (start <= value.size()) {
        const size_t comma = value.find(',', start);
        const std::string item = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (!item.empty()) {
            items.push_back(item);
        }
        if (comma == std::string::npos) {
            break;
        }
        start = comma + 1;
    }
    for (size_t i = 0; i < items.size(); ++i) {
        if (!with_scale) {
            out.push_back({items[i], 1.0f});
            continue;
        }
        const size_t colon = items[i].rfind(':');
        if (colon != std::string::npos && colon > 0) {
            if (auto s = to_scale(items[i].substr(colon + 1))) {
                out.push_back({items[i].substr(0, colon), *s});
                continue;
            }
        }
        if (i + 1 < items.size()) {
            if (auto s = to_scale(items[i + 1])) {
                out.push_back({items[i], *s});
                ++i;
                continue;
            }
        }
        return util::status::error("expected FILE:SCALE (or FILE SCALE) with SCALE a number, e.g. adapter.gguf:0.5");
    }
    return util::status::ok();
}

std::vector<lora_scale> parse_lora_list(const json & v, const std::string & param) {
    if (!v.is_array()) {
        fields::fail(param, "'" + param + "' must be an array of {\"id\": N, \"scale\": S}, got " + fields::type_name(v));
    }
    std::vector<lora_scale> out;
    for (size_t i = 0; i < v.size(); ++i) {
        const std::string p = param + "[" + std::to_string(i) + "]";
        const json & item = fields::get_object(v[i], p);
        lora_scale s;
        s.id = fields::get_int(fields::require(item, "id", p + ".id", "the adapter's id from GET /lora-adapters"),
                               p + ".id");
        if (s.id < 0) {
            fields::fail(p + ".id", "'" + p + ".id' must be >= 0 (an id from GET /lora-adapters)");
        }
        if (const json * sc = fields::field(item, "scale")) {
            s.scale = static_cast<float>(fields::number_in(*sc, p + ".scale", -1e6, 1e6));
        }
        out.push_back(s);
    }
    return out;
}

lora_registry::lora_registry(std::vector<lora_spec> specs, cache::hash_algo algo) : algo_(algo), n_(specs.size()) {
    util::lock_guard lk(mu_);
    for (size_t i = 0; i < specs.size(); ++i) {
        auto d = file_digest(specs[i].path, algo);
        if (!d) {
            throw std::runtime_error("cannot read the LoRA adapter " + specs[i].path);
        }
        entries_.push_back({static_cast<int64_t>(i), specs[i].path, specs[i].scale, cache::to_hex(*d)});
        raw_digests_.push_back(*d);
    }
}

std::vector<lora_entry> lora_registry::list() const {
    util::lock_guard lk(mu_);
    return entries_;
}

std::optional<api_error> lora_registry::check_ids(const std::vector<lora_scale> & s, const std::string & param) const {
    for (size_t i = 0; i < s.size(); ++i) {
        if (s[i].id < 0 || static_cast<size_t>(s[i].id) >= n_) {
            return invalid_request("'" + param + "[" + std::to_string(i) + "].id' is " + std::to_string(s[i].id) +
                                       ": this server has " + std::to_string(n_) +
                                       " LoRA adapter(s) (start it with --lora FILE; GET /lora-adapters lists their ids)",
                                   param);
        }
    }
    return std::nullopt;
}

std::optional<api_error> lora_registry::select(const std::vector<lora_scale> & requested, lora_selection & out,
                                               const std::string & param) const {
    if (auto err = check_ids(requested, param)) {
        return err;
    }
    util::lock_guard lk(mu_);
    std::vector<float> scales(n_, 0.0f);
    if (requested.empty()) {
        for (size_t i = 0; i < n_; ++i) {
            scales[i] = entries_[i].scale;
        }
    } else {
        for (const auto & r : requested) {
            scales[static_cast<size_t>(r.id)] = r.scale;
        }
    }
    out.lora_id = lora_id_of(raw_digests_, scales, algo_);
    out.scales = out.lora_id.empty() ? std::vector<float>() : std::move(scales);
    out.epoch = epoch_;
    return std::nullopt;
}

std::optional<api_error> lora_registry::apply(const std::vector<lora_scale> & scales, const reload_fn & reload,
                                              std::vector<int64_t> & reloaded) {
    if (auto err = check_ids(scales, "body")) {
        return err;
    }
    std::lock_guard serial(apply_mu_);
    std::vector<std::string> paths;
    {
        util::lock_guard lk(mu_);
        for (auto & e : entries_) {
            e.scale = 0.0f;
            paths.push_back(e.path);
        }
        for (const auto & s : scales) {
            entries_[static_cast<size_t>(s.id)].scale = s.scale;
        }
    }
    for (size_t i = 0; i < n_; ++i) {
        const auto d = file_digest(paths[i], algo_);
        if (!d) {
            return server_error("cannot read the LoRA adapter " + paths[i] + " (id " + std::to_string(i) +
                                "); it stays loaded as it was");
        }
        std::string old_digest;
        uint64_t old_epoch = 0;
        uint64_t epoch = 0;
        {
            util::lock_guard lk(mu_);
            if (*d == raw_digests_[i]) {
                continue;
            }
            // New requests are keyed with the new content from now on; those admitted before
            // the engine has it see an older generation there and bypass the cache.
            old_digest = raw_digests_[i];
            old_epoch = epoch_;
            epoch = next_epoch_++;
            raw_digests_[i] = *d;
            entries_[i].digest = cache::to_hex(*d);
            epoch_ = epoch;
        }
        if (const util::status err = reload(i, epoch); !err.is_ok()) {
            util::lock_guard lk(mu_);
            raw_digests_[i] = old_digest;
            entries_[i].digest = cache::to_hex(old_digest);
            epoch_ = old_epoch;
            return server_error("the LoRA adapter " + paths[i] + " (id " + std::to_string(i) +
                                ") changed on disk and the engine refused the new content: " + err.message() +
                                "; the old content stays loaded");
        }
        reloaded.push_back(static_cast<int64_t>(i));
    }
    return std::nullopt;
}

}  // namespace lineage::server
