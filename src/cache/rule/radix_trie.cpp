// cache::radix_trie: compressed trie over tokens; see radix_trie.h for the contract.
#include "cache/rule/radix_trie.h"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace lineage::cache {

struct radix_trie::node {
    tokens label;                                  // tokens of the edge from the parent
    std::map<token, std::unique_ptr<node>> children;  // by the first token of their label
    std::vector<uint64_t> ids;                     // ids stored exactly here
};

radix_trie::radix_trie() : root_(std::make_unique<node>()) {}
radix_trie::~radix_trie() = default;
radix_trie::radix_trie(radix_trie &&) noexcept = default;
radix_trie & radix_trie::operator=(radix_trie &&) noexcept = default;

namespace {

int32_t length_of(const tokens & t, int32_t n) {
    return n < 0 ? static_cast<int32_t>(t.size()) : std::min(n, static_cast<int32_t>(t.size()));
}

}  // namespace

void radix_trie::insert(const tokens & t, uint64_t id, int32_t n) {
    const int32_t len = length_of(t, n);
    node * cur = root_.get();
    int32_t d = 0;
    while (d < len) {
        auto it = cur->children.find(t[static_cast<size_t>(d)]);
        if (it == cur->children.end()) {
            auto leaf = std::make_unique<node>();
            leaf->label.assign(t.begin() + d, t.begin() + len);
            leaf->ids.push_back(id);
            cur->children.emplace(t[static_cast<size_t>(d)], std::move(leaf));
            size_++;
            return;
        }
        node * child = it->second.get();
        const auto & lab = child->label;
        int32_t m = 0;
        const int32_t lab_n = static_cast<int32_t>(lab.size());
        while (m < lab_n && d + m < len && lab[static_cast<size_t>(m)] == t[static_cast<size_t>(d + m)]) {
            ++m;
        }
        if (m < lab_n) {
            // Split the edge at m: a middle node takes the first m tokens.
            auto mid = std::make_unique<node>();
            mid->label.assign(lab.begin(), lab.begin() + m);
            std::unique_ptr<node> old = std::move(it->second);
            old->label.erase(old->label.begin(), old->label.begin() + m);
            const token first = old->label.front();
            mid->children.emplace(first, std::move(old));
            it->second = std::move(mid);
            child = it->second.get();
        }
        cur = child;
        d += m;
    }
    cur->ids.push_back(id);
    size_++;
}

bool radix_trie::erase(const tokens & t, uint64_t id) {
    const int32_t len = static_cast<int32_t>(t.size());
    // The path from the root, as (parent, key of the child in parent) pairs.
    std::vector<std::pair<node *, token>> path;
    node * cur = root_.get();
    int32_t d = 0;
    while (d < len) {
        auto it = cur->children.find(t[static_cast<size_t>(d)]);
        if (it == cur->children.end()) {
            return false;
        }
        const auto & lab = it->second->label;
        if (d + static_cast<int32_t>(lab.size()) > len ||
            !std::equal(lab.begin(), lab.end(), t.begin() + d)) {
            return false;
        }
        path.emplace_back(cur, it->first);
        cur = it->second.get();
        d += static_cast<int32_t>(lab.size());
    }
    auto pos = std::find(cur->ids.begin(), cur->ids.end(), id);
    if (pos == cur->ids.end()) {
        return false;
    }
    cur->ids.erase(pos);
    size_--;
    // Restore invariant 2 bottom-up: drop empty leaves, merge single-child nodes into the child.
    while (!path.empty()) {
        auto [parent, key] = path.back();
        path.pop_back();
        node * n = parent->children.at(key).get();
        if (!n->ids.empty()) {
            break;
        }
        if (n->children.empty()) {
            parent->children.erase(key);
            continue;  // the parent may now be an empty chain node
        }
        if (n->children.size() == 1) {
            std::unique_ptr<node> only = std::move(n->children.begin()->second);
            only->label.insert(only->label.begin(), n->label.begin(), n->label.end());
            parent->children.at(key) = std::move(only);
        }
        break;
    }
    return true;
}

std::vector<uint64_t> radix_trie::exact(const tokens & t, int32_t n) const {
    const int32_t len = length_of(t, n);
    const node * cur = root_.get();
    int32_t d = 0;
    while (d < len) {
        auto it = cur->children.find(t[static_cast<size_t>(d)]);
        if (it == cur->children.end()) {
            return {};
        }
        const auto & lab = it->second->label;
        if (d + static_cast<int32_t>(lab.size()) > len || !std::equal(lab.begin(), lab.end(), t.begin() + d)) {
            return {};
        }
        cur = it->second.get();
        d += static_cast<int32_t>(lab.size());
    }
    return cur->ids;
}

namespace {

// Visits every id under `n` with the same common prefix; false when the visitor stopped.
template <typename Node, typename Visit>
bool visit_subtree(const Node & n, int32_t lcp, const Visit & visit) {
    for (uint64_t id : n.ids) {
        if (!visit(id, lcp)) {
            return false;
        }
    }
    for (const auto & [k, c] : n.children) {
        if (!visit_subtree(*c, lcp, visit)) {
            return false;
        }
    }
    return true;
}

}  // namespace

void radix_trie::match(const tokens & q, const visitor & visit) const {
    const int32_t len = static_cast<int32_t>(q.size());
    // Walk down while whole edges match; `path` holds the fully matched nodes and their depth.
    std::vector<std::pair<const node *, int32_t>> path{{root_.get(), 0}};
    const node * partial = nullptr;  // child whose edge the query leaves inside
    int32_t partial_lcp = 0;
    while (true) {
        const auto [cur, d] = path.back();
        if (d >= len) {
            break;
        }
        auto it = cur->children.find(q[static_cast<size_t>(d)]);
        if (it == cur->children.end()) {
            break;
        }
        const auto & lab = it->second->label;
        int32_t m = 0;
        const int32_t lab_n = static_cast<int32_t>(lab.size());
        while (m < lab_n && d + m < len && lab[static_cast<size_t>(m)] == q[static_cast<size_t>(d + m)]) {
            ++m;
        }
        if (m < lab_n) {
            partial = it->second.get();
            partial_lcp = d + m;
            break;
        }
        path.emplace_back(it->second.get(), d + m);
    }
    // Deepest first: the subtree the query ends in (or leaves inside an edge of) ...
    const node * below = nullptr;  // child of the current path node already visited
    if (partial != nullptr) {
        if (!visit_subtree(*partial, partial_lcp, visit)) {
            return;
        }
        below = partial;
    } else {
        const auto [deep, d] = path.back();
        if (!visit_subtree(*deep, d, visit)) {
            return;
        }
        below = deep;
        path.pop_back();
    }
    // ... then each ancestor on the path: its own ids and its other children share its depth.
    while (!path.empty()) {
        const auto [n, d] = path.back();
        path.pop_back();
        for (uint64_t id : n->ids) {
            if (!visit(id, d)) {
                return;
            }
        }
        for (const auto & [k, c] : n->children) {
            if (c.get() != below && !visit_subtree(*c, d, visit)) {
                return;
            }
        }
        below = n;
    }
}

int32_t radix_trie::longest_match(const tokens & q) const {
    int32_t best = 0;
    match(q, [&best](uint64_t, int32_t lcp) {
        best = lcp;
        return false;
    });
    return best;
}

void radix_trie::check_invariants() const {
    auto fail = [](const std::string & what) { throw std::logic_error("radix_trie invariant broken: " + what); };
    size_t n_ids = 0;
    std::function<void(const node &, bool)> walk = [&](const node & n, bool is_root) {
        if (!is_root && n.label.empty()) {
            fail("1: empty edge label");
        }
        if (!is_root && n.ids.empty() && n.children.size() < 2) {
            fail("2: a node without ids has " + std::to_string(n.children.size()) + " children");
        }
        n_ids += n.ids.size();
        for (const auto & [k, c] : n.children) {
            if (c->label.empty() || c->label.front() != k) {
                fail("1: child filed under the wrong token");
            }
            walk(*c, false);
        }
    };
    walk(*root_, true);
    if (n_ids != size_) {
        fail("3: " + std::to_string(n_ids) + " ids stored, size() says " + std::to_string(size_));
    }
}

}  // namespace lineage::cache
