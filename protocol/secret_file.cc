#include "protocol/secret_file.h"

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>

namespace cuwire {

bool read_first_line(const std::string& path, std::string* line, std::string* error) {
  std::FILE* f = std::fopen(path.c_str(), "re");
  if (!f) {
    *error = std::strerror(errno);
    return false;
  }
  char buf[4096];
  line->clear();
  const bool read = std::fgets(buf, sizeof buf, f) != nullptr;
  const bool failed = !read && std::ferror(f);
  const int err = errno;
  std::fclose(f);
  if (failed) {
    *error = std::strerror(err);
    return false;
  }
  if (read) *line = buf;
  while (!line->empty() && std::isspace(static_cast<unsigned char>(line->back()))) line->pop_back();
  return true;
}

}  // namespace cuwire
