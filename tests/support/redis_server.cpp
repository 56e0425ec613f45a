#include "support/redis_server.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace xqajit::test {
namespace {

// A port the kernel just handed out and we released: free, barring a race that
// start() survives by retrying on another port.
int free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    throw std::runtime_error("cannot bind a loopback port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Any answer to PING (+PONG, or -NOAUTH with a password set) means it is up.
bool answers(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    timeval tv{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    const char ping[] = "PING\r\n";
    char reply[64] = {};
    ok = ::write(fd, ping, sizeof ping - 1) > 0 && ::read(fd, reply, sizeof reply - 1) > 0;
  }
  ::close(fd);
  return ok;
}

}  // namespace

std::string find_redis_server() {
  for (const char* p : {"/usr/bin/redis-server", "/usr/local/bin/redis-server", "/usr/sbin/redis-server"})
    if (::access(p, X_OK) == 0) return p;
  return {};
}

RedisServer::RedisServer(std::vector<std::string> extra_args) : extra_args_(std::move(extra_args)) {
  if (find_redis_server().empty())
    throw std::runtime_error(
        "redis-server is not installed, so the remote-cache tests cannot run. Install it "
        "(scripts/setup.sh does: apt-get install redis-server)");
  for (int attempt = 0;; ++attempt) {
    port_ = free_loopback_port();
    try {
      start();
      return;
    } catch (const std::exception&) {
      if (attempt == 2) throw;
    }
  }
}

RedisServer::~RedisServer() {
  if (pid_ > 0) {
    ::kill(pid_, SIGTERM);
    // Without persistence a TERM ends it in milliseconds; do not hang a test on it.
    for (int i = 0; i < 200 && ::waitpid(pid_, nullptr, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
}

std::string RedisServer::url(const std::string& password) const {
  return "redis://" + (password.empty() ? "" : ":" + password + "@") + "127.0.0.1:" + std::to_string(port_);
}

void RedisServer::kill() {
  if (pid_ <= 0) return;
  ::kill(pid_, SIGKILL);
  ::waitpid(pid_, nullptr, 0);
  pid_ = -1;
}

void RedisServer::restart() {
  kill();
  start();
}

void RedisServer::start() {
  std::vector<std::string> args = {find_redis_server(), "--port", std::to_string(port_), "--bind",
                                   "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
                                   "--dir", dir_.path().string(), "--logfile", (dir_ / "redis.log").string(),
                                   // DEBUG SLEEP plays a slow server; Redis 7 allows it only when asked.
                                   "--enable-debug-command", "local"};
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  pid_ = pid;
  wait_until_ready();
}

void RedisServer::wait_until_ready() {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < deadline) {
    if (::waitpid(pid_, nullptr, WNOHANG) == pid_) {
      pid_ = -1;
      throw std::runtime_error("redis-server exited at start (port " + std::to_string(port_) +
                               " taken?); its log: " + read_file(dir_ / "redis.log"));
    }
    if (answers(port_)) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill();
  throw std::runtime_error("redis-server did not answer within 10 s; its log: " +
                           read_file(dir_ / "redis.log"));
}

}  // namespace xqajit::test
