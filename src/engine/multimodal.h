// engine::projector: a multimodal projector (--mmproj, llama.cpp's libmtmd) for the loaded
// model: decodes image files, tokenizes a rendered prompt whose images are marked, and decodes
// one image's embeddings into a sequence. Why: images reach the model only through libmtmd,
// and only src/engine includes its headers.
// Thread safety: decode_image() and tokenize() may run on any thread at once (libmtmd documents
// them as thread-safe over a shared context); eval() on the engine thread only.
// Ownership: owns the mtmd context; the model must outlive it. An image_chunk is shared by the
// request that carries it and freed with the last owner.
#pragma once

#include "engine/context.h"
#include "engine/model.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

struct mtmd_context;

namespace lineage::engine {

/** One image's tokens in a prompt, ready to be encoded and decoded (opaque: libmtmd's chunk). */
struct image_chunk;

/** An image file decoded to pixels (RGB, row-major, nx * ny * 3 bytes). */
class image {
public:
    uint32_t nx() const;
    uint32_t ny() const;
    std::span<const uint8_t> pixels() const;

private:
    friend class projector;
    std::shared_ptr<void> bitmap_;  // mtmd_bitmap
};

/** A rendered prompt split at its images: text tokens, and for each image its chunk and the
 *  number of positions it fills. */
struct multimodal_prompt {
    struct piece {
        std::vector<token> text;                    ///< a text piece (empty for an image)
        std::shared_ptr<const image_chunk> chunk;   ///< an image piece (null for text)
        int32_t n_tokens = 0;                       ///< positions the piece fills
    };
    std::vector<piece> pieces;
};

class projector {
public:
    /** Loads the projector GGUF at `path` for `m`. Throws std::runtime_error naming the file
     *  when libmtmd refuses it (unreadable, not a projector, embeddings of another width than
     *  the model's), when it has no vision encoder, or when the model positions images with
     *  M-RoPE (one image position per token is what the cache assumes). */
    /** `max_pixels`: the largest image decode_image() takes (width x height), so one request
     *  cannot make the server hold gigabytes of pixels (--image-max-pixels). */
    projector(const model & m, const std::string & path, int32_t n_threads, int64_t max_pixels = default_max_pixels);

    /** 32 Mi pixels (8192 x 4096; ~96 MiB of RGB while decoding): above any camera photo sent
     *  as is, below what a 2 GiB server can hold per request. */
    static constexpr int64_t default_max_pixels = 32ll << 20;
    ~projector();
    projector(const projector &) = delete;
    projector & operator=(const projector &) = delete;

    /** The text that marks an image in a rendered prompt ("<__media__>"). */
    static const char * marker();

    /** Decodes an image file (PNG, JPEG, BMP, GIF: what stb_image reads). Throws
     *  std::invalid_argument when the bytes are no image it can read, or when the image has more
     *  than max_pixels pixels (read from its header before anything is decoded). */
    image decode_image(std::string_view file_bytes) const;

    /** Splits `prompt` (special tokens parsed, no BOS added) at its markers, one image per
     *  marker in order. Throws std::invalid_argument when the markers and images do not pair
     *  up or an image cannot be preprocessed. */
    multimodal_prompt tokenize(const std::string & prompt, const std::vector<image> & images) const;

    /** Encodes `chunk` and decodes its embeddings into sequence `seq` at positions
     *  [pos, pos + n_tokens), in batches of ctx.n_batch(), with the context's LoRA set. Returns
     *  llama_decode's status: 0 ok, 1 no KV space, other values errors (the encoder's included). */
    int32_t eval(context & ctx, const image_chunk & chunk, int32_t pos, int32_t seq);

    const std::string & path() const { return path_; }

private:
    mtmd_context * ctx_ = nullptr;
    std::string path_;
    int64_t max_pixels_ = default_max_pixels;
};

}  // namespace lineage::engine
