// types.cuh: the scalar types, the storage tags of float16 and bfloat16
// and their Traits, the operators, combine (one element of a reduction,
// stored type in and out) and Vec (16 bytes as elements of a type): what
// every kernel of reduce.cu computes with. Like every .cuh here, it is a
// part of reduce.cu's one translation unit, included there in order, and
// not a header that stands alone.

typedef unsigned char u8;
typedef signed char i8;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;
typedef unsigned short half_bits;  // float16, IEEE binary16
typedef unsigned short bf16_bits;  // bfloat16, the top half of a float32

// Tags for the two 16-bit floating-point types, which share a storage type.
struct F16 {};
struct BF16 {};

// Traits<S> gives, for storage tag S: the stored type T, the type C in which
// the operation is computed, and the conversions between them.
template <typename S> struct Traits;

#define PLAIN_TRAITS(S)                                          \
  template <> struct Traits<S> {                                 \
    typedef S T;                                                 \
    typedef S C;                                                 \
    static __device__ __forceinline__ C load(T x) { return x; }  \
    static __device__ __forceinline__ T store(C x) { return x; } \
  };
PLAIN_TRAITS(float)
PLAIN_TRAITS(double)
PLAIN_TRAITS(i8)
PLAIN_TRAITS(u8)
PLAIN_TRAITS(i32)
PLAIN_TRAITS(u32)
PLAIN_TRAITS(i64)
PLAIN_TRAITS(u64)

template <> struct Traits<F16> {
  typedef half_bits T;
  typedef float C;
  static __device__ __forceinline__ C load(T x) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(x));
    return f;
  }
  static __device__ __forceinline__ T store(C f) {
    half_bits x;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return x;
  }
};

template <> struct Traits<BF16> {
  typedef bf16_bits T;
  typedef float C;
  static __device__ __forceinline__ C load(T x) {
    return __int_as_float(((u32)x) << 16);
  }
  static __device__ __forceinline__ T store(C f) {
    bf16_bits x;
    asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(x) : "f"(f));
    return x;
  }
};

// Bit patterns of floating-point values, for min and max of equal operands.
__device__ __forceinline__ float or_bits(float a, float b) {
  return __int_as_float(__float_as_int(a) | __float_as_int(b));
}
__device__ __forceinline__ float and_bits(float a, float b) {
  return __int_as_float(__float_as_int(a) & __float_as_int(b));
}
__device__ __forceinline__ double or_bits(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) | __double_as_longlong(b));
}
__device__ __forceinline__ double and_bits(double a, double b) {
  return __longlong_as_double(__double_as_longlong(a) & __double_as_longlong(b));
}

// Go's min and max on floating point: NaN if either operand is NaN, and
// -0 < +0. Equal operands have equal bits except for a pair of zeros, where
// OR of the bits gives -0 (min) and AND gives +0 (max).
template <typename F> __device__ __forceinline__ F go_min(F a, F b) {
  if (a != a || b != b) return a + b;
  if (a == b) return or_bits(a, b);
  return a < b ? a : b;
}
template <typename F> __device__ __forceinline__ F go_max(F a, F b) {
  if (a != a || b != b) return a + b;
  if (a == b) return and_bits(a, b);
  return a > b ? a : b;
}

// Unsigned<T> is the unsigned type of T's width: integer sums and products
// are computed in it, where wrap-around is defined.
template <typename T> struct Unsigned { typedef T U; };
template <> struct Unsigned<i8> { typedef u8 U; };
template <> struct Unsigned<i32> { typedef u32 U; };
template <> struct Unsigned<i64> { typedef u64 U; };

template <typename C> struct IsFloat { enum { value = 0 }; };
template <> struct IsFloat<float> { enum { value = 1 }; };
template <> struct IsFloat<double> { enum { value = 1 }; };

// The operators, on the compute type C.
struct OpSum {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return a + b;
    } else {
      typedef typename Unsigned<C>::U U;
      return (C)(U)((U)a + (U)b);
    }
  }
};
struct OpProd {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return a * b;
    } else {
      typedef typename Unsigned<C>::U U;
      return (C)(U)((U)a * (U)b);
    }
  }
};
struct OpMin {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return go_min(a, b);
    } else {
      return a < b ? a : b;
    }
  }
};
struct OpMax {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) {
    if constexpr (IsFloat<C>::value) {
      return go_max(a, b);
    } else {
      return a > b ? a : b;
    }
  }
};
struct OpBAnd {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a & b; }
};
struct OpBOr {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a | b; }
};
struct OpBXor {
  template <typename C> static __device__ __forceinline__ C apply(C a, C b) { return a ^ b; }
};
// OpAvg is the sum; the kernel divides afterwards.
struct OpAvg : OpSum {};

// combine computes one element of the result, stored type in and out.
template <typename S, typename Op, bool Avg>
__device__ __forceinline__ typename Traits<S>::T combine(typename Traits<S>::T a,
                                                         typename Traits<S>::T b,
                                                         typename Traits<S>::C div) {
  typedef Traits<S> Tr;
  typename Traits<S>::T r = Tr::store(Op::apply(Tr::load(a), Tr::load(b)));
  if constexpr (Avg) r = Tr::store(Tr::load(r) / div);
  return r;
}

// Vec is 16 bytes seen as W elements of T.
template <typename T> union Vec {
  uint4 v;
  T e[16 / sizeof(T)];
};
