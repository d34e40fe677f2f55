// cache::disk_format: a copy_record as one file; see disk_format.h.
#include "cache/tier/disk/disk_format.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace lineage::cache {

namespace {

struct file_closer {
    void operator()(FILE * f) const { std::fclose(f); }
};
using file_ptr = std::unique_ptr<FILE, file_closer>;

tier_load_result fail(tier_load_error e, std::string detail) {
    tier_load_result r;
    r.error = e;
    r.detail = std::move(detail);
    return r;
}

/** Opens `path` read-only as a regular file: O_NOFOLLOW (a symlink is refused), O_NONBLOCK (a
 *  FIFO cannot block the disk thread), then fstat: anything but a regular file is refused. */
tier_load_result open_regular(const std::string & path, file_ptr & f, uint64_t & size) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        if (e == ENOENT) {
            return fail(tier_load_error::missing, std::strerror(e));
        }
        return fail(e == ELOOP ? tier_load_error::not_regular : tier_load_error::io, std::strerror(e));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int e = errno;
        ::close(fd);
        return fail(tier_load_error::io, std::strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        return fail(tier_load_error::not_regular, "not a regular file");
    }
    // Regular files never block; reads go back to blocking mode for plain fread semantics.
    ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    f.reset(::fdopen(fd, "rb"));
    if (!f) {
        const int e = errno;
        ::close(fd);
        return fail(tier_load_error::io, std::strerror(e));
    }
    size = static_cast<uint64_t>(st.st_size);
    return {};
}

}  // namespace

util::status write_disk_file(const std::string & path, const copy_record & r) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) {
        return util::status::error(std::strerror(errno));
    }
    file_ptr f(::fdopen(fd, "wb"));
    if (!f) {
        const int e = errno;
        ::close(fd);
        return util::status::error(std::strerror(e));
    }
    if (!write_copy_record(f.get(), r) || std::fflush(f.get()) != 0) {
        return util::status::error(std::string("write failed: ") + std::strerror(errno));
    }
    if (::fsync(fileno(f.get())) != 0) {
        return util::status::error(std::string("fsync failed: ") + std::strerror(errno));
    }
    return util::status::ok();
}

tier_load_result read_disk_header(const std::string & path, bool with_tokens) {
    file_ptr f;
    uint64_t size = 0;
    if (tier_load_result r = open_regular(path, f, size); r.error != tier_load_error::none) {
        return r;
    }
    return read_copy_header(f.get(), size, with_tokens);
}

tier_load_result read_disk_file(const std::string & path, const std::string & model, const checkpoint_filter & keep) {
    file_ptr f;
    uint64_t size = 0;
    if (tier_load_result r = open_regular(path, f, size); r.error != tier_load_error::none) {
        return r;
    }
    return read_copy_record(f.get(), size, model, keep);
}

}  // namespace lineage::cache
