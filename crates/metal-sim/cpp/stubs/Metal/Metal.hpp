// Declarations of the metal-cpp API that MLX's Metal host code names, so the
// host sources can be type-checked (-fsyntax-only) on a machine without
// Apple's SDK. Written from what MLX uses, with metal-cpp's spellings and
// parameter types (e.g. MTL::Size is constructed from NS::UInteger, so a
// narrowing brace-init is rejected here as it is on a Mac). Nothing is
// defined: a use that needs more than a declaration fails to compile, which
// is the point. Only what the checked sources reach is declared.
#pragma once
#include <cstddef>
#include <cstdint>

namespace NS {
using UInteger = unsigned long;
using Integer = long;

enum StringEncoding : UInteger { UTF8StringEncoding = 4 };

class Object {};
class String : public Object {
 public:
  static String* string(const char* cstr, StringEncoding encoding);
  const char* utf8String() const;
};
class Error : public Object {};
class AutoreleasePool : public Object {};

// metal-cpp's retaining smart pointer; only its shape matters here.
template <class T>
class SharedPtr {
 public:
  SharedPtr();
  ~SharedPtr();
  SharedPtr(const SharedPtr&);
  SharedPtr& operator=(const SharedPtr&);
  T* get() const;
  T* operator->() const;
  explicit operator bool() const;
};
} // namespace NS

namespace MTL {
struct Size {
  Size() = default;
  Size(NS::UInteger width, NS::UInteger height, NS::UInteger depth);
  static Size Make(NS::UInteger width, NS::UInteger height, NS::UInteger depth);
  NS::UInteger width;
  NS::UInteger height;
  NS::UInteger depth;
};

enum DataType : NS::UInteger {
  DataTypeNone = 0,
  DataTypeFloat = 3,
  DataTypeInt = 29,
  DataTypeUInt = 33,
  DataTypeBool = 53,
};

class Allocation : public NS::Object {};
class Resource : public Allocation {};
class Buffer : public Resource {};
class Fence : public NS::Object {};
class Function : public NS::Object {};
class LinkedFunctions : public NS::Object {};
class Library : public NS::Object {};
class ResidencySet : public NS::Object {};
class Device : public NS::Object {};

class ComputePipelineState : public NS::Object {
 public:
  NS::UInteger maxTotalThreadsPerThreadgroup() const;
};

class CommandQueue : public NS::Object {
 public:
  void setLabel(const NS::String* label);
};

class CommandBuffer : public NS::Object {
 public:
  NS::String* label() const;
  void setLabel(const NS::String* label);
};

class ComputeCommandEncoder : public NS::Object {
 public:
  void setComputePipelineState(const ComputePipelineState* state);
  void setBytes(const void* bytes, NS::UInteger length, NS::UInteger index);
  void setThreadgroupMemoryLength(NS::UInteger length, NS::UInteger index);
};
} // namespace MTL
