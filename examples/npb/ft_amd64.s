#include "textflag.h"

// FT's Stockham butterflies, two complex numbers per AVX register (one per
// 128-bit lane: re, im). Every value gets the IEEE operations of the Go
// loops of stockham (ft.go) in the same order, so the results are
// bit-identical: a complex product t·w is [tr·wr - ti·wi, ti·wr + tr·wi]
// (VADDSUBPD of t·wr and swap(t)·wi), the sum's order immaterial.

// Sign bits of the even lanes: [-s, s, -s, s] from a broadcast s.
DATA ftNegEven<>+0(SB)/8, $0x8000000000000000
DATA ftNegEven<>+8(SB)/8, $0
DATA ftNegEven<>+16(SB)/8, $0x8000000000000000
DATA ftNegEven<>+24(SB)/8, $0
GLOBL ftNegEven<>(SB), RODATA|NOPTR, $32

// func ftRadix4(y, x *complex128, run, q4run int, w *[6]float64, sign float64)
TEXT ·ftRadix4(SB), NOSPLIT, $0-48
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         run+16(FP), CX
	MOVQ         q4run+24(FP), R12
	MOVQ         w+32(FP), BX
	SHLQ         $4, R12              // bytes between xa, xb, xc, xd
	SHLQ         $4, CX               // bytes of a run: between y0 .. y3
	LEAQ         (SI)(R12*1), R8
	LEAQ         (R8)(R12*1), R9
	LEAQ         (R9)(R12*1), R10
	LEAQ         (DI)(CX*1), DX
	LEAQ         (DX)(CX*1), R13
	VBROADCASTSD 0(BX), Y7            // w1r
	VBROADCASTSD 8(BX), Y8            // w1i
	VBROADCASTSD 16(BX), Y9           // w2r
	VBROADCASTSD 24(BX), Y10          // w2i
	VBROADCASTSD 32(BX), Y11          // w3r
	VBROADCASTSD 40(BX), Y12          // w3i
	VBROADCASTSD sign+40(FP), Y13
	VXORPD       ftNegEven<>(SB), Y13, Y13 // [-s, s, -s, s]
	LEAQ         (R13)(CX*1), BX
	XORQ         AX, AX
	MOVQ         CX, R12
	ANDQ         $-32, R12

r4loop:
	CMPQ      AX, R12
	JGE       r4tail
	VMOVUPD   (SI)(AX*1), Y0         // a
	VMOVUPD   (R9)(AX*1), Y2         // c
	VADDPD    Y2, Y0, Y4             // apc
	VSUBPD    Y2, Y0, Y5             // amc
	VMOVUPD   (R8)(AX*1), Y1         // b
	VMOVUPD   (R10)(AX*1), Y3        // d
	VADDPD    Y3, Y1, Y6             // bpd
	VSUBPD    Y3, Y1, Y1             // b - d
	VPERMILPD $5, Y1, Y1             // [bi-di, br-dr]
	VMULPD    Y13, Y1, Y1            // j·(b-d) = [-s(bi-di), s(br-dr)]
	VADDPD    Y6, Y4, Y0             // y0 = apc + bpd
	VMOVUPD   Y0, (DI)(AX*1)
	VSUBPD    Y6, Y4, Y4             // t2 = apc - bpd
	VSUBPD    Y1, Y5, Y6             // t1 = amc - j
	VADDPD    Y1, Y5, Y5             // t3 = amc + j
	VPERMILPD $5, Y6, Y0
	VMULPD    Y7, Y6, Y6
	VMULPD    Y8, Y0, Y0
	VADDSUBPD Y0, Y6, Y6             // y1 = t1·w1
	VMOVUPD   Y6, (DX)(AX*1)
	VPERMILPD $5, Y4, Y0
	VMULPD    Y9, Y4, Y4
	VMULPD    Y10, Y0, Y0
	VADDSUBPD Y0, Y4, Y4             // y2 = t2·w2
	VMOVUPD   Y4, (R13)(AX*1)
	VPERMILPD $5, Y5, Y0
	VMULPD    Y11, Y5, Y5
	VMULPD    Y12, Y0, Y0
	VADDSUBPD Y0, Y5, Y5             // y3 = t3·w3
	VMOVUPD   Y5, (BX)(AX*1)
	ADDQ      $32, AX
	JMP       r4loop

r4tail:
	CMPQ      AX, CX
	JGE       r4done
	VMOVUPD   (SI)(AX*1), X0
	VMOVUPD   (R9)(AX*1), X2
	VADDPD    X2, X0, X4
	VSUBPD    X2, X0, X5
	VMOVUPD   (R8)(AX*1), X1
	VMOVUPD   (R10)(AX*1), X3
	VADDPD    X3, X1, X6
	VSUBPD    X3, X1, X1
	VPERMILPD $1, X1, X1
	VMULPD    X13, X1, X1
	VADDPD    X6, X4, X0
	VMOVUPD   X0, (DI)(AX*1)
	VSUBPD    X6, X4, X4
	VSUBPD    X1, X5, X6
	VADDPD    X1, X5, X5
	VPERMILPD $1, X6, X0
	VMULPD    X7, X6, X6
	VMULPD    X8, X0, X0
	VADDSUBPD X0, X6, X6
	VMOVUPD   X6, (DX)(AX*1)
	VPERMILPD $1, X4, X0
	VMULPD    X9, X4, X4
	VMULPD    X10, X0, X0
	VADDSUBPD X0, X4, X4
	VMOVUPD   X4, (R13)(AX*1)
	VPERMILPD $1, X5, X0
	VMULPD    X11, X5, X5
	VMULPD    X12, X0, X0
	VADDSUBPD X0, X5, X5
	VMOVUPD   X5, (BX)(AX*1)
	ADDQ      $16, AX
	JMP       r4tail

r4done:
	VZEROUPPER
	RET

// func ftRadix2(y, x *complex128, run, halfrun int, wr, wi float64)
TEXT ·ftRadix2(SB), NOSPLIT, $0-48
	MOVQ         y+0(FP), DI
	MOVQ         x+8(FP), SI
	MOVQ         run+16(FP), CX
	MOVQ         halfrun+24(FP), R12
	SHLQ         $4, R12
	SHLQ         $4, CX
	LEAQ         (SI)(R12*1), R8      // c
	LEAQ         (DI)(CX*1), DX       // y1
	VBROADCASTSD wr+32(FP), Y7
	VBROADCASTSD wi+40(FP), Y8
	XORQ         AX, AX
	MOVQ         CX, R12
	ANDQ         $-32, R12

r2loop:
	CMPQ      AX, R12
	JGE       r2tail
	VMOVUPD   (SI)(AX*1), Y0
	VMOVUPD   (R8)(AX*1), Y1
	VADDPD    Y1, Y0, Y2
	VMOVUPD   Y2, (DI)(AX*1)
	VSUBPD    Y1, Y0, Y3
	VPERMILPD $5, Y3, Y0
	VMULPD    Y7, Y3, Y3
	VMULPD    Y8, Y0, Y0
	VADDSUBPD Y0, Y3, Y3
	VMOVUPD   Y3, (DX)(AX*1)
	ADDQ      $32, AX
	JMP       r2loop

r2tail:
	CMPQ      AX, CX
	JGE       r2done
	VMOVUPD   (SI)(AX*1), X0
	VMOVUPD   (R8)(AX*1), X1
	VADDPD    X1, X0, X2
	VMOVUPD   X2, (DI)(AX*1)
	VSUBPD    X1, X0, X3
	VPERMILPD $1, X3, X0
	VMULPD    X7, X3, X3
	VMULPD    X8, X0, X0
	VADDSUBPD X0, X3, X3
	VMOVUPD   X3, (DX)(AX*1)
	ADDQ      $16, AX
	JMP       r2tail

r2done:
	VZEROUPPER
	RET
