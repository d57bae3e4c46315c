//go:build amd64 && !race && !purego

#include "textflag.h"

// Vector kernels for AVX2 (and F16C for float16). Every function has the Go
// signature
//
//	func name(dst, a, b *byte, n int)
//
// and computes dst = a op b over n bytes, where n > 0 is a multiple of the
// function's block (128 bytes, or 64 for the 16-bit float kernels). Loads
// and stores are unaligned. Each block is loaded completely before it is
// stored, so dst may be exactly a or b.

// LOAD sets DI, SI, DX, CX from the arguments and AX to 0.
#define LOAD \
	MOVQ dst+0(FP), DI; \
	MOVQ a+8(FP), SI;  \
	MOVQ b+16(FP), DX; \
	MOVQ n+24(FP), CX; \
	XORQ AX, AX

// BINOP defines a 128-byte-block kernel whose op is one instruction taking
// a memory operand (VADDPS m, y, y).
#define BINOP(name, INSN) \
TEXT name(SB), NOSPLIT, $0-32; \
	LOAD;                            \
loop:                                \
	VMOVDQU 0(SI)(AX*1), Y0;         \
	VMOVDQU 32(SI)(AX*1), Y1;        \
	VMOVDQU 64(SI)(AX*1), Y2;        \
	VMOVDQU 96(SI)(AX*1), Y3;        \
	INSN 0(DX)(AX*1), Y0, Y0;        \
	INSN 32(DX)(AX*1), Y1, Y1;       \
	INSN 64(DX)(AX*1), Y2, Y2;       \
	INSN 96(DX)(AX*1), Y3, Y3;       \
	VMOVDQU Y0, 0(DI)(AX*1);         \
	VMOVDQU Y1, 32(DI)(AX*1);        \
	VMOVDQU Y2, 64(DI)(AX*1);        \
	VMOVDQU Y3, 96(DI)(AX*1);        \
	ADDQ $128, AX;                   \
	CMPQ AX, CX;                     \
	JB loop;                         \
	VZEROUPPER;                      \
	RET

BINOP(·addF32, VADDPS)
BINOP(·addF64, VADDPD)
BINOP(·mulF32, VMULPS)
BINOP(·mulF64, VMULPD)
BINOP(·add8, VPADDB)
BINOP(·add32, VPADDD)
BINOP(·add64, VPADDQ)
BINOP(·and256, VPAND)
BINOP(·or256, VPOR)
BINOP(·xor256, VPXOR)

// Go's min and max on floats: a NaN operand gives NaN, and -0 < +0. The x86
// instructions return their second operand on NaN or equality, so each is
// run both ways round: for min, or-ing the two results gives -0 from a pair
// of zeros and keeps a NaN a NaN; for max, and-ing gives +0 from a pair of
// zeros, and the unordered mask (all ones, a NaN) is or-ed in. X, Y are the
// operands, the result replaces X; T, U are scratch.
#define MINPS(X, Y, T, U) VMINPS Y, X, T; VMINPS X, Y, X; VORPS T, X, X
#define MAXPS(X, Y, T, U) VMAXPS Y, X, T; VCMPPS $3, Y, X, U; VMAXPS X, Y, X; VANDPS T, X, X; VORPS U, X, X
#define MINPD(X, Y, T, U) VMINPD Y, X, T; VMINPD X, Y, X; VORPD T, X, X
#define MAXPD(X, Y, T, U) VMAXPD Y, X, T; VCMPPD $3, Y, X, U; VMAXPD X, Y, X; VANDPD T, X, X; VORPD U, X, X
#define ADDPS(X, Y, T, U) VADDPS Y, X, X
#define MULPS(X, Y, T, U) VMULPS Y, X, X

// REGOP defines a 128-byte-block kernel whose op is a macro on registers.
#define REGOP(name, OP) \
TEXT name(SB), NOSPLIT, $0-32; \
	LOAD;                            \
loop:                                \
	VMOVDQU 0(SI)(AX*1), Y0;         \
	VMOVDQU 32(SI)(AX*1), Y1;        \
	VMOVDQU 64(SI)(AX*1), Y2;        \
	VMOVDQU 96(SI)(AX*1), Y3;        \
	VMOVDQU 0(DX)(AX*1), Y4;         \
	VMOVDQU 32(DX)(AX*1), Y5;        \
	VMOVDQU 64(DX)(AX*1), Y6;        \
	VMOVDQU 96(DX)(AX*1), Y7;        \
	OP(Y0, Y4, Y8, Y9);              \
	OP(Y1, Y5, Y10, Y11);            \
	OP(Y2, Y6, Y12, Y13);            \
	OP(Y3, Y7, Y14, Y15);            \
	VMOVDQU Y0, 0(DI)(AX*1);         \
	VMOVDQU Y1, 32(DI)(AX*1);        \
	VMOVDQU Y2, 64(DI)(AX*1);        \
	VMOVDQU Y3, 96(DI)(AX*1);        \
	ADDQ $128, AX;                   \
	CMPQ AX, CX;                     \
	JB loop;                         \
	VZEROUPPER;                      \
	RET

REGOP(·minF32, MINPS)
REGOP(·maxF32, MAXPS)
REGOP(·minF64, MINPD)
REGOP(·maxF64, MAXPD)

// F16OP defines a float16 kernel over 64-byte blocks (32 elements): widen
// with VCVTPH2PS, combine in float32, round back to nearest even with
// VCVTPS2PH (immediate 0).
#define F16OP(name, OP) \
TEXT name(SB), NOSPLIT, $0-32; \
	LOAD;                            \
loop:                                \
	VCVTPH2PS 0(SI)(AX*1), Y0;       \
	VCVTPH2PS 16(SI)(AX*1), Y1;      \
	VCVTPH2PS 32(SI)(AX*1), Y2;      \
	VCVTPH2PS 48(SI)(AX*1), Y3;      \
	VCVTPH2PS 0(DX)(AX*1), Y4;       \
	VCVTPH2PS 16(DX)(AX*1), Y5;      \
	VCVTPH2PS 32(DX)(AX*1), Y6;      \
	VCVTPH2PS 48(DX)(AX*1), Y7;      \
	OP(Y0, Y4, Y8, Y9);              \
	OP(Y1, Y5, Y10, Y11);            \
	OP(Y2, Y6, Y12, Y13);            \
	OP(Y3, Y7, Y14, Y15);            \
	VCVTPS2PH $0, Y0, 0(DI)(AX*1);   \
	VCVTPS2PH $0, Y1, 16(DI)(AX*1);  \
	VCVTPS2PH $0, Y2, 32(DI)(AX*1);  \
	VCVTPS2PH $0, Y3, 48(DI)(AX*1);  \
	ADDQ $64, AX;                    \
	CMPQ AX, CX;                     \
	JB loop;                         \
	VZEROUPPER;                      \
	RET

F16OP(·addF16, ADDPS)
F16OP(·mulF16, MULPS)
F16OP(·minF16, MINPS)
F16OP(·maxF16, MAXPS)

// BF16NARROW rounds the float32 lanes of X to bfloat16 in the low half of
// each lane (high half zero): add 0x7fff plus the lowest kept bit and shift,
// except that a NaN only gets its quiet bit set. Y12 holds 0x7fff, Y13 holds
// 1, Y14 holds 0x00400000 in every lane; T, U, V are scratch.
#define BF16NARROW(X, T, U, V) \
	VPSRLD $16, X, T;                \
	VPAND Y13, T, T;                 \
	VPADDD Y12, X, U;                \
	VPADDD T, U, U;                  \
	VCMPPS $3, X, X, T;              \
	VPOR Y14, X, V;                  \
	VBLENDVPS T, V, U, X;            \
	VPSRLD $16, X, X

// BF16CONST loads the constants of BF16NARROW, and zero into Y15.
#define BF16CONST \
	MOVL $0x7fff, BX;                \
	VMOVD BX, X12;                   \
	VPBROADCASTD X12, Y12;           \
	MOVL $1, BX;                     \
	VMOVD BX, X13;                   \
	VPBROADCASTD X13, Y13;           \
	MOVL $0x00400000, BX;            \
	VMOVD BX, X14;                   \
	VPBROADCASTD X14, Y14;           \
	VPXOR Y15, Y15, Y15

// BF16OP defines a bfloat16 kernel over 64-byte blocks (32 elements). It
// widens by interleaving zero words below the elements (VPUNPCKLWD and
// VPUNPCKHWD with Y15 = 0), which permutes the elements within each 128-bit
// lane; VPACKUSDW after narrowing undoes exactly that permutation.
#define BF16OP(name, OP) \
TEXT name(SB), NOSPLIT, $0-32 \
	LOAD;                            \
	BF16CONST;                       \
loop:                                \
	VMOVDQU 0(SI)(AX*1), Y8;         \
	VMOVDQU 32(SI)(AX*1), Y9;        \
	VMOVDQU 0(DX)(AX*1), Y10;        \
	VMOVDQU 32(DX)(AX*1), Y11;       \
	VPUNPCKLWD Y8, Y15, Y0;          \
	VPUNPCKHWD Y8, Y15, Y1;          \
	VPUNPCKLWD Y9, Y15, Y2;          \
	VPUNPCKHWD Y9, Y15, Y3;          \
	VPUNPCKLWD Y10, Y15, Y4;         \
	VPUNPCKHWD Y10, Y15, Y5;         \
	VPUNPCKLWD Y11, Y15, Y6;         \
	VPUNPCKHWD Y11, Y15, Y7;         \
	OP(Y0, Y4, Y8, Y9);              \
	OP(Y1, Y5, Y10, Y11);            \
	OP(Y2, Y6, Y8, Y9);              \
	OP(Y3, Y7, Y10, Y11);            \
	BF16NARROW(Y0, Y8, Y9, Y10);     \
	BF16NARROW(Y1, Y8, Y9, Y10);     \
	BF16NARROW(Y2, Y8, Y9, Y10);     \
	BF16NARROW(Y3, Y8, Y9, Y10);     \
	VPACKUSDW Y1, Y0, Y0;            \
	VPACKUSDW Y3, Y2, Y2;            \
	VMOVDQU Y0, 0(DI)(AX*1);         \
	VMOVDQU Y2, 32(DI)(AX*1);        \
	ADDQ $64, AX;                    \
	CMPQ AX, CX;                     \
	JB loop;                         \
	VZEROUPPER;                      \
	RET

BF16OP(·addBF16, ADDPS)
BF16OP(·mulBF16, MULPS)
BF16OP(·minBF16, MINPS)
BF16OP(·maxBF16, MAXPS)

// The divide kernels: buf[i] /= q over n bytes, n > 0 a multiple of 128 (64
// for the 16-bit floats).

// func divF32(buf *byte, n int, q float32)
TEXT ·divF32(SB), NOSPLIT, $0-20
	MOVQ buf+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS q+16(FP), Y8
	XORQ AX, AX
loop:
	VMOVUPS 0(DI)(AX*1), Y0
	VMOVUPS 32(DI)(AX*1), Y1
	VMOVUPS 64(DI)(AX*1), Y2
	VMOVUPS 96(DI)(AX*1), Y3
	VDIVPS Y8, Y0, Y0
	VDIVPS Y8, Y1, Y1
	VDIVPS Y8, Y2, Y2
	VDIVPS Y8, Y3, Y3
	VMOVUPS Y0, 0(DI)(AX*1)
	VMOVUPS Y1, 32(DI)(AX*1)
	VMOVUPS Y2, 64(DI)(AX*1)
	VMOVUPS Y3, 96(DI)(AX*1)
	ADDQ $128, AX
	CMPQ AX, CX
	JB loop
	VZEROUPPER
	RET

// func divF64(buf *byte, n int, q float64)
TEXT ·divF64(SB), NOSPLIT, $0-24
	MOVQ buf+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSD q+16(FP), Y8
	XORQ AX, AX
loop:
	VMOVUPD 0(DI)(AX*1), Y0
	VMOVUPD 32(DI)(AX*1), Y1
	VMOVUPD 64(DI)(AX*1), Y2
	VMOVUPD 96(DI)(AX*1), Y3
	VDIVPD Y8, Y0, Y0
	VDIVPD Y8, Y1, Y1
	VDIVPD Y8, Y2, Y2
	VDIVPD Y8, Y3, Y3
	VMOVUPD Y0, 0(DI)(AX*1)
	VMOVUPD Y1, 32(DI)(AX*1)
	VMOVUPD Y2, 64(DI)(AX*1)
	VMOVUPD Y3, 96(DI)(AX*1)
	ADDQ $128, AX
	CMPQ AX, CX
	JB loop
	VZEROUPPER
	RET

// func divF16(buf *byte, n int, q float32)
TEXT ·divF16(SB), NOSPLIT, $0-20
	MOVQ buf+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS q+16(FP), Y8
	XORQ AX, AX
loop:
	VCVTPH2PS 0(DI)(AX*1), Y0
	VCVTPH2PS 16(DI)(AX*1), Y1
	VCVTPH2PS 32(DI)(AX*1), Y2
	VCVTPH2PS 48(DI)(AX*1), Y3
	VDIVPS Y8, Y0, Y0
	VDIVPS Y8, Y1, Y1
	VDIVPS Y8, Y2, Y2
	VDIVPS Y8, Y3, Y3
	VCVTPS2PH $0, Y0, 0(DI)(AX*1)
	VCVTPS2PH $0, Y1, 16(DI)(AX*1)
	VCVTPS2PH $0, Y2, 32(DI)(AX*1)
	VCVTPS2PH $0, Y3, 48(DI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, CX
	JB loop
	VZEROUPPER
	RET

// func divBF16(buf *byte, n int, q float32)
TEXT ·divBF16(SB), NOSPLIT, $0-20
	MOVQ buf+0(FP), DI
	MOVQ n+8(FP), CX
	VBROADCASTSS q+16(FP), Y7
	XORQ AX, AX
	BF16CONST
loop:
	VMOVDQU 0(DI)(AX*1), Y8
	VMOVDQU 32(DI)(AX*1), Y9
	VPUNPCKLWD Y8, Y15, Y0
	VPUNPCKHWD Y8, Y15, Y1
	VPUNPCKLWD Y9, Y15, Y2
	VPUNPCKHWD Y9, Y15, Y3
	VDIVPS Y7, Y0, Y0
	VDIVPS Y7, Y1, Y1
	VDIVPS Y7, Y2, Y2
	VDIVPS Y7, Y3, Y3
	BF16NARROW(Y0, Y8, Y9, Y10)
	BF16NARROW(Y1, Y8, Y9, Y10)
	BF16NARROW(Y2, Y8, Y9, Y10)
	BF16NARROW(Y3, Y8, Y9, Y10)
	VPACKUSDW Y1, Y0, Y0
	VPACKUSDW Y3, Y2, Y2
	VMOVDQU Y0, 0(DI)(AX*1)
	VMOVDQU Y2, 32(DI)(AX*1)
	ADDQ $64, AX
	CMPQ AX, CX
	JB loop
	VZEROUPPER
	RET
