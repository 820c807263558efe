// SPDX-License-Identifier: MIT
// The durable image of a persistent-memory region (pmem.h Media): memory, or a file.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "pmem.h"

namespace rackemu::pmem {

namespace {

class MemoryMedia final : public Media {
public:
    explicit MemoryMedia(uint64_t size) : bytes_(size) {}
    Status read(uint64_t off, void *buf, uint64_t len) override
    {
        if (off > bytes_.size() || len > bytes_.size() - off) return RK_DECODE_ERROR;
        memcpy(buf, bytes_.data() + off, len);
        return RK_OK;
    }
    Status write(uint64_t off, const void *buf, uint64_t len) override
    {
        if (off > bytes_.size() || len > bytes_.size() - off) return RK_DECODE_ERROR;
        memcpy(bytes_.data() + off, buf, len);
        return RK_OK;
    }
    Status sync() override { return RK_OK; }

private:
    std::vector<uint8_t> bytes_;
};

class FileMedia final : public Media {
public:
    FileMedia(int fd, uint64_t size) : fd_(fd), size_(size) {}
    ~FileMedia() override { close(fd_); }
    Status read(uint64_t off, void *buf, uint64_t len) override
    {
        if (off > size_ || len > size_ - off) return RK_DECODE_ERROR;
        auto *p = static_cast<uint8_t *>(buf);
        while (len) {
            const ssize_t n = pread(fd_, p, len, off_t(off));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return RK_SLAVE_ERROR;
            p += n, off += uint64_t(n), len -= uint64_t(n);
        }
        return RK_OK;
    }
    Status write(uint64_t off, const void *buf, uint64_t len) override
    {
        if (off > size_ || len > size_ - off) return RK_DECODE_ERROR;
        auto *p = static_cast<const uint8_t *>(buf);
        while (len) {
            const ssize_t n = pwrite(fd_, p, len, off_t(off));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) return RK_SLAVE_ERROR;
            p += n, off += uint64_t(n), len -= uint64_t(n);
        }
        return RK_OK;
    }
    Status sync() override { return fdatasync(fd_) == 0 ? RK_OK : RK_SLAVE_ERROR; }

private:
    int fd_;
    uint64_t size_;
};

} // namespace

std::unique_ptr<Media> memory_media(uint64_t size)
{
    return std::make_unique<MemoryMedia>(size);
}

std::unique_ptr<Media> file_media(const std::string &path, uint64_t size, std::string *err)
{
    const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    struct stat st {};
    std::string why;
    if (fd < 0 || fstat(fd, &st) != 0) {
        why = path + ": " + strerror(errno);
    } else if (uint64_t(st.st_size) > size) {
        why = path + ": " + std::to_string(st.st_size) + " bytes, larger than the region's " +
              std::to_string(size) + " (an image of another region?)";
    } else if (uint64_t(st.st_size) < size && ftruncate(fd, off_t(size)) != 0) {
        why = path + ": cannot extend to " + std::to_string(size) + " bytes: " + strerror(errno);
    }
    if (!why.empty()) {
        if (fd >= 0) close(fd);
        if (err) *err = why;
        return nullptr;
    }
    return std::make_unique<FileMedia>(fd, size);
}

} // namespace rackemu::pmem
