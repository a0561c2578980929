#pragma once
// Fetching dataset archives: libcurl (https, http, file URLs), MD5 check, atomic unpack.
#include <filesystem>
#include <string>

namespace packrat::data {

struct ArchiveSource {
  std::string url;        // https://... or file:///... (tests)
  std::string md5;        // 32 hex digits, published with the archive
  std::string top_dir;    // the folder the archive unpacks to ("cifar-10-batches-bin")
};

// The official archives (https://www.cs.toronto.edu/~kriz/cifar.html).
ArchiveSource cifar10_source();   // cifar-10-binary.tar.gz  -> cifar-10-batches-bin/
ArchiveSource cifar100_source();  // cifar-100-binary.tar.gz -> cifar-100-binary/

// Downloads `url` to `dest` (through dest + ".part-<pid>", renamed when complete). Throws with the
// URL and curl's message on failure (HTTP status >= 400 included).
void download_file(const std::string& url, const std::filesystem::path& dest);

// Makes sure root/<top_dir> exists: if not, downloads the archive into root (kept there as
// root/<file name of the url> and reused on the next call if its MD5 matches), checks its MD5
// (a mismatch deletes the file and throws, naming both digests), unpacks it into a temporary
// folder under root and renames root/.tmp/<top_dir> to root/<top_dir>, so a half-unpacked
// dataset never appears under the real name. Returns root/<top_dir>.
std::filesystem::path fetch_archive(const ArchiveSource& source, const std::filesystem::path& root);

}  // namespace packrat::data
