// server::response_store: the stored responses of the Responses API (docs/prompt-cache.md
// "Stored responses"): `store: true` keeps a response (its body for GET /v1/responses/{id} and the
// conversation it ended, for `previous_response_id`), so a client continues a conversation by id
// and the server re-renders exactly the tokens the prompt cache holds.
// Storage: one SQLite file (WAL) that survives a restart, by default <--cache-dir>/responses.sqlite;
// ":memory:" (no disk tier, or a file that cannot be opened) keeps them in memory only.
// Rules: a response expires ttl_s seconds after it was stored (an expired one reads as missing and
// is deleted); the stored bytes (id + body + conversation) stay <= capacity_bytes: before a put,
// least recently used responses are deleted first (use = put, get; ties impossible: a
// monotonic counter orders uses); a response larger than the cap is not stored. A file that
// SQLite cannot read is moved to <path>.damaged and a new one started (WARN). Each response
// belongs to the tenant that stored it: another tenant's get/remove finds nothing.
// Also holds the server's reasoning key (reasoning_seal), persisted with the responses.
// Thread safety: every member locks mu_; callable from any HTTP thread. Ownership: owns the db.
#pragma once

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>

struct sqlite3;

namespace lineage::server {

struct stored_response {
    std::string id;            ///< "resp_..."
    std::string body;          ///< the response object, JSON text
    std::string conversation;  ///< the conversation items to continue from, JSON text (input_image
                               ///< parts as their data URIs: a continuation re-renders the images)
    double created_s = 0;      ///< unix seconds
    /** The tenant that stored it (server_context::tenant_of; "" without API keys): only the
     *  same tenant reads, continues or deletes it. */
    std::string tenant;
};

struct response_store_config {
    std::string path = ":memory:";       ///< SQLite file; ":memory:" = not persisted
    double ttl_s = 30 * 24 * 3600.0;     ///< seconds a response is kept after it was stored
    uint64_t capacity_bytes = 1ull << 30;  ///< byte cap of id + body + conversation over all
};

class response_store {
public:
    using clock = std::function<double()>;  ///< unix seconds

    /** Opens (creating) the store. A path whose directory cannot be created or whose file
     *  cannot be opened falls back to ":memory:" (WARN); a damaged file is moved aside (WARN). */
    explicit response_store(response_store_config cfg, clock now = nullptr);
    ~response_store();
    response_store(const response_store &) = delete;
    response_store & operator=(const response_store &) = delete;

    /** Stores `r` (replacing one with the same id), evicting least recently used responses
     *  until it fits. Returns false (nothing stored, nothing evicted) when `r` alone is larger
     *  than the cap or the write fails (WARN). */
    bool put(const stored_response & r);

    /** The response with `id` stored by `tenant`; nullopt when missing, expired (an expired one
     *  is deleted) or stored by another tenant (indistinguishable from missing). A hit counts
     *  as a use for the LRU order. */
    std::optional<stored_response> get(const std::string & id, const std::string & tenant);

    /** Deletes `id` when `tenant` stored it; false when it was not stored (or expired, or is
     *  another tenant's, which is left alone). */
    bool remove(const std::string & id, const std::string & tenant);

    size_t count() const;
    uint64_t bytes() const;
    /** The SQLite path in use (":memory:" when not persisted). */
    const std::string & path() const { return path_; }
    bool persistent() const { return path_ != ":memory:"; }
    /** The 32-byte reasoning key, created once per store (kept in the file). */
    const std::string & reasoning_key() const { return key_; }

private:
    void open(const std::string & path);
    void exec(const char * sql);
    void purge_expired();  // REQUIRES: mu_ held
    static uint64_t size_of(const stored_response & r);

    response_store_config cfg_;
    clock now_;
    std::string path_;
    std::string key_;
    mutable std::mutex mu_;
    sqlite3 * db_ = nullptr;  // GUARDED_BY(mu_)
    int64_t next_use_ = 1;    // GUARDED_BY(mu_)
};

}  // namespace lineage::server
