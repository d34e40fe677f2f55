// server::media_input: data URIs and base64 images (see media_input.h).
#include "server/prepare/media_input.h"

#include <cctype>

namespace lineage::server {

std::optional<std::string> image_from_url(std::string_view url, std::string & why) {
    const auto starts = [&](std::string_view p) {
        if (url.size() < p.size()) {
            return false;
        }
        for (size_t i = 0; i < p.size(); ++i) {
            if (std::tolower(static_cast<unsigned char>(url[i])) != p[i]) {
                return false;
            }
        }
        return true;
    };
    if (starts("http://") || starts("https://")) {
        why = "is an http(s) URL; this server fetches nothing: send the image inline as a data URI "
              "(data:image/png;base64,...)";
        return std::nullopt;
    }
    if (!starts("data:")) {
        why = "must be a data URI (data:image/png;base64,...)";
        return std::nullopt;
    }
    const size_t comma = url.find(',');
    if (comma == std::string_view::npos) {
        why = "is a data URI without a ',' before its data; send data:image/png;base64,...";
        return std::nullopt;
    }
    const std::string_view meta = url.substr(5, comma - 5);
    if (!starts("data:image/")) {
        why = "is a data URI of type '" + std::string(meta.substr(0, meta.find(';'))) +
              "'; send an image (data:image/png;base64,... or data:image/jpeg;base64,...)";
        return std::nullopt;
    }
    if (meta.size() < 7 || meta.substr(meta.size() - 7) != ";base64") {
        why = "is a data URI without ';base64'; send the image base64-encoded (data:image/png;base64,...)";
        return std::nullopt;
    }
    auto bytes = base64_decode(url.substr(comma + 1));
    if (!bytes) {
        why = "has data that is not valid base64";
        return std::nullopt;
    }
    return bytes;
}

}  // namespace lineage::server
