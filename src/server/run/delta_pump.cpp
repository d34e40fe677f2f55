// server::delta_pump; see delta_pump.h.
#include "server/run/delta_pump.h"

namespace lineage::server {

std::vector<engine::chat_delta> delta_pump::take() {
    const size_t len = text_.stable_length();
    if (len <= parsed_) {
        return {};
    }
    parsed_ = len;
    return parser_.update(utf8_sanitize(std::string_view(text_.text()).substr(0, len)), /*is_partial=*/true);
}

std::vector<engine::chat_delta> delta_pump::finish() {
    parsed_ = text_.text().size();
    return parser_.update(utf8_sanitize(text_.text()), /*is_partial=*/false);
}

}  // namespace lineage::server
