// Owns MappedFile and rename_file (see mapped_file.h).
#include "data/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/error.h"

namespace mt {

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MT_CHECK(fd >= 0) << "cannot open " << path << ": " << std::strerror(errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    MT_FAIL() << "cannot stat " << path << ": " << std::strerror(err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    MT_FAIL() << path << " is not a regular file";
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    const int err = errno;
    ::close(fd);
    MT_CHECK(p != MAP_FAILED) << "cannot map " << path << ": " << std::strerror(err);
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

void rename_file(const std::string& from, const std::string& to) {
  MT_CHECK(std::rename(from.c_str(), to.c_str()) == 0)
      << "cannot rename " << from << " to " << to << ": " << std::strerror(errno);
}

}  // namespace mt
