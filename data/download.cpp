#include "data/download.h"

#include <curl/curl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>

#include "core/error.h"
#include "data/md5.h"
#include "data/tar.h"

namespace packrat::data {
namespace fs = std::filesystem;

ArchiveSource cifar10_source() {
  return {"https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz", "c32a1d4ab5d03f1284b67883e8d87530",
          "cifar-10-batches-bin"};
}

ArchiveSource cifar100_source() {
  return {"https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz", "03b5dce01913d631647c71ecec9e9cb8",
          "cifar-100-binary"};
}

namespace {

size_t write_to_file(char* ptr, size_t size, size_t n, void* file) {
  return std::fwrite(ptr, size, n, static_cast<FILE*>(file)) * size;
}

// Logs every further tenth of a download whose size is known.
struct Progress {
  std::string url;
  int logged = 0;  // tenths
};

int log_progress(void* p, curl_off_t total, curl_off_t now, curl_off_t, curl_off_t) {
  auto* pr = static_cast<Progress*>(p);
  if (total <= 0) return 0;
  const int tenths = static_cast<int>(now * 10 / total);
  if (tenths > pr->logged) {
    pr->logged = tenths;
    spdlog::info("data: {} {}% of {:.1f} MB", pr->url, tenths * 10, static_cast<double>(total) / 1e6);
  }
  return 0;
}

std::string file_name_of(const std::string& url) {
  std::string path = url.substr(0, url.find_first_of("?#"));
  const size_t slash = path.find_last_of('/');
  std::string name = slash == std::string::npos ? path : path.substr(slash + 1);
  return name.empty() ? "download" : name;
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

}  // namespace

void download_file(const std::string& url, const fs::path& dest) {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (!dest.parent_path().empty()) fs::create_directories(dest.parent_path());
  // A private name per process, so two runs fetching at once do not write into one file.
  const fs::path part = fmt::format("{}.part-{}", dest.string(), static_cast<long>(::getpid()));
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(part.c_str(), "wb"), &std::fclose);
  if (!f) fail("download: cannot create {}: {}", part.string(), std::strerror(errno));
  std::unique_ptr<CURL, void (*)(CURL*)> curl(curl_easy_init(), &curl_easy_cleanup);
  if (!curl) fail("download: libcurl could not start a transfer for {}", url);
  char message[CURL_ERROR_SIZE] = {};
  curl_easy_setopt(curl.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl.get(), CURLOPT_WRITEFUNCTION, &write_to_file);
  curl_easy_setopt(curl.get(), CURLOPT_WRITEDATA, f.get());
  curl_easy_setopt(curl.get(), CURLOPT_ERRORBUFFER, message);
  curl_easy_setopt(curl.get(), CURLOPT_FOLLOWLOCATION, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_FAILONERROR, 1L);
  curl_easy_setopt(curl.get(), CURLOPT_CONNECTTIMEOUT, 30L);
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_LIMIT, 1024L);  // abort below 1 KB/s ...
  curl_easy_setopt(curl.get(), CURLOPT_LOW_SPEED_TIME, 60L);     // ... for a minute
  Progress progress{url};
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFOFUNCTION, &log_progress);
  curl_easy_setopt(curl.get(), CURLOPT_XFERINFODATA, &progress);
  curl_easy_setopt(curl.get(), CURLOPT_NOPROGRESS, 0L);
  const CURLcode rc = curl_easy_perform(curl.get());
  const bool closed = std::fclose(f.release()) == 0;
  if (rc != CURLE_OK) {
    fs::remove(part);
    fail("download: fetching {} failed: {}", url, message[0] ? message : curl_easy_strerror(rc));
  }
  if (!closed) {
    fs::remove(part);
    fail("download: cannot write {}: {}", part.string(), std::strerror(errno));
  }
  fs::rename(part, dest);
}

namespace {

fs::path fetch_checked(const ArchiveSource& source, const fs::path& root) {
  const fs::path target = root / source.top_dir;
  if (fs::is_directory(target)) return target;
  fs::create_directories(root);
  const fs::path archive = root / file_name_of(source.url);
  const std::string want = lower(source.md5);
  if (fs::exists(archive) && md5_file(archive) == want) {
    spdlog::info("data: reusing {} (MD5 matches)", archive.string());
  } else {
    spdlog::info("data: downloading {} to {}", source.url, archive.string());
    download_file(source.url, archive);
  }
  const std::string got = md5_file(archive);
  if (got != want) {
    fs::remove(archive);
    fail("download: {} from {} has MD5 {}, expected {}; the file was deleted, retry or fetch it by hand", archive.string(),
         source.url, got, want);
  }
  // Unpack into a private folder, then move the finished tree into place with one rename.
  const fs::path tmp = root / fmt::format(".tmp-unpack-{}-{}", source.top_dir, static_cast<long>(::getpid()));
  fs::remove_all(tmp);
  try {
    spdlog::info("data: unpacking {}", archive.string());
    extract_tar_gz(archive, tmp);
    if (!fs::is_directory(tmp / source.top_dir))
      fail("download: {} does not contain the folder {}/ that was expected", archive.string(), source.top_dir);
    std::error_code ec;
    fs::rename(tmp / source.top_dir, target, ec);
    if (ec && !fs::is_directory(target))  // another process may have won the race; that is fine
      fail("download: cannot move the unpacked {} to {}: {}", source.top_dir, target.string(), ec.message());
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
  fs::remove_all(tmp);
  return target;
}

}  // namespace

fs::path fetch_archive(const ArchiveSource& source, const fs::path& root) {
  try {
    return fetch_checked(source, root);
  } catch (const fs::filesystem_error& e) {
    fail("download: {} into {}: {}", source.url, root.string(), e.what());
  }
}

}  // namespace packrat::data
