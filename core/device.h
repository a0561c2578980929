#pragma once
// Where a tensor lives. Every tensor's storage names its device; new tensors go to the
// thread's DeviceScope (the CPU unless set), the way TagScope picks their memory tag.
#include <cstdint>
#include <string>
#include <string_view>

namespace packrat {

enum class DeviceKind : uint8_t { CPU, CUDA };

struct Device {
  DeviceKind kind = DeviceKind::CPU;
  int index = 0;  // which GPU; always 0 for the CPU

  static constexpr Device cpu() { return {DeviceKind::CPU, 0}; }
  static constexpr Device cuda(int index = 0) { return {DeviceKind::CUDA, index}; }
  constexpr bool is_cpu() const { return kind == DeviceKind::CPU; }
  constexpr bool operator==(const Device&) const = default;

  std::string str() const;  // "cpu", "cuda:0"
  // "cpu", "cuda" (= cuda:0), "cuda:N"; throws packrat::Error naming the text otherwise.
  static Device parse(std::string_view text);
};

// Thread-local default device for new tensors.
class DeviceScope {
 public:
  explicit DeviceScope(Device device);
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  static Device current();

 private:
  Device previous_;
};

}  // namespace packrat
