// chunk_state_probe: can a hybrid (Gated DeltaNet / KDA) model's recurrent state at a position
// inside a single prefill pass be captured through the public cb_eval hook, without splitting
// the pass? (issue 54, item 2). Standalone; see README.md in this folder for build and run.
//
// Engine facts this probe is built on (llama.cpp pin 80fb11ac):
//  - llama-context.cpp hard-codes cparams.fused_gdn_ch = fused_gdn_ar = true (auto_fgdn = false),
//    so prefill uses the fused op ggml_gated_delta_net (GGML_OP_GATED_DELTA_NET) on every backend,
//    CPU included; the chunked graph (build_delta_net_chunking, nodes "dnet_add_ch_state-<il>") is
//    never built. `--mode dump` verifies this on a real graph.
//  - the fused op keeps per-token states only inside the kernel; its output holds the attention
//    output followed by K state snapshots (last K tokens), K = 1 unless n_rs_seq > 0.
//  So the intra-pass state is captured here by: (1) the conv state = a slice of the conv input
//  node (the concat of the previous conv state and the new conv inputs), and (2) the ssm state =
//  a replay of ggml_gated_delta_net on the CPU over the pass's own (already computed) q/k/v/g/beta
//  inputs for tokens [pass_start, c), started from the pass's input state (src[5]).
//  Both are read in the cb_eval callback, while the tensors are still alive.

#include "llama.h"
#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpu.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

static double now_ms() {
    using namespace std::chrono;
    return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

// ---------------------------------------------------------------------------------------------
// capture state shared with the callback
// ---------------------------------------------------------------------------------------------

struct layer_cap {
    // per capture position: conv state row (all conv parts concatenated, cache layout) and ssm row
    std::vector<std::vector<float>> conv; // [n_pos][n_embd_r]
    std::vector<std::vector<float>> ssm;  // [n_pos][n_embd_s]
};

struct probe_cb {
    enum mode_t { OFF, ASK_NONE, CAPTURE, DUMP } mode = OFF;

    int n_tokens = 0;            // tokens in the (single-ubatch) pass being observed
    std::vector<int> cs;         // capture positions relative to the pass start, ascending, 1..n_tokens
    int n_threads = 2;
    ggml_threadpool * tp = nullptr;

    // per pass results
    std::vector<layer_cap> layers;              // one per recurrent layer, graph order == layer order
    std::vector<std::vector<float>> pending_conv; // [n_pos] conv parts (concatenated) seen before the next GDN node
    int n_gdn_seen = 0;
    int n_conv_seen = 0;
    double t_conv_ms = 0, t_replay_ms = 0, t_compute_ms = 0;
    int n_replay_calls = 0;
    size_t bytes_conv = 0, bytes_ssm = 0;
    int n_ask = 0, n_want = 0;
    bool error = false;
    std::string err;

    // dump
    int n_dnet_ch_state = 0, n_gdn_nodes = 0;
    bool dump_print = false;

    void reset_pass() {
        layers.clear(); pending_conv.clear();
        n_gdn_seen = n_conv_seen = 0;
        t_conv_ms = t_replay_ms = t_compute_ms = 0; n_replay_calls = 0; bytes_conv = bytes_ssm = 0;
        n_ask = n_want = 0; error = false; err.clear();
        n_dnet_ch_state = n_gdn_nodes = 0;
    }
};

static bool is_conv_input_node(const ggml_tensor * t, int n_tokens) {
    // qwen35/qwen3next: named "conv_input-<il>" (delta-net-base.cpp build_conv_state)
    // kimi-linear: unnamed concat(conv_state_x, transpose(x_proj)) per Q/K/V (kimi-linear.cpp causal_conv1d)
    if (t->op != GGML_OP_CONCAT) return false;
    if (((const int32_t *) (t)->op_params)[0] != 0) return false; // concat dim
    const ggml_tensor * s0 = t->src[0];
    if (!s0 || s0->ne[0] < 1 || s0->ne[0] > 8) return false;
    return t->ne[0] == s0->ne[0] + n_tokens;
}

static const char * src_chain_weight_name(const ggml_tensor * t) {
    // kimi: concat -> src[1] transpose -> reshape -> mul_mat -> src[0] weight
    const ggml_tensor * x = t->src[1];
    for (int i = 0; i < 4 && x; ++i) {
        if (x->op == GGML_OP_MUL_MAT) return x->src[0] ? x->src[0]->name : "?";
        x = x->src[0];
    }
    return "?";
}

// run ggml_gated_delta_net on tokens [t0, t1) of the fused node's own inputs, from state s_in,
// writing the final state into s_out (n_embd_s floats)
static bool replay_gdn(probe_cb * pc, const ggml_tensor * node, int64_t t0, int64_t t1,
                       const float * s_in, float * s_out) {
    const ggml_tensor * src[6];
    for (int i = 0; i < 6; ++i) src[i] = node->src[i];
    const int64_t K = ((const int32_t *) (node)->op_params)[0];
    (void) K;

    static std::vector<uint8_t> ctx_mem(ggml_tensor_overhead() * 16 + ggml_graph_overhead_custom(16, false) + 1024);
    ggml_init_params ip = { ctx_mem.size(), ctx_mem.data(), true };
    ggml_context * ctx = ggml_init(ip);

    ggml_tensor * v[6];
    const int64_t len = t1 - t0;
    for (int i = 0; i < 5; ++i) {
        const ggml_tensor * s = src[i];
        if (!ggml_backend_buffer_is_host(s->buffer) && s->view_src && !ggml_backend_buffer_is_host(s->view_src->buffer)) {
            pc->error = true; pc->err = "non-host GDN input";
            ggml_free(ctx); return false;
        }
        if (s->ne[3] != 1) { pc->error = true; pc->err = "n_seqs > 1 in ubatch not handled"; ggml_free(ctx); return false; }
        ggml_tensor * x = ggml_new_tensor_4d(ctx, s->type, s->ne[0], s->ne[1], len, 1);
        for (int d = 0; d < 4; ++d) x->nb[d] = s->nb[d];
        x->data = (char *) s->data + t0 * s->nb[2];
        v[i] = x;
    }
    const ggml_tensor * st = src[5];
    ggml_tensor * sx = ggml_new_tensor_4d(ctx, GGML_TYPE_F32, st->ne[0], st->ne[1], st->ne[2], 1);
    sx->data = (void *) s_in;
    v[5] = sx;

    ggml_tensor * out = ggml_gated_delta_net(ctx, v[0], v[1], v[2], v[3], v[4], v[5], 1);
    static std::vector<float> out_buf;
    out_buf.resize(ggml_nbytes(out) / sizeof(float));
    out->data = out_buf.data();

    ggml_cgraph * gf = ggml_new_graph_custom(ctx, 16, false);
    ggml_build_forward_expand(gf, out);
    ggml_cplan cp = ggml_graph_plan(gf, pc->n_threads, pc->tp);
    static std::vector<uint8_t> work;
    if (cp.work_size > work.size()) work.resize(cp.work_size);
    cp.work_data = work.data();
    const double tc0 = now_ms();
    const ggml_status st_c = ggml_graph_compute(gf, &cp);
    pc->t_compute_ms += now_ms() - tc0; pc->n_replay_calls++;
    if (st_c != GGML_STATUS_SUCCESS) {
        pc->error = true; pc->err = "replay compute failed"; ggml_free(ctx); return false;
    }
    const int64_t S_v = v[2]->ne[0], H = v[2]->ne[1];
    const int64_t attn = S_v * H * len;
    memcpy(s_out, out_buf.data() + attn, S_v * S_v * H * sizeof(float));
    ggml_free(ctx);
    return true;
}

static bool cb_eval_fn(ggml_tensor * t, bool ask, void * user_data) {
    auto * pc = (probe_cb *) user_data;
    if (ask) {
        pc->n_ask++;
        if (pc->mode == probe_cb::DUMP) {
            if (strncmp(t->name, "dnet_add_ch_state", 17) == 0) pc->n_dnet_ch_state++;
            if (t->op == GGML_OP_GATED_DELTA_NET) pc->n_gdn_nodes++;
            if (pc->dump_print) {
                const bool interesting = t->op == GGML_OP_GATED_DELTA_NET || is_conv_input_node(t, pc->n_tokens) ||
                    strstr(t->name, "dnet") || strstr(t->name, "state") || strstr(t->name, "conv");
                if (interesting) {
                    printf("  node %-28s op=%-18s ne=[%lld,%lld,%lld,%lld]", t->name, ggml_op_desc(t),
                           (long long) t->ne[0], (long long) t->ne[1], (long long) t->ne[2], (long long) t->ne[3]);
                    if (t->op == GGML_OP_GATED_DELTA_NET) printf(" K=%d", ((const int32_t *) (t)->op_params)[0]);
                    if (is_conv_input_node(t, pc->n_tokens)) printf(" conv-input(src1 weight=%s)", src_chain_weight_name(t));
                    printf("\n");
                }
            }
            return false;
        }
        if (pc->mode != probe_cb::CAPTURE) return false;
        const bool want = t->op == GGML_OP_GATED_DELTA_NET || is_conv_input_node(t, pc->n_tokens);
        if (want) pc->n_want++;
        return want;
    }

    if (pc->mode != probe_cb::CAPTURE || pc->error) return true;

    if (t->op == GGML_OP_CONCAT) {
        const double t0 = now_ms();
        // data [W = d_conv-1 + n_tokens, C, 1], contiguous; cache layout is [d_conv-1, C]
        const int64_t W = t->ne[0], C = t->ne[1], dm1 = W - pc->n_tokens;
        if (t->ne[2] != 1 || t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
            pc->error = true; pc->err = "unexpected conv input layout"; return false;
        }
        std::vector<float> host;
        const float * d = nullptr;
        if (ggml_backend_buffer_is_host(t->buffer)) d = (const float *) t->data;
        else { host.resize(ggml_nelements(t)); ggml_backend_tensor_get(t, host.data(), 0, ggml_nbytes(t)); d = host.data(); }
        std::vector<std::vector<float>> parts(pc->cs.size(), std::vector<float>(dm1 * C));
        for (size_t p = 0; p < pc->cs.size(); ++p) {
            const int64_t c = pc->cs[p];
            float * o = parts[p].data();
            // conv state after c tokens of the pass = conv_input[c .. c+dm1-1] (inputs of tokens c-dm1..c-1,
            // reaching back into the previous conv state when c < dm1)
            for (int64_t ch = 0; ch < C; ++ch) memcpy(o + ch * dm1, d + ch * W + c, dm1 * sizeof(float));
            pc->bytes_conv += dm1 * C * sizeof(float);
        }
        if (pc->pending_conv.empty()) pc->pending_conv = std::move(parts);
        else for (size_t p = 0; p < parts.size(); ++p)
            pc->pending_conv[p].insert(pc->pending_conv[p].end(), parts[p].begin(), parts[p].end());
        pc->n_conv_seen++;
        pc->t_conv_ms += now_ms() - t0;
        return true;
    }

    if (t->op == GGML_OP_GATED_DELTA_NET) {
        const double t0 = now_ms();
        const ggml_tensor * st = t->src[5];
        const int64_t n_embd_s = st->ne[0] * st->ne[1] * st->ne[2];
        if (st->ne[3] != 1) { pc->error = true; pc->err = "n_seqs > 1"; return false; }
        layer_cap lc;
        lc.conv = std::move(pc->pending_conv);
        pc->pending_conv.clear();
        lc.ssm.assign(pc->cs.size(), std::vector<float>(n_embd_s));
        const float * s_prev = (const float *) st->data;
        int64_t prev = 0;
        for (size_t p = 0; p < pc->cs.size(); ++p) {
            const int64_t c = pc->cs[p];
            if (c == prev) { memcpy(lc.ssm[p].data(), s_prev, n_embd_s * sizeof(float)); }
            else if (!replay_gdn(pc, t, prev, c, s_prev, lc.ssm[p].data())) return false;
            s_prev = lc.ssm[p].data();
            prev = c;
            pc->bytes_ssm += n_embd_s * sizeof(float);
        }
        pc->layers.push_back(std::move(lc));
        pc->n_gdn_seen++;
        pc->t_replay_ms += now_ms() - t0;
        return true;
    }
    return true;
}

// ---------------------------------------------------------------------------------------------
// recurrent blob (llama_state_seq_get_data_ext(..., LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY)) layout:
//   u32 io_magic (0xaf143cd8); i32 seq_id            (llama-context.cpp state_seq_get_data)
//   then llama_memory_recurrent::state_write (the hybrid memory skips the attention part):
//   u32 cell_count; per cell { i32 pos; u32 n_seq_id (=0 for a single seq) }
//   u32 s_trans (=0); u32 n_layer (all layers)
//   per recurrent layer (il ascending): i32 r_type; u64 r_size_row; r_size_row bytes (conv state)
//   per recurrent layer (il ascending): i32 s_type; u64 s_size_row; s_size_row bytes (ssm state)
// ---------------------------------------------------------------------------------------------

struct blob_map {
    size_t pos_off = 0;
    std::vector<size_t> r_off, r_size, s_off, s_size; // payload offsets / sizes per recurrent layer
    bool ok = false;
};

static blob_map parse_blob(const std::vector<uint8_t> & b, size_t n_rec) {
    blob_map m;
    size_t o = 0;
    auto rd32 = [&](void * x) { memcpy(x, b.data() + o, 4); o += 4; };
    uint32_t magic; int32_t seq; rd32(&magic); rd32(&seq);
    if (magic != 0xaf143cd8u) return m;
    uint32_t cells; rd32(&cells);
    if (cells != 1) return m;
    m.pos_off = o;
    int32_t pos; rd32(&pos);
    uint32_t nsid; rd32(&nsid);
    if (nsid != 0) return m;
    uint32_t s_trans, n_layer; rd32(&s_trans); rd32(&n_layer);
    if (s_trans != 0) return m;
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t j = 0; j < n_rec; ++j) {
            int32_t type; rd32(&type);
            uint64_t sz; memcpy(&sz, b.data() + o, 8); o += 8;
            (pass == 0 ? m.r_off : m.s_off).push_back(o);
            (pass == 0 ? m.r_size : m.s_size).push_back(sz);
            o += sz;
            if (o > b.size()) return m;
        }
    }
    m.ok = (o == b.size());
    return m;
}

static std::vector<uint8_t> get_blob(llama_context * ctx, llama_seq_id s) {
    const size_t n = llama_state_seq_get_size_ext(ctx, s, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    std::vector<uint8_t> b(n);
    const size_t w = llama_state_seq_get_data_ext(ctx, b.data(), n, s, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
    b.resize(w);
    return b;
}

// ---------------------------------------------------------------------------------------------

struct opts {
    std::string model;
    std::string mode = "correct";
    int n = 600;
    int threads = 2;
    int runs = 5;
    int pre = 0;               // tokens decoded before the observed pass (pass_start)
    std::vector<int> cs;       // capture positions relative to pass start
    bool print_nodes = false;
    bool verbose = false;
};

static std::vector<int> parse_list(const char * s) {
    std::vector<int> v;
    while (*s) { v.push_back(atoi(s)); const char * c = strchr(s, ','); if (!c) break; s = c + 1; }
    return v;
}

static llama_context * make_ctx(llama_model * model, int n_ctx, int n_batch, int threads, probe_cb * pc) {
    llama_context_params cp = llama_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = n_batch;
    cp.n_ubatch = n_batch;
    cp.n_seq_max = 1;
    cp.n_threads = threads;
    cp.n_threads_batch = threads;
    cp.no_perf = true;
    if (pc) { cp.cb_eval = cb_eval_fn; cp.cb_eval_user_data = pc; }
    return llama_init_from_model(model, cp);
}

static bool decode(llama_context * ctx, const std::vector<llama_token> & toks, int p0, int p1, bool all_logits) {
    llama_batch b = llama_batch_init(p1 - p0, 0, 1);
    for (int i = p0; i < p1; ++i) {
        const int j = i - p0;
        b.token[j] = toks[i]; b.pos[j] = i; b.n_seq_id[j] = 1; b.seq_id[j][0] = 0;
        b.logits[j] = all_logits || i == p1 - 1;
    }
    b.n_tokens = p1 - p0;
    const int rc = llama_decode(ctx, b);
    llama_batch_free(b);
    if (rc != 0) fprintf(stderr, "llama_decode rc=%d\n", rc);
    return rc == 0;
}

static std::vector<float> logits_all(llama_context * ctx, int n_out, int n_vocab) {
    std::vector<float> v;
    for (int i = 0; i < n_out; ++i) {
        const float * l = llama_get_logits_ith(ctx, i);
        v.insert(v.end(), l, l + n_vocab);
    }
    return v;
}

static double max_abs_diff(const std::vector<float> & a, const std::vector<float> & b) {
    double m = 0;
    for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, (double) std::fabs(a[i] - b[i]));
    return m;
}

static std::vector<llama_token> make_tokens(int n, int n_vocab) {
    std::vector<llama_token> t(n);
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (int i = 0; i < n; ++i) { x ^= x << 13; x ^= x >> 7; x ^= x << 17; t[i] = 16 + (int) (x % (uint64_t) (n_vocab - 32)); }
    return t;
}

// assemble a blob for capture index p from a template (the engine's blob after the pass)
static bool assemble(const std::vector<uint8_t> & tmpl, const blob_map & m, const probe_cb & pc, size_t p,
                     int32_t pos, std::vector<uint8_t> & out) {
    out = tmpl;
    memcpy(out.data() + m.pos_off, &pos, 4);
    for (size_t j = 0; j < pc.layers.size(); ++j) {
        const auto & lc = pc.layers[j];
        if (lc.conv[p].size() * 4 != m.r_size[j] || lc.ssm[p].size() * 4 != m.s_size[j]) {
            fprintf(stderr, "size mismatch layer %zu: conv %zu vs %zu, ssm %zu vs %zu\n", j,
                    lc.conv[p].size() * 4, m.r_size[j], lc.ssm[p].size() * 4, m.s_size[j]);
            return false;
        }
        memcpy(out.data() + m.r_off[j], lc.conv[p].data(), m.r_size[j]);
        memcpy(out.data() + m.s_off[j], lc.ssm[p].data(), m.s_size[j]);
    }
    return true;
}

static void diff_report(const std::vector<uint8_t> & a, const std::vector<uint8_t> & b, const blob_map & m) {
    if (a.size() != b.size()) { printf("    size differs: %zu vs %zu\n", a.size(), b.size()); return; }
    for (size_t j = 0; j < m.r_off.size(); ++j) {
        const float * x = (const float *) (a.data() + m.r_off[j]); const float * y = (const float *) (b.data() + m.r_off[j]);
        size_t nd = 0; double md = 0;
        for (size_t i = 0; i < m.r_size[j] / 4; ++i) if (x[i] != y[i]) { nd++; md = std::max(md, (double) std::fabs(x[i] - y[i])); }
        const float * u = (const float *) (a.data() + m.s_off[j]); const float * w = (const float *) (b.data() + m.s_off[j]);
        size_t nds = 0; double mds = 0;
        for (size_t i = 0; i < m.s_size[j] / 4; ++i) if (u[i] != w[i]) { nds++; mds = std::max(mds, (double) std::fabs(u[i] - w[i])); }
        if (nd || nds) printf("    rec layer #%zu: conv %zu floats differ (max %.3g), ssm %zu differ (max %.3g)\n", j, nd, md, nds, mds);
    }
    if (memcmp(a.data(), b.data(), m.r_off.empty() ? a.size() : m.r_off[0] - 12) != 0) printf("    header differs\n");
}

static int run_correct(llama_model * model, const opts & o) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int N = o.n, P = o.pre;
    const auto toks = make_tokens(N, n_vocab);
    const int n_ctx = std::max(1024, N + 64), n_batch = std::max(1024, N);
    std::vector<int> cs = o.cs;
    if (cs.empty()) cs = { 1, 2, 3, 64, 100, 256, N - P };
    std::sort(cs.begin(), cs.end());

    probe_cb pc; pc.mode = probe_cb::CAPTURE; pc.n_threads = o.threads;
    llama_context * A = make_ctx(model, n_ctx, n_batch, o.threads, &pc);
    pc.mode = probe_cb::OFF;
    if (P > 0 && !decode(A, toks, 0, P, false)) return 1;
    pc.reset_pass(); pc.mode = probe_cb::CAPTURE; pc.n_tokens = N - P; pc.cs = cs;
    const double t0 = now_ms();
    if (!decode(A, toks, P, N, false)) return 1;
    const double t1 = now_ms();
    pc.mode = probe_cb::OFF;
    if (pc.error) { printf("capture error: %s\n", pc.err.c_str()); return 1; }
    printf("pass [%d,%d) one llama_decode: %.1f ms; recurrent layers captured=%zu conv nodes=%d wanted nodes=%d; "
           "conv copy %.2f ms, gdn replay+copy %.2f ms, bytes conv=%zu ssm=%zu\n",
           P, N, t1 - t0, pc.layers.size(), pc.n_conv_seen, pc.n_want, pc.t_conv_ms, pc.t_replay_ms, pc.bytes_conv, pc.bytes_ssm);

    const auto tmpl = get_blob(A, 0);
    const blob_map m = parse_blob(tmpl, pc.layers.size());
    if (!m.ok) { printf("could not parse blob (%zu bytes)\n", tmpl.size()); return 1; }
    printf("blob: %zu bytes; per recurrent layer r_size=%zu s_size=%zu; first payload offsets r=%zu s=%zu\n",
           tmpl.size(), m.r_size[0], m.s_size[0], m.r_off[0], m.s_off[0]);

    int fails = 0;
    std::vector<std::vector<uint8_t>> assembled(cs.size());
    for (size_t p = 0; p < cs.size(); ++p) {
        const int c = cs[p];
        if (!assemble(tmpl, m, pc, p, P + c - 1, assembled[p])) return 1;
        // reference: fresh context, the same pre-pass, then one decode of [P, P+c)
        llama_context * B = make_ctx(model, n_ctx, n_batch, o.threads, nullptr);
        if (P > 0) decode(B, toks, 0, P, false);
        decode(B, toks, P, P + c, false);
        const auto ref = get_blob(B, 0);
        const bool same = ref == assembled[p];
        printf("c=%-4d (abs pos %d) assembled vs split reference: %s (%zu bytes)\n", c, P + c, same ? "BYTE-IDENTICAL" : "DIFFERENT", ref.size());
        if (!same) { fails++; diff_report(assembled[p], ref, m); }

        if (P + c < N) {
            // reference continuation
            decode(B, toks, P + c, N, true);
            const auto lref = logits_all(B, N - P - c, n_vocab);
            // (1) KV of [0,P+c) from a prefix prefill + assembled recurrent state
            llama_context * C = make_ctx(model, n_ctx, n_batch, o.threads, nullptr);
            if (P > 0) decode(C, toks, 0, P, false);
            decode(C, toks, P, P + c, false);
            llama_state_seq_set_data_ext(C, assembled[p].data(), assembled[p].size(), 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            decode(C, toks, P + c, N, true);
            const auto lc = logits_all(C, N - P - c, n_vocab);
            const double d1 = max_abs_diff(lref, lc);
            llama_free(C);
            // (2) the server's case: KV of the whole pass truncated to [0,P+c) + assembled recurrent state
            llama_context * D = make_ctx(model, n_ctx, n_batch, o.threads, nullptr);
            if (P > 0) decode(D, toks, 0, P, false);
            decode(D, toks, P, N, false);
            const size_t rd = llama_state_seq_set_data_ext(D, assembled[p].data(), assembled[p].size(), 0, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY);
            const bool rm = llama_memory_seq_rm(llama_get_memory(D), 0, P + c, -1);
            decode(D, toks, P + c, N, true);
            const auto ld = logits_all(D, N - P - c, n_vocab);
            const double d2 = max_abs_diff(lref, ld);
            llama_free(D);
            printf("       continue [%d,%d) logits (all %d rows) vs reference: max|diff| prefix-KV+restore=%.3g%s, "
                   "truncated-full-pass-KV+restore=%.3g%s (set_data read %zu, seq_rm %s)\n",
                   P + c, N, N - P - c, d1, d1 == 0 ? " (bit-identical)" : "", d2, d2 == 0 ? " (bit-identical)" : "", rd, rm ? "ok" : "REFUSED");
            if (d1 != 0) fails++;
        }
        llama_free(B);
    }
    llama_free(A);
    printf("RESULT %s\n", fails ? "FAIL" : "PASS");
    return fails ? 2 : 0;
}

static int run_dump(llama_model * model, const opts & o) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int N = o.n;
    const auto toks = make_tokens(N, n_vocab);
    probe_cb pc; pc.mode = probe_cb::DUMP; pc.dump_print = o.print_nodes; pc.n_tokens = N;
    llama_context * A = make_ctx(model, std::max(1024, N + 64), std::max(1024, N), o.threads, &pc);
    pc.reset_pass(); pc.n_tokens = N;
    decode(A, toks, 0, N, false);
    printf("prefill of %d tokens: graph nodes seen=%d, nodes named dnet_add_ch_state-*=%d, GGML_OP_GATED_DELTA_NET nodes=%d\n",
           N, pc.n_ask, pc.n_dnet_ch_state, pc.n_gdn_nodes);
    llama_free(A);
    return 0;
}

static double median(std::vector<double> v);

static int run_cap(llama_model * model, const opts & o) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int N = o.n;
    const auto toks = make_tokens(N, n_vocab);
    const int nb = ((N + 255) / 256) * 256;
    probe_cb pc; pc.n_threads = o.threads;
    ggml_threadpool_params tpp = ggml_threadpool_params_default(o.threads);
    pc.tp = ggml_threadpool_new(&tpp);
    llama_context * cbc = make_ctx(model, nb + 64, nb, o.threads, &pc);
    llama_attach_threadpool(cbc, pc.tp, pc.tp);
    for (int r = 0; r < o.runs; ++r) {
        pc.reset_pass(); pc.mode = probe_cb::CAPTURE; pc.n_tokens = N; pc.cs = o.cs;
        llama_memory_clear(llama_get_memory(cbc), true);
        const double t = now_ms(); decode(cbc, toks, 0, N, false);
        printf("run %d: total %.1f ms, layers %zu, replay calls %d, replay total %.1f ms of which ggml_graph_compute %.1f ms, conv %.2f ms\n",
               r, now_ms() - t, pc.layers.size(), pc.n_replay_calls, pc.t_replay_ms, pc.t_compute_ms, pc.t_conv_ms);
    }
    llama_free(cbc);
    ggml_threadpool_free(pc.tp);
    return 0;
}

static double median(std::vector<double> v) { std::sort(v.begin(), v.end()); return v.empty() ? 0 : v[v.size() / 2]; }

static int run_time(llama_model * model, const opts & o) {
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const int N = o.n;
    const auto toks = make_tokens(N, n_vocab);
    const int nb = ((N + 255) / 256) * 256;
    const int step = 64 * std::max(1, N / (9 * 64));
    std::vector<int> c8; for (int i = 1; i <= 8; ++i) c8.push_back(i * step);
    std::vector<int> c1 = { c8[3] };

    probe_cb pc; pc.n_threads = o.threads;
    ggml_threadpool_params tpp = ggml_threadpool_params_default(o.threads);
    pc.tp = ggml_threadpool_new(&tpp);
    llama_context * plain = make_ctx(model, nb + 64, nb, o.threads, nullptr);
    llama_context * cbc   = make_ctx(model, nb + 64, nb, o.threads, &pc);
    // one threadpool for the engine and the replay: no second set of spinning workers on the cores
    llama_attach_threadpool(plain, pc.tp, pc.tp);
    llama_attach_threadpool(cbc, pc.tp, pc.tp);
    auto clear = [](llama_context * c) { llama_memory_clear(llama_get_memory(c), true); };

    std::vector<double> ta, tb, tc, td, te, te_save, cc_conv, cc_rep, cd_conv, cd_rep;
    size_t bytes1 = 0, bytes8 = 0, blob_bytes = 0;
    // warm up each path once
    clear(plain); decode(plain, toks, 0, N, false);
    pc.mode = probe_cb::ASK_NONE; clear(cbc); decode(cbc, toks, 0, N, false);
    printf("N=%d n_ubatch=%d threads=%d capture positions c1={%d} c8={", N, nb, o.threads, c1[0]);
    for (int c : c8) printf("%d,", c);
    printf("}\n");
    for (int r = 0; r < o.runs; ++r) {
        double t;
        clear(plain); t = now_ms(); decode(plain, toks, 0, N, false); ta.push_back(now_ms() - t);

        pc.mode = probe_cb::ASK_NONE; clear(cbc); t = now_ms(); decode(cbc, toks, 0, N, false); tb.push_back(now_ms() - t);

        pc.reset_pass(); pc.mode = probe_cb::CAPTURE; pc.n_tokens = N; pc.cs = c1;
        clear(cbc); t = now_ms(); decode(cbc, toks, 0, N, false); tc.push_back(now_ms() - t);
        cc_conv.push_back(pc.t_conv_ms); cc_rep.push_back(pc.t_replay_ms); bytes1 = pc.bytes_conv + pc.bytes_ssm;
        if (pc.error) { printf("capture error %s\n", pc.err.c_str()); return 1; }

        pc.reset_pass(); pc.mode = probe_cb::CAPTURE; pc.n_tokens = N; pc.cs = c8;
        clear(cbc); t = now_ms(); decode(cbc, toks, 0, N, false); td.push_back(now_ms() - t);
        cd_conv.push_back(pc.t_conv_ms); cd_rep.push_back(pc.t_replay_ms); bytes8 = pc.bytes_conv + pc.bytes_ssm;
        pc.mode = probe_cb::OFF;

        clear(plain); t = now_ms();
        double tsave = 0;
        int prev = 0;
        std::vector<double> piece;
        for (int c : c8) {
            const double tp0 = now_ms();
            decode(plain, toks, prev, c, false); prev = c;
            piece.push_back(now_ms() - tp0);
            const double ts = now_ms();
            auto b = get_blob(plain, 0); blob_bytes = b.size();
            tsave += now_ms() - ts;
        }
        { const double tp0 = now_ms(); decode(plain, toks, prev, N, false); piece.push_back(now_ms() - tp0); }
        te.push_back(now_ms() - t - tsave); te_save.push_back(tsave);
        if (o.verbose) {
            printf("  run %d: a=%.1f b=%.1f c=%.1f d=%.1f e=%.1f pieces:", r, ta.back(), tb.back(), tc.back(), td.back(), te.back());
            for (double x : piece) printf(" %.1f", x);
            printf("\n");
        }
    }
    printf("runs=%d, median ms (min..max):\n", o.runs);
    auto row = [](const char * k, const std::vector<double> & v) {
        printf("  %-58s %9.1f  (%.1f..%.1f)\n", k, median(v), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end()));
    };
    row("(a) single pass, no cb_eval", ta);
    row("(b) single pass, cb_eval asks for no node", tb);
    row("(c) single pass, capture 1 position (total)", tc);
    row("    of which conv slice copy", cc_conv);
    row("    of which GDN replay [0,c) + ssm copy", cc_rep);
    row("(d) single pass, capture 8 positions (total)", td);
    row("    of which conv slice copy", cd_conv);
    row("    of which GDN replay [0,c8) + ssm copies", cd_rep);
    row("(e) 9 llama_decode calls split at the 8 positions", te);
    row("    + llama_state_seq_get_data_ext x8 (not in (e))", te_save);
    printf("  captured bytes: 1 position %zu, 8 positions %zu; engine PARTIAL_ONLY blob %zu bytes\n", bytes1, bytes8, blob_bytes);
    llama_free(plain); llama_free(cbc);
    ggml_threadpool_free(pc.tp);
    return 0;
}

int main(int argc, char ** argv) {
    opts o;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        auto next = [&]() { return i + 1 < argc ? argv[++i] : (char *) ""; };
        if (a == "-m") o.model = next();
        else if (a == "--mode") o.mode = next();
        else if (a == "-n") o.n = atoi(next());
        else if (a == "-t") o.threads = atoi(next());
        else if (a == "--runs") o.runs = atoi(next());
        else if (a == "--pre") o.pre = atoi(next());
        else if (a == "--c") o.cs = parse_list(next());
        else if (a == "--print-nodes") o.print_nodes = true;
        else if (a == "-v") o.verbose = true;
        else { fprintf(stderr, "unknown arg %s\n", a.c_str()); return 1; }
    }
    if (o.model.empty()) {
        fprintf(stderr, "usage: %s -m model.gguf [--mode correct|time|dump] [-n N] [--pre P] [--c c1,c2,..] [-t threads] [--runs R] [--print-nodes]\n", argv[0]);
        return 1;
    }
    llama_log_set([](ggml_log_level lvl, const char * txt, void *) { if (lvl >= GGML_LOG_LEVEL_WARN) fputs(txt, stderr); }, nullptr);
    llama_backend_init();
    llama_model_params mp = llama_model_default_params();
    mp.use_extra_bufts = false; // lineage's --no-repack default
    mp.n_gpu_layers = 0;
    llama_model * model = llama_model_load_from_file(o.model.c_str(), mp);
    if (!model) { fprintf(stderr, "failed to load %s\n", o.model.c_str()); return 1; }
    int rc = 0;
    if (o.mode == "dump") rc = run_dump(model, o);
    else if (o.mode == "correct") rc = run_correct(model, o);
    else if (o.mode == "time") rc = run_time(model, o);
    else if (o.mode == "cap") rc = run_cap(model, o);
    llama_model_free(model);
    return rc;
}
