#include "rendezvous_store.hpp"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <netdb.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <torch/csrc/distributed/c10d/FileStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <unistd.h>

#include <c10/util/hash.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <optional>
#include <vector>

namespace pipescope::exec {
namespace {

double seconds(std::chrono::milliseconds t) { return std::chrono::duration<double>(t).count(); }

// ---- the listening socket of rank 0's store ---------------------------------------------------

// A numeric address (or localhost) names one interface; a host name may resolve here to
// something the other nodes do not use (Debian maps the host's own name to 127.0.1.1), so
// the store listens on every interface for it, as torchrun's does.
bool names_one_interface(const std::string& host) {
  if (host == "localhost") return true;
  unsigned char buffer[sizeof(in6_addr)];
  return inet_pton(AF_INET, host.c_str(), buffer) == 1 || inet_pton(AF_INET6, host.c_str(), buffer) == 1;
}

// A socket bound to host:port (listening when `listen_too`), or TransportError saying why not
// in the user's terms: the port in use, or an address that is not this host's.
int bind_store_socket(const std::string& host, int port, bool listen_too) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = host.empty() ? AI_PASSIVE : 0;
  addrinfo* found = nullptr;
  const std::string port_text = std::to_string(port);
  if (const int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), port_text.c_str(), &hints, &found); rc != 0)
    throw TransportError(fmt::format("MASTER_ADDR '{}': {}", host, gai_strerror(rc)));
  int error = 0;
  int fd = -1;
  for (addrinfo* a = found; a && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      error = errno;
      continue;
    }
    const int on = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));  // as c10d: a run just ended may leave TIME_WAIT
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || (listen_too && listen(fd, SOMAXCONN) != 0)) {
      error = errno;
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd >= 0) return fd;
  const std::string where = host.empty() ? "this host" : host;
  if (error == EADDRINUSE)
    throw TransportError(fmt::format("MASTER_PORT {} is in use on {} (another run or program listens there): choose another port", port, where));
  if (error == EADDRNOTAVAIL)
    throw TransportError(fmt::format("MASTER_ADDR {} is not an address of this host, where rank 0 serves the rendezvous", host));
  throw TransportError(fmt::format("cannot listen on {}:{} for the rendezvous: {}", where, port, std::strerror(error)));
}

// LibTorch 2.x takes a socket that is already listening (TCPStoreOptions::masterListenFd), so
// the store listens on MASTER_ADDR only; 1.13 has no such option and binds every interface.
template <typename Options>
bool hand_over_listening_socket(Options& options, int fd) {
  if constexpr (requires { options.masterListenFd = fd; }) {
    options.masterListenFd = fd;
    return true;
  } else {
    return false;
  }
}

c10::intrusive_ptr<c10d::Store> open_store(const WorldOptions& o) {
  if (!o.store_file.empty()) {
    auto store = c10::make_intrusive<c10d::FileStore>(o.store_file, o.world_size);
    store->setTimeout(o.timeout);
    return store;
  }
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<std::uint16_t>(o.master_port);
  store_options.isServer = o.rank == 0;
  store_options.numWorkers = static_cast<std::size_t>(o.world_size);
  store_options.waitWorkers = false;
  store_options.timeout = o.timeout;
  if (o.rank == 0) {
    // Found here, the port in use is one line; c10d would log its failed binds first.
    const bool one_interface = names_one_interface(o.master_addr);
    const int fd = bind_store_socket(one_interface ? o.master_addr : "", o.master_port, true);
    if (!(one_interface && hand_over_listening_socket(store_options, fd))) {
      close(fd);
      if (one_interface) close(bind_store_socket("", o.master_port, false));  // where 1.13 will bind
    }
  }
  return c10::make_intrusive<c10d::TCPStore>(o.master_addr, store_options);
}

// ---- membership ---------------------------------------------------------------------------

// SHA-1 of `data` (never empty here: c10::sha1 leaves its state unset for an empty string).
std::string sha1_bytes(const std::string& data) {
  const std::string hex = c10::sha1(data).str();
  std::string bytes;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return bytes;
}

// HMAC-SHA1 (RFC 2104) as hex: proves knowledge of the secret without revealing it.
std::string proof(const std::string& secret, const std::string& message) {
  constexpr std::size_t kBlock = 64;
  std::string key = secret.size() > kBlock ? sha1_bytes(secret) : secret;  // longer keys are hashed (RFC 2104)
  key.resize(kBlock, '\0');
  std::string inner(kBlock, '\0'), outer(kBlock, '\0');
  for (std::size_t i = 0; i < kBlock; ++i) {
    inner[i] = static_cast<char>(key[i] ^ 0x36);
    outer[i] = static_cast<char>(key[i] ^ 0x5c);
  }
  std::string hex;
  for (unsigned char b : sha1_bytes(outer + sha1_bytes(inner + message))) hex += fmt::format("{:02x}", b);
  return hex;
}

bool same_proof(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char difference = 0;
  for (std::size_t i = 0; i < a.size(); ++i) difference |= static_cast<unsigned char>(a[i] ^ b[i]);
  return difference == 0;
}

const std::string kRunKey = "pipescope/run";

std::string member_key(const std::string& secret, int rank, const std::string& nonce) {
  return "pipescope/member/" + proof(secret, fmt::format("member {} {}", rank, nonce));
}

// Waits for `key` up to the store's timeout; nullopt when it did not come.
std::optional<std::string> wait_for(c10d::Store& store, const std::string& key) {
  try {
    const auto bytes = store.get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

void put(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

int parse_world_size(const std::string& text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && ptr == text.data() + text.size() ? value : -1;
}

void check_membership(c10d::Store& store, const WorldOptions& o, const std::string& where) {
  const std::string world = std::to_string(o.world_size);
  if (o.rank == 0) {
    const std::string nonce = random_hex(16);
    put(store, kRunKey, world + " " + nonce + " " + proof(o.run_secret, "run " + world + " " + nonce));
    for (int r = 1; r < o.world_size; ++r) {
      const auto answer = wait_for(store, member_key(o.run_secret, r, nonce));
      if (!answer)
        throw TransportError(fmt::format("rank {} did not join the run at {} within {:g} s (not started, stopped, or "
                                         "started with another PIPESCOPE_RUN_SECRET)", r, where, seconds(o.timeout)));
      if (*answer != world)
        throw TransportError(fmt::format("rank {}'s WORLD_SIZE {} differs from rank 0's {}", r, *answer, o.world_size));
    }
    return;
  }
  const auto record = wait_for(store, kRunKey);
  if (!record) throw TransportError(fmt::format("rank 0 did not open the run at {} within {:g} s", where, seconds(o.timeout)));
  const auto first_space = record->find(' '), second_space = record->find(' ', first_space + 1);
  if (first_space == std::string::npos || second_space == std::string::npos)
    throw TransportError(fmt::format("the rendezvous at {} is not a pipescope run's", where));
  const std::string leader_world = record->substr(0, first_space);
  const std::string nonce = record->substr(first_space + 1, second_space - first_space - 1);
  if (!same_proof(record->substr(second_space + 1), proof(o.run_secret, "run " + leader_world + " " + nonce)))
    throw TransportError(fmt::format("the run at {} is another run's: its PIPESCOPE_RUN_SECRET differs from this worker's", where));
  // Answered even when the sizes differ, so that rank 0 names the mismatch too.
  put(store, member_key(o.run_secret, o.rank, nonce), world);
  if (parse_world_size(leader_world) != o.world_size)
    throw TransportError(fmt::format("WORLD_SIZE {} differs from rank 0's {}", o.world_size, leader_world));
}

}  // namespace

std::string random_hex(std::size_t bytes) {
  std::vector<unsigned char> buffer(bytes);
  std::size_t filled = 0;
  while (filled < bytes) {
    const ssize_t n = getrandom(buffer.data() + filled, bytes - filled, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw std::runtime_error(fmt::format("getrandom: {}", std::strerror(errno)));
    filled += static_cast<std::size_t>(n);
  }
  std::string hex;
  for (unsigned char b : buffer) hex += fmt::format("{:02x}", b);
  return hex;
}

std::string first_line_of(const std::exception& e) {
  std::string message = e.what();
  if (auto nl = message.find('\n'); nl != std::string::npos) message.resize(nl);
  return message;
}

c10::intrusive_ptr<c10d::Store> open_rendezvous_store(const WorldOptions& o) {
  const std::string where = o.store_file.empty() ? fmt::format("{}:{}", o.master_addr, o.master_port) : o.store_file;
  c10::intrusive_ptr<c10d::Store> store;
  try {
    store = open_store(o);
  } catch (const TransportError&) {
    throw;
  } catch (const std::exception& e) {
    throw TransportError(fmt::format("rendezvous at {}: {}", where, first_line_of(e)));
  }
  check_membership(*store, o, where);
  return store;
}

void StoreAdapter::set(const std::string& key, const std::string& value) {
  store_->set(key, std::vector<std::uint8_t>(value.begin(), value.end()));
}

std::string StoreAdapter::get(const std::string& key) {
  try {
    auto bytes = store_->get(key);
    return std::string(bytes.begin(), bytes.end());
  } catch (const std::exception& e) {
    throw TransportError(fmt::format("store key '{}': {}", key, first_line_of(e)));
  }
}

World make_world(const at::Device& device, const WorldOptions& options) {
  if (device.is_cuda()) return make_nccl_world(options, device.has_index() ? device.index() : 0);
  if (device.is_cpu()) return make_gloo_world(options);
  throw TransportError(fmt::format("no transport for device '{}' (cpu: Gloo, cuda: NCCL)", device.str()));
}

}  // namespace pipescope::exec

