// engine::projector over libmtmd (see multimodal.h).
#include "engine/multimodal.h"

#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

#include <stb/stb_image.h>

#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

namespace lineage::engine {

struct image_chunk {
    mtmd_input_chunk * raw = nullptr;
    ~image_chunk() { mtmd_input_chunk_free(raw); }
};

uint32_t image::nx() const {
    return mtmd_bitmap_get_nx(static_cast<const mtmd_bitmap *>(bitmap_.get()));
}

uint32_t image::ny() const {
    return mtmd_bitmap_get_ny(static_cast<const mtmd_bitmap *>(bitmap_.get()));
}

std::span<const uint8_t> image::pixels() const {
    const auto * b = static_cast<const mtmd_bitmap *>(bitmap_.get());
    return {mtmd_bitmap_get_data(b), mtmd_bitmap_get_n_bytes(b)};
}

projector::projector(const model & m, const std::string & path, int32_t n_threads, int64_t max_pixels)
    : path_(path), max_pixels_(max_pixels) {
    mtmd_context_params p = mtmd_context_params_default();
    p.use_gpu = true;
    p.print_timings = false;
    p.n_threads = n_threads > 0 ? n_threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    p.warmup = false;
    ctx_ = mtmd_init_from_file(path.c_str(), m.raw(), p);
    if (ctx_ == nullptr) {
        throw std::runtime_error("cannot load the multimodal projector " + path +
                                 " (libmtmd refused it: not a projector GGUF, or made for another model; see the "
                                 "log above)");
    }
    if (!mtmd_support_vision(ctx_)) {
        mtmd_free(ctx_);
        throw std::runtime_error("the projector " + path + " has no vision encoder; this server serves images only");
    }
    if (mtmd_decode_use_mrope(ctx_)) {
        mtmd_free(ctx_);
        throw std::runtime_error("the model positions images with M-RoPE, which this server does not serve yet");
    }
}

projector::~projector() {
    mtmd_free(ctx_);
}

const char * projector::marker() {
    return mtmd_default_marker();
}

image projector::decode_image(std::string_view file_bytes) const {
    // The size from the header first (stb_image, which libmtmd decodes with and exports): a
    // small file can hold a huge image, and decoding it would allocate width x height x 3 bytes.
    int w_px = 0;
    int h_px = 0;
    int comp = 0;
    if (file_bytes.size() <= static_cast<size_t>(std::numeric_limits<int>::max()) &&
        stbi_info_from_memory(reinterpret_cast<const unsigned char *>(file_bytes.data()),
                              static_cast<int>(file_bytes.size()), &w_px, &h_px, &comp) != 0 &&
        static_cast<int64_t>(w_px) * h_px > max_pixels_) {
        throw std::invalid_argument("the image is " + std::to_string(w_px) + "x" + std::to_string(h_px) +
                                    " pixels, more than this server takes (" + std::to_string(max_pixels_) +
                                    " pixels, --image-max-pixels); send a smaller image");
    }
    const mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(
        ctx_, reinterpret_cast<const unsigned char *>(file_bytes.data()), file_bytes.size(), /*placeholder=*/false,
        mtmd_helper_init_opt_default());
    if (w.bitmap == nullptr || mtmd_bitmap_is_audio(w.bitmap) || w.video_ctx != nullptr) {
        if (w.bitmap != nullptr) {
            mtmd_bitmap_free(w.bitmap);
        }
        throw std::invalid_argument("the bytes are not an image this server can read (PNG, JPEG, BMP or GIF)");
    }
    image out;
    out.bitmap_ = std::shared_ptr<void>(w.bitmap, [](void * b) { mtmd_bitmap_free(static_cast<mtmd_bitmap *>(b)); });
    return out;
}

multimodal_prompt projector::tokenize(const std::string & prompt, const std::vector<image> & images) const {
    std::vector<const mtmd_bitmap *> bitmaps;
    for (const auto & im : images) {
        bitmaps.push_back(static_cast<const mtmd_bitmap *>(im.bitmap_.get()));
    }
    std::unique_ptr<mtmd_input_chunks, decltype(&mtmd_input_chunks_free)> chunks(mtmd_input_chunks_init(),
                                                                                  mtmd_input_chunks_free);
    const mtmd_input_text text{prompt.c_str(), prompt.size(), /*add_special=*/false, /*parse_special=*/true};
    const int32_t rc = mtmd_tokenize(ctx_, chunks.get(), &text, bitmaps.data(), bitmaps.size());
    if (rc == 1) {
        throw std::invalid_argument("the prompt has a different number of image markers than images (a message's "
                                    "text contains \"" + std::string(marker()) + "\"?)");
    }
    if (rc != 0) {
        throw std::invalid_argument("an image could not be preprocessed for the projector");
    }
    multimodal_prompt out;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks.get()); ++i) {
        const mtmd_input_chunk * c = mtmd_input_chunks_get(chunks.get(), i);
        multimodal_prompt::piece piece;
        if (mtmd_input_chunk_get_type(c) == MTMD_INPUT_CHUNK_TYPE_TEXT) {
            size_t n = 0;
            const llama_token * toks = mtmd_input_chunk_get_tokens_text(c, &n);
            piece.text.assign(toks, toks + n);
            piece.n_tokens = static_cast<int32_t>(n);
        } else {
            auto chunk = std::make_shared<image_chunk>();
            chunk->raw = mtmd_input_chunk_copy(c);
            piece.n_tokens = static_cast<int32_t>(mtmd_input_chunk_get_n_tokens(c));
            piece.chunk = std::move(chunk);
        }
        out.pieces.push_back(std::move(piece));
    }
    return out;
}

int32_t projector::eval(context & ctx, const image_chunk & chunk, int32_t pos, int32_t seq) {
    llama_pos new_n_past = pos;
    return mtmd_helper_eval_chunk_single(ctx_, ctx.raw(), chunk.raw, pos, seq, ctx.n_batch(), /*logits_last=*/false,
                                         &new_n_past);
}

}  // namespace lineage::engine
