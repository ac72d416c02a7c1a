// The one way cuwire reads a token from a file (the server's token files, the admin CLI's
// --token-file, the client library's CUWIRE_TOKEN_FILE and grant directories, the Kubernetes
// plugin's admin token): its first line, without the line end and trailing blanks.
#pragma once

#include <string>

namespace cuwire {

// The first line of `path` (at most 4 KiB; whitespace at its end taken off) into *line; false,
// with *error saying why (the system's word: "No such file or directory"), when the file
// cannot be opened or read; the caller says which file it was.
// An empty first line is returned as such: whether that is an error is the caller's to say.
bool read_first_line(const std::string& path, std::string* line, std::string* error);

}  // namespace cuwire
