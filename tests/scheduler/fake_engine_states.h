// A fake of scheduler::sequence_states for the scheduler's unit tests (no model): each sequence
// holds a KV length and the position its recurrent state is at, and the rules the real engine
// enforces on them: a whole-state blob restores both, a recurrent-only blob the recurrent
// position only, seq_rm of a partial range is refused on a hybrid when the recurrent state is
// past p0 (docs/prompt-cache.md "Two kinds of model memory") unless it is a rollback of at most
// rollback_depth tokens of the last decode (llama.cpp's n_rs_seq; once between decodes), seq_cp
// copies the whole sequence (per-sequence buffers).
#pragma once

#include "scheduler/sequence_states.h"

#include <cstring>
#include <map>

namespace lineage::scheduler::fakes {

class fake_engine_states : public sequence_states {
public:
    struct seq_state {
        int32_t n_kv = 0;  ///< positions [0, n_kv) held
        int32_t rec = 0;   ///< tokens the recurrent state has seen (hybrid)
        int32_t last_n = 0;  ///< tokens of the last decode (its rollback snapshots)
        bool rolled = false;  ///< rolled back since the last decode
    };

    explicit fake_engine_states(bool hybrid) : hybrid_(hybrid) {}

    /** The engine computing `n` more tokens of `seq`. */
    void decode(int32_t seq, int32_t n) {
        auto & s = seqs_[seq];
        s.n_kv += n;
        s.rec = s.n_kv;
        s.last_n = n;
        s.rolled = false;
        n_decodes++;
    }
    seq_state at(int32_t seq) const {
        auto it = seqs_.find(seq);
        return it == seqs_.end() ? seq_state{} : it->second;
    }

    cache::blob get_state(int32_t seq, bool recurrent_only) const override {
        n_get_state++;
        const seq_state s = at(seq);
        cache::blob b(state_size(seq, recurrent_only), 0);
        b[0] = recurrent_only ? 'R' : 'F';
        std::memcpy(b.data() + 1, &s.n_kv, 4);
        std::memcpy(b.data() + 5, &s.rec, 4);
        return b;
    }
    size_t state_size(int32_t seq, bool recurrent_only) const override {
        return recurrent_only ? 64 : 64 + 8 * static_cast<size_t>(at(seq).n_kv);
    }
    bool set_state(int32_t seq, const cache::blob & b, bool recurrent_only) override {
        n_set_state++;
        if (refuse_set_state || b.size() < 9 || b[0] != (recurrent_only ? 'R' : 'F')) {
            seqs_.erase(seq);
            return false;
        }
        seq_state in;
        std::memcpy(&in.n_kv, b.data() + 1, 4);
        std::memcpy(&in.rec, b.data() + 5, 4);
        auto & s = seqs_[seq];
        if (!recurrent_only) {
            s.n_kv = in.n_kv;
        }
        s.rec = in.rec;
        s.last_n = 0;  // no rollback snapshots of a state put back
        s.rolled = false;
        return true;
    }
    bool seq_rm(int32_t seq, int32_t p0, int32_t p1) override {
        auto & s = seqs_[seq];
        if (p0 < 0 || (p0 == 0 && p1 < 0)) {
            s = seq_state{};
            return true;
        }
        if (hybrid_ && s.rec > p0) {
            const int32_t k = s.rec - p0;
            if (k > rollback_depth || k >= s.last_n || s.rolled || p1 >= 0) {
                return false;  // the recurrent state cannot be cut back
            }
            s.rec = p0;  // the snapshot k tokens back
            s.rolled = true;
        }
        s.n_kv = std::min(s.n_kv, p0);
        return true;
    }
    bool seq_cp(int32_t src, int32_t dst, int32_t) override {
        n_seq_cp++;
        if (refuse_seq_cp) {
            seqs_.erase(dst);
            return false;
        }
        seqs_[dst] = at(src);
        return true;
    }
    int32_t seq_pos_max(int32_t seq) const override { return at(seq).n_kv - 1; }

    bool refuse_set_state = false;
    bool refuse_seq_cp = false;  ///< seq_cp fails (a state copy the engine refuses)
    int32_t rollback_depth = 0;  ///< the engine's n_rs_seq
    int n_decodes = 0;
    int n_set_state = 0;
    mutable int n_get_state = 0;
    int n_seq_cp = 0;

private:
    bool hybrid_;
    std::map<int32_t, seq_state> seqs_;
};

}  // namespace lineage::scheduler::fakes
